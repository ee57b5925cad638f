"""Every declared ROS parameter of the five nodes against a committed snapshot (test/data/param_snapshot.json).

Each real node is started (rclpy, in-process) with its shipped YAML (``--params-file config/<node>.yaml``)
plus the few overrides a start needs (a kit, a key, a temporary work directory; their values are not
compared). For every declared parameter the snapshot holds the default given to ``declare_parameter``
and its Python type, the value after the YAML, the parameter type, ``read_only``, ``dynamic_typing``
and the ranges. Descriptions are left out on purpose: their text may improve; names, defaults, types,
flags and ranges may not change unnoticed.

Regenerate only on purpose (a deliberate parameter change), and review the diff::

    LOWRL_WRITE_PARAM_SNAPSHOT=1 python -m pytest -q test/test_param_snapshot.py
"""
from __future__ import annotations

import json
import math
import os
from typing import Any

import pytest

# Every case starts a real node with its shipped YAML.
pytestmark = pytest.mark.ros

from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from shipped_nodes import NODES, ROOT, declared, start, stop  # noqa: E402

SNAPSHOT = ROOT / "test" / "data" / "param_snapshot.json"
WRITE = os.environ.get("LOWRL_WRITE_PARAM_SNAPSHOT") == "1"
MASK = "<set by the test>"


def plain(value: Any) -> Any:
    """A JSON-comparable form: NaN as a string (NaN != NaN), arrays as lists, types by name."""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else value
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        return [plain(v) for v in (value.tolist() if hasattr(value, "tolist") else value)]
    if isinstance(value, Parameter.Type):
        return f"<{value.name}>"
    return value


class Recorder:
    """Wraps Node.declare_parameters to keep the default each parameter was declared with."""

    def __init__(self, monkeypatch) -> None:
        self.defaults: dict[str, Any] = {}
        original = Node.declare_parameters

        def declare_parameters(node, namespace, parameters, ignore_override=False):
            for t in parameters:
                name = f"{namespace}.{t[0]}" if namespace else t[0]
                value = (t[1].value if isinstance(t[1], Parameter) else t[1]) if len(t) > 1 else None
                # The Python type too: 1 == 1.0 in a comparison, but an int default makes an INTEGER parameter.
                self.defaults[name] = (plain(value), type(value).__name__)
            return original(node, namespace, parameters, ignore_override)

        monkeypatch.setattr(Node, "declare_parameters", declare_parameters)


def describe(node: Node, defaults: dict[str, Any], masked: set[str]) -> dict[str, dict[str, Any]]:
    out = {}
    for name in declared(node):
        p = node.get_parameter(name)
        d = node.describe_parameter(name)
        out[name] = {
            "default": MASK if name in masked else defaults[name][0],
            "default_type": defaults[name][1],
            "value": MASK if name in masked else plain(p.value),
            "type": p.type_.name,
            "read_only": bool(d.read_only),
            "dynamic_typing": bool(d.dynamic_typing),
            "floating_point_range": [[r.from_value, r.to_value, r.step] for r in d.floating_point_range],
            "integer_range": [[r.from_value, r.to_value, r.step] for r in d.integer_range],
        }
    return out


@pytest.mark.parametrize("name", NODES)
def test_declared_parameters_match_the_snapshot(name, ros_context, tiny_kit, tmp_path, monkeypatch):
    recorder = Recorder(monkeypatch)
    node, over = start(name, ros_context, tmp_path, tiny_kit[0])
    try:
        got = describe(node, recorder.defaults, set(over))
    finally:
        stop(node)
    assert got, f"{name} declared no parameters"
    snapshot = json.loads(SNAPSHOT.read_text()) if SNAPSHOT.exists() else {}
    if WRITE:
        snapshot[name] = got
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
        return
    assert name in snapshot, f"no snapshot for {name}: see this module's docstring"
    want = snapshot[name]
    assert sorted(got) == sorted(want), f"{name}: declared names changed"
    for param in want:
        assert got[param] == want[param], f"{name}.{param}"
