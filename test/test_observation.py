"""Robot file loader and observation terms (pure: no ROS)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from lowrl_ros.core.runtime.artifact import PolicyContract
from lowrl_ros.core.runtime.obs_adapter import ObservationError
from lowrl_ros.core.runtime.observation import ObservationBuilder, ObservationSpec, projected_gravity
from lowrl_ros.core.runtime.robot_file import RobotFileError, load_robot_file, parse_robot_file

ROOT = Path(__file__).resolve().parents[1]
JOINTS = ["a", "b", "c"]
POSE = [0.1, 0.2, 0.3]


def spec(terms: list[dict], period: float = 0.02, **top) -> ObservationSpec:
    data = {"joints": JOINTS, "default_pose": POSE, "observation": terms, **top}
    return ObservationSpec.from_robot_file(parse_robot_file(data, "robot.yaml"), period)


def contract(n_obs: int, names=None, n_act: int = 3) -> PolicyContract:
    return PolicyContract(obs_names=tuple(names or [f"obs_{i}" for i in range(n_obs)]),
                          action_names=tuple(f"a{i}" for i in range(n_act)),
                          action_low=(-1.0,) * n_act, action_high=(1.0,) * n_act)


JS = (("c", "a", "b"), [3.0, 1.0, 2.0], [30.0, 10.0, 20.0], [-3.0, -1.0, -2.0])  # driver order != policy order


def test_joint_terms_by_name_relative_scale_offset_clip():
    s = spec([{"term": "joint_position", "topic": "joint_states", "relative": True},
              {"term": "joint_velocity", "topic": "joint_states", "scale": 0.05},
              {"term": "joint_effort", "topic": "joint_states", "offset": [1.0, 0.0, 0.0], "clip": [-1.5, 1.5]}])
    b = ObservationBuilder(s)
    b.update("joint_states", JS, 10.0)
    obs = b.build(10.001)
    np.testing.assert_allclose(obs[:3], [0.9, 1.8, 2.7])
    np.testing.assert_allclose(obs[3:6], [0.5, 1.0, 1.5])
    np.testing.assert_allclose(obs[6:], [-1.5, -1.5, -1.5])  # (-1-1)*1 = -2 -> -1.5; -2, -3 -> -1.5
    assert s.obs_dim == 9 and [t.topic for t in s.topics] == ["joint_states"]


def test_joint_position_cos_sin_reproduces_pendulum():
    s = spec([{"term": "joint_position", "topic": "joint_states", "joints": ["a"], "function": "cos"},
              {"term": "joint_position", "topic": "joint_states", "joints": ["a"], "function": "sin"},
              {"term": "joint_velocity", "topic": "joint_states", "joints": ["a"]}])
    b = ObservationBuilder(s)
    b.update("joint_states", JS, 0.0)
    np.testing.assert_allclose(b.build(0.0), [math.cos(1.0), math.sin(1.0), 10.0])


def test_missing_joint_names_the_term():
    b = ObservationBuilder(spec([{"term": "joint_position", "topic": "joint_states"}]))
    b.update("joint_states", (("a", "b"), [0.0, 0.0], [], []), 0.0)
    with pytest.raises(ObservationError, match=r"term 0 'joint_position'.*joint 'c' is not in the JointState"):
        b.build(0.0)


def test_forget_drops_one_kind_of_input_and_keeps_the_others():
    """A reset request forgets the joint states (the soft start after the ready begins at a pose measured after
    it) and keeps the rest: a velocity command sent once would otherwise be missing until it is sent again."""
    b = ObservationBuilder(spec([{"term": "joint_position", "topic": "joint_states"},
                                 {"term": "velocity_command", "topic": "cmd_vel"}]))
    b.update("joint_states", JS, 0.0)
    b.update("cmd_vel", (0.4, 0.0, 0.0), 0.0)
    assert b.joint_state() is not None
    b.forget("joint_state")
    assert b.joint_state() is None and b.age("cmd_vel", 1.0) == 1.0
    with pytest.raises(ObservationError, match="joint_states"):
        b.build(0.01)


def test_the_robot_clock_is_its_joint_states_else_the_first_topic():
    """What event mode acts on and a fixed_rate loop locks its phase to (core/runtime/realtime.py PhaseLock)."""
    b = ObservationBuilder(spec([{"term": "velocity_command", "topic": "cmd_vel"},
                                 {"term": "joint_position", "topic": "joint_states"}]))
    assert b.clock_topic == "joint_states" and b.clock_age(1.0) is None
    b.update("cmd_vel", (0.4, 0.0, 0.0), 0.5)
    b.update("joint_states", JS, 0.75)
    assert b.clock_age(1.0) == 0.25
    assert ObservationBuilder(spec([{"term": "velocity_command", "topic": "cmd_vel"}])).clock_topic == "cmd_vel"


def _quat(axis, angle, order):
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    w, (x, y, z) = math.cos(angle / 2), axis * math.sin(angle / 2)
    return [x, y, z, w] if order == "xyzw" else [w, x, y, z]


@pytest.mark.parametrize("order", ["xyzw", "wxyz"])
def test_projected_gravity_known_quaternions_both_orders(order):
    np.testing.assert_allclose(projected_gravity(_quat([1, 0, 0], 0.0, order), order), [0, 0, -1], atol=1e-12)
    # Rolled +90 deg about x: gravity lies along body -y; pitched +90 deg about y: along body +x.
    np.testing.assert_allclose(projected_gravity(_quat([1, 0, 0], math.pi / 2, order), order), [0, -1, 0],
                               atol=1e-12)
    np.testing.assert_allclose(projected_gravity(_quat([0, 1, 0], math.pi / 2, order), order), [1, 0, 0],
                               atol=1e-12)
    # Yaw does not change gravity; upside down flips it; an unnormalised quaternion is normalised.
    np.testing.assert_allclose(projected_gravity(_quat([0, 0, 1], 1.0, order), order), [0, 0, -1], atol=1e-12)
    np.testing.assert_allclose(projected_gravity(_quat([1, 0, 0], math.pi, order), order), [0, 0, 1], atol=1e-12)
    q = np.array(_quat([1, 1, 0], 0.7, order)) * 3.0
    g = projected_gravity(q, order)
    r = _rotation(_quat([1, 1, 0], 0.7, "wxyz"))
    np.testing.assert_allclose(g, r.T @ [0, 0, -1], atol=1e-12)


def _rotation(wxyz):
    w, x, y, z = wxyz
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def test_the_wrong_quaternion_order_gives_a_different_gravity():
    q = _quat([1, 0, 0], math.pi / 2, "xyzw")
    assert not np.allclose(projected_gravity(q, "xyzw"), projected_gravity(q, "wxyz"))


def test_imu_terms_and_zero_quaternion():
    s = spec([{"term": "imu_angular_velocity", "topic": "imu", "scale": 0.25},
              {"term": "projected_gravity", "topic": "imu", "quaternion_order": "xyzw"},
              {"term": "imu_linear_acceleration", "topic": "imu"}])
    b = ObservationBuilder(s)
    b.update("imu", ([0, 0, 0, 1], [4.0, 8.0, -4.0], [0.0, 0.0, 9.81]), 0.0)
    np.testing.assert_allclose(b.build(0.0), [1, 2, -1, 0, 0, -1, 0, 0, 9.81])
    b.update("imu", ([0, 0, 0, 0], [0, 0, 0], [0, 0, 0]), 0.0)
    with pytest.raises(ObservationError, match="'projected_gravity'.*zero or not finite"):
        b.build(0.0)


def test_quaternion_order_is_required_and_imu_is_xyzw():
    with pytest.raises(RobotFileError, match="quaternion_order is required"):
        spec([{"term": "projected_gravity", "topic": "imu"}])
    with pytest.raises(RobotFileError, match="must be xyzw"):
        spec([{"term": "projected_gravity", "topic": "imu", "quaternion_order": "wxyz"}])
    s = spec([{"term": "projected_gravity", "topic": "quat", "quaternion_order": "wxyz", "type": "array"}])
    b = ObservationBuilder(s)
    b.update("quat", _quat([1, 0, 0], math.pi / 2, "wxyz"), 0.0)
    np.testing.assert_allclose(b.build(0.0), [0, -1, 0], atol=1e-12)


def test_velocity_command_ranges_last_action_and_array():
    s = spec([{"term": "velocity_command", "topic": "cmd_vel", "ranges": [[-1, 1], [-0.5, 0.5], [-1, 1]]},
              {"term": "last_action"},
              {"term": "array", "topic": "height_scan", "size": 2, "clip": [-1.0, 1.0]}])
    b = ObservationBuilder(s)
    b.update("cmd_vel", [2.0, -0.2, 9.0, 9.0, 9.0, -3.0], 0.0)
    b.update("height_scan", [0.5, -7.0], 0.0)
    np.testing.assert_allclose(b.build(0.0), [1.0, -0.2, -1.0, 0, 0, 0, 0.5, -1.0])  # no action yet: zeros
    b.set_last_action(np.array([0.1, 0.2, 0.3]))
    np.testing.assert_allclose(b.build(0.0)[3:6], [0.1, 0.2, 0.3])
    b.update("height_scan", [1.0, 2.0, 3.0], 0.0)
    with pytest.raises(ObservationError, match="'array' .*has 3 values, size is 2"):
        b.build(0.0)


def test_after_step_feeds_last_action_policy_hold_or_zeros():
    """The last_action rule: the executed policy action; a held tick keeps it; safe, nothing or a failed step: zeros."""
    from lowrl_ros.core.runtime.control import StepResult

    b = ObservationBuilder(spec([{"term": "last_action"}]))
    executed = np.array([0.1, 0.2, 0.3])
    b.after_step(StepResult(executed, "policy", policy_action=executed))
    np.testing.assert_allclose(b.build(0.0), executed)
    b.after_step(StepResult(executed, "hold"))
    np.testing.assert_allclose(b.build(0.0), executed)
    for result in (StepResult(np.zeros(3), "safe", "watchdog"), StepResult(np.empty(0), "none"), None):
        b.after_step(StepResult(executed, "policy", policy_action=executed))
        b.after_step(result)
        np.testing.assert_allclose(b.build(0.0), np.zeros(3))


@pytest.mark.parametrize("order,expected", [("oldest_first", [[1, 1, 1], [1, 1, 2], [1, 2, 3]]),
                                            ("newest_first", [[1, 1, 1], [2, 1, 1], [3, 2, 1]])])
def test_history_order(order, expected):
    s = spec([{"term": "array", "topic": "x", "size": 1, "history": {"length": 3, "order": order}}])
    b = ObservationBuilder(s)
    got = []
    for v in (1.0, 2.0, 3.0):
        b.update("x", [v], 0.0)
        got.append(b.build(0.0).tolist())
    assert got == expected  # a fresh history is filled with the first value (as Isaac Lab's)
    assert s.obs_dim == 3 and len(s.entry_names()) == 3


def test_history_order_must_be_stated():
    with pytest.raises(RobotFileError, match="order stated"):
        spec([{"term": "array", "topic": "x", "size": 1, "history": {"length": 3}}])


def test_staleness_names_the_term_and_restarts_history():
    s = spec([{"term": "joint_position", "topic": "joint_states"},
              {"term": "imu_angular_velocity", "topic": "imu", "history": {"length": 2, "order": "oldest_first"}}],
             period=0.02)
    assert s.terms[1].timeout_s == pytest.approx(0.1)  # default: 5 control periods
    b = ObservationBuilder(s)
    with pytest.raises(ObservationError, match="term 0 'joint_position' \\(topic joint_states\\): no message"):
        b.build(0.0)
    b.update("joint_states", JS, 1.0)
    b.update("imu", ([0, 0, 0, 1], [1.0, 1.0, 1.0], [0, 0, 0]), 1.0)
    b.build(1.01)
    b.update("joint_states", JS, 1.2)
    with pytest.raises(ObservationError, match="term 1 'imu_angular_velocity' \\(topic imu\\): stale, newest "
                                               "message is 200 ms old"):
        b.build(1.2)
    b.update("imu", ([0, 0, 0, 1], [5.0, 5.0, 5.0], [0, 0, 0]), 1.2)
    np.testing.assert_allclose(b.build(1.2)[3:], [5.0] * 6)  # no value from before the gap


def test_contract_check_sizes_and_names():
    s = spec([{"term": "imu_angular_velocity", "topic": "imu", "name": "base_ang_vel"},
              {"term": "joint_position", "topic": "joint_states", "relative": True, "name": "joint_pos"},
              {"term": "last_action"}])
    s.check_against(contract(9))  # generic names: sizes only
    with pytest.raises(ValueError, match=r"add up to 9 entries \(imu_angular_velocity=3, joint_position=3, "
                                         r"last_action=3\) but the policy reads 10"):
        s.check_against(contract(10))
    good = [f"base_ang_vel_{i}" for i in range(3)] + [f"joint_pos_{j}" for j in JOINTS] + [f"actions_{i}" for i in
                                                                                          range(3)]
    with pytest.raises(ValueError, match="entry 6 is 'actions_0' in the policy but comes from observation term 2 "
                                         "'last_action'"):
        s.check_against(contract(9, good))
    good[6:] = [f"last_action_{i}" for i in range(3)]
    s.check_against(contract(9, good))
    with pytest.raises(ValueError, match="has size 3 but the policy has 2 actions"):
        s.check_against(contract(9, n_act=2))


@pytest.mark.parametrize("data,match", [
    ({"observation": [{"term": "last_action", "size": 1}], "robot": 1}, "unknown top-level key.*known keys are joints"),
    ({"joints": ["a", "a"], "observation": [{"term": "last_action"}]}, "more than once"),
    ({"joints": ["a"], "default_pose": [0, 1], "observation": [{"term": "last_action"}]}, "default_pose has 2"),
    ({"joints": ["a"]}, "observation must be a non-empty list"),
    ({"joints": ["a"], "observation": [{"term": "joint_speed", "topic": "j"}]}, "term 'joint_speed' is unknown"),
    ({"joints": ["a"], "observation": [{"term": "joint_velocity", "topic": "j", "scael": 1}]}, "unknown key.*scael"),
    ({"joints": ["a"], "observation": [{"term": "joint_velocity"}]}, "'topic' is required"),
    ({"joints": ["a"], "observation": [{"term": "joint_position", "topic": "j", "relative": True}]},
     "needs the top-level default_pose"),
    ({"joints": ["a"], "observation": [{"term": "joint_velocity", "topic": "j", "scale": [1, 2]}]}, "scale has 2"),
    ({"joints": ["a"], "observation": [{"term": "joint_velocity", "topic": "j", "qos": "fast"}]}, "qos 'fast'"),
    ({"joints": ["a"], "observation": [{"term": "joint_velocity", "topic": "j"},
                                       {"term": "array", "topic": "j", "size": 1}]}, "one message type per topic"),
])
def test_bad_robot_files_say_what_to_fix(data, match):
    with pytest.raises(RobotFileError, match=match):
        ObservationSpec.from_robot_file(parse_robot_file(data, "robot.yaml"), 0.02)


def test_load_robot_file_errors(tmp_path):
    with pytest.raises(RobotFileError, match="cannot be read"):
        load_robot_file(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("joints: [a\n")
    with pytest.raises(RobotFileError, match="not valid YAML"):
        load_robot_file(bad)


@pytest.mark.parametrize("name", ["pendulum.yaml", "legged_example.yaml"])
def test_shipped_robot_files_parse(name):
    robot = load_robot_file(ROOT / "config" / "robots" / name)
    s = ObservationSpec.from_robot_file(robot, 0.02)
    assert s.obs_dim > 0 and set(robot.raw) <= {"joints", "default_pose", "interface", "observation", "action",
                                                "output", "safety"}
    if name == "legged_example.yaml":
        assert len(robot.joints) == 12 and s.obs_dim == 45 + 10  # Isaac Lab layout, no base_lin_vel, + a 10-point scan
        assert yaml.safe_load((ROOT / "config" / "robots" / name).read_text())["joints"] == list(robot.joints)


def test_short_joint_array_and_nan_name_the_term():
    b = ObservationBuilder(spec([{"term": "joint_velocity", "topic": "joint_states"}]))
    b.update("joint_states", (("a", "b", "c"), [0.0] * 3, [], []), 0.0)
    with pytest.raises(ObservationError, match="'joint_velocity'.*has 0 velocity values for 3 names"):
        b.build(0.0)
    b.update("joint_states", (("a", "b", "c"), [0.0] * 3, [0.0, float("nan"), 0.0], []), 0.0)
    with pytest.raises(ObservationError, match="'joint_velocity'.*entry b is nan"):
        b.build(0.0)


def _reference_term(t, sample, last_action, pose) -> np.ndarray:
    """The documented per-term formula, written plainly (no preallocation): what build() must equal."""
    if t.source == "joint_state":
        names, pos, vel, eff = sample
        values = np.asarray({"joint_position": pos, "joint_velocity": vel, "joint_effort": eff}[t.term], float)
        raw = values[[list(names).index(j) for j in t.joints]]
        if t.relative:
            raw = raw - np.array([pose[j] for j in t.joints])
        raw = {"cos": np.cos, "sin": np.sin}.get(t.function, lambda x: x)(raw)
    elif t.source == "imu":
        raw = projected_gravity(sample[0], "xyzw") if t.term == "projected_gravity" else np.asarray(sample[1], float)
    elif t.source == "twist":
        raw = np.array([sample[0], sample[1], sample[5]])
        if t.ranges is not None:
            raw = np.clip(raw, t.ranges[:, 0], t.ranges[:, 1])
    elif t.source == "action":
        raw = np.zeros(t.size) if last_action is None else last_action
    else:
        raw = np.asarray(sample, float)
    value = (raw - t.offset) * t.scale
    return np.clip(value, *t.clip) if t.clip is not None else value


def test_build_equals_the_plain_formula_over_random_ticks_with_histories():
    """The preallocated per-term plan gives exactly the plain per-term formula, tick after tick."""
    s = spec([{"term": "imu_angular_velocity", "topic": "imu", "scale": 0.25,
               "history": {"length": 3, "order": "newest_first"}},
              {"term": "projected_gravity", "topic": "imu", "quaternion_order": "xyzw"},
              {"term": "velocity_command", "topic": "cmd_vel", "ranges": [[-1, 1], [-0.5, 0.5], [-1, 1]],
               "scale": [2.0, 2.0, 0.25], "offset": 0.1, "clip": [-1.5, 1.5]},
              {"term": "joint_position", "topic": "joint_states", "relative": True, "clip": [-0.3, 0.3]},
              {"term": "joint_position", "name": "cos_q", "topic": "joint_states", "function": "cos",
               "joints": ["c", "a"]},
              {"term": "joint_velocity", "topic": "joint_states", "scale": [0.05, 0.1, 0.2], "offset": 0.5,
               "history": {"length": 2, "order": "oldest_first"}},
              {"term": "last_action"},
              {"term": "array", "topic": "scan", "size": 4, "clip": [-1.0, 1.0]}])
    b = ObservationBuilder(s)
    rng = np.random.default_rng(3)
    pose = dict(zip(JOINTS, POSE))
    steps: dict[int, list] = {}
    last = None
    for tick in range(20):
        names = ("c", "b", "a", "x") if tick % 7 < 4 else ("a", "x", "b", "c")  # the driver's order changes
        js = (names, rng.normal(size=4), rng.normal(size=4), rng.normal(size=4))
        imu = (rng.normal(size=4), rng.normal(size=3), rng.normal(size=3))
        twist = tuple(rng.normal(scale=2.0, size=6))
        scan = rng.normal(scale=2.0, size=4).astype(np.float32)
        for topic, sample in (("joint_states", js), ("imu", imu), ("cmd_vel", twist), ("scan", scan)):
            b.update(topic, sample, float(tick))
        got = b.build(float(tick))
        want = []
        for t in s.terms:
            sample = {"joint_state": js, "imu": imu, "twist": twist, "array": scan}.get(t.source)
            value = _reference_term(t, sample, last, pose)
            if t.history > 1:
                h = steps.setdefault(t.index, [value] * t.history)
                h[:] = (h + [value])[-t.history:] if tick else h
                want.extend(h if t.history_order == "oldest_first" else h[::-1])
            else:
                want.append(value)
        np.testing.assert_array_equal(got, np.concatenate(want))
        last = rng.normal(size=3)
        b.set_last_action(last)


def test_huge_but_finite_values_are_not_reported_as_nan():
    """The finite check's quick dot product overflows for entries near 1e200; the exact check decides."""
    b = ObservationBuilder(spec([{"term": "array", "topic": "scan", "size": 2}]))
    b.update("scan", np.array([1e200, -1e200]), 0.0)
    assert b.build(0.0).tolist() == [1e200, -1e200]
    b.update("scan", np.array([1e200, np.inf]), 0.0)
    with pytest.raises(ObservationError, match="entry 1 is inf"):
        b.build(0.0)
