"""config/foxglove_layout.json, the Foxglove layout `lowrl monitor --foxglove` points at: every message path
in it names a topic the monitor node advertises and fields its ROS 2 schema has (the .msg definitions the
server sends), and each index into the policy stats or the step row is the field its label says
(core/runtime/policy_stats.py STATS_FIELDS, core/runtime/step_row.py HEADER). No ROS: the schemas are the
.msg files, as the server reads them."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lowrl_ros.core.runtime.policy_stats import STATS_FIELDS
from lowrl_ros.core.runtime.step_row import HEADER
from lowrl_ros.core.session.recording import MonitorConfig, message_definition, resolve, share_dirs

LAYOUT = Path(__file__).resolve().parents[1] / "config" / "foxglove_layout.json"
PRIMITIVES = {"bool", "byte", "char", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32",
              "uint32", "int64", "uint64", "string", "wstring"}
TOKEN = re.compile(r'\.@\w+|\.(\w+)|\[(\d+|:)\]|\{(\w+)==("[^"]*"|[\w.-]+)\}')


def layout() -> dict:
    return json.loads(LAYOUT.read_text())


def advertised() -> dict[str, str]:
    """What the monitor serves at the root namespace with the robot's topics on: {topic: pkg/msg/Type}."""
    config = MonitorConfig(foxglove=True, robot_topics=True)
    return {resolve(s.name, "/"): s.type for s in config.topics()}


def schema(type_name: str) -> dict[str, dict[str, str]]:
    """{pkg/Type: {field: type}} of a type and its dependencies, parsed from the ros2msg text the server sends."""
    pkg, _, name = type_name.split("/")
    out: dict[str, dict[str, str]] = {}
    current, package = f"{pkg}/{name}", pkg
    for line in message_definition(type_name, share_dirs()).splitlines():
        if line.startswith("MSG: "):
            current = line[5:].strip()
            package = current.split("/")[0]
            continue
        parts = line.split("#", 1)[0].split()
        if len(parts) < 2 or "=" in parts[1]:  # a blank line, the separator, a constant
            continue
        kind, field = parts[:2]
        base = re.sub(r"<=\d+$", "", kind.split("[")[0])
        if base not in PRIMITIVES and "/" not in base:
            base = "std_msgs/Header" if base == "Header" else f"{package}/{base}"
        elif "/" in base:
            base = f"{base.split('/')[0]}/{base.split('/')[-1]}"
        out.setdefault(current, {})[field] = base + ("[]" if "[" in kind else "")
    return out


def check_path(path: str, topics: dict[str, str]) -> tuple[str, list]:
    """Walk a Foxglove message path through the topic's schema; returns (topic, [(field, index)...]).
    Fails on an unknown topic, field, filter field, or an index into something that is not an array."""
    topic = max((t for t in topics if path == t or path.startswith(t + ".")), key=len, default=None)
    assert topic is not None, f"{path}: no advertised topic (the monitor serves {sorted(topics)})"
    kind = topics[topic]
    fields = schema(kind)
    current, steps = "/".join(kind.split("/")[::2]), []
    rest = path[len(topic):]
    pos = 0
    while pos < len(rest):
        m = TOKEN.match(rest, pos)
        assert m, f"{path}: cannot read {rest[pos:]!r}"
        pos = m.end()
        name, index, key = m.group(1), m.group(2), m.group(3)
        if m.group(0).startswith(".@"):  # a Plot modifier (@derivative): no field
            continue
        if name is not None:
            assert not current.endswith("[]"), f"{path}: .{name} on an array; index it first"
            assert current in fields and name in fields[current], f"{path}: {current} has no field {name!r}"
            current = fields[current][name]
            steps.append((name, None))
        elif index is not None:
            assert current.endswith("[]"), f"{path}: [{index}] into {current}, not an array"
            current = current[:-2]
            steps.append((None, index))
        else:
            assert current in fields and key in fields[current], f"{path}: filter on {key!r}, not a field of {current}"
    return topic, steps


def message_paths(doc: dict) -> list[tuple[str, str, str]]:
    """(panel id, path, label) of every message path or topic the layout's panels read."""
    out = []
    for panel, config in doc["configById"].items():
        for p in config.get("paths", []):
            out.append((panel, p["value"], p.get("label", "")))
        for key in ("topicToRender", "topicPath"):
            if key in config:
                out.append((panel, config[key], ""))
    return out


def panel_ids(tree) -> list[str]:
    return [tree] if isinstance(tree, str) else panel_ids(tree["first"]) + panel_ids(tree["second"])


def test_layout_is_an_importable_foxglove_layout():
    doc = layout()
    assert {"configById", "layout", "globalVariables"} <= set(doc)
    ids = panel_ids(doc["layout"])
    assert sorted(ids) == sorted(doc["configById"]), "each panel is placed once and configured"
    kinds = {i.split("!")[0] for i in ids}
    assert {"Plot", "StateTransitions", "DiagnosticSummary", "DiagnosticStatusPanel", "RawMessages"} <= kinds


def test_every_message_path_names_an_advertised_topic_and_fields_of_its_schema():
    topics = advertised()
    seen = set()
    for panel, path, label in message_paths(layout()):
        topic, steps = check_path(path, topics)
        seen.add(topic)
        if topic == "/lowrl/policy/stats" and steps[:1] == [("data", None)] and len(steps) > 1:
            k = int(steps[1][1])
            assert k < len(STATS_FIELDS) and STATS_FIELDS[k] in label, (panel, path, label, STATS_FIELDS)
        if topic == "/lowrl/policy/step" and len(steps) > 1:
            k = int(steps[1][1])
            assert k < len(HEADER) and HEADER[k] in label, (panel, path, label, HEADER)
    assert {"/lowrl/policy/stats", "/lowrl/compute_tier", "/diagnostics", "/joint_states"} <= seen


@pytest.mark.parametrize("bad", ["/lowrl/policy/stat.data[0]", "/lowrl/policy/stats.values[0]",
                                 "/lowrl/compute_tier.data[0]", "/diagnostics.status[:]{nme==\"x\"}.level",
                                 "/joint_states.position.x"])
def test_the_check_refuses_a_wrong_path(bad):
    with pytest.raises(AssertionError):
        check_path(bad, advertised())
