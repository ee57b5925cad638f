"""JointIndex (core/runtime/joints.py): the one joint name -> index lookup of the policy node, the observation
builder and the fine-tuner."""
from __future__ import annotations

from lowrl_ros.core.runtime.joints import JointIndex


def test_joint_index_finds_joints_in_any_order_and_names_the_missing():
    idx = JointIndex(["b", "a"])
    names = ("a", "x", "b")
    assert idx.take(names, [1.0, 2.0, 3.0]).tolist() == [3.0, 1.0]
    assert idx.take(names, [1.0, 2.0]) is None  # values shorter than names (no efforts)
    assert idx.missing(("a", "x")) == ["b"] and idx.take(("a", "x"), [1.0, 2.0]) is None
    assert idx.missing(["b", "a"]) == [] and idx.take(["b", "a"], [5, 6]).tolist() == [5.0, 6.0]
