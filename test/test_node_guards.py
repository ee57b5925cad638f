"""Guards on the node files (lowrl_ros/ros/*_node.py): a node declares, converts and wires; decisions live in core.

Two rules, checked on the source (no ROS needed):

1. Size: a node file has at most :data:`MAX_LINES` lines (a lifecycle node with a real-time thread and
   hot-swap fits in about 500; past that, decisions have settled in the node again: HOUSE.md §1).
2. Classes: every class defined in a node file (at any depth) uses rclpy: it subclasses rclpy's ``Node`` or
   ``LifecycleNode`` (imported from ``rclpy.node`` / ``rclpy.lifecycle``), or it builds such a node in its own
   body (composition: the demo recorder owns a node, its context and its executor). Nothing else: a settings
   dataclass, a parser, a state machine or a helper belongs in core (ROS-free, unit-tested without ROS), or,
   if it needs rclpy, in a ros/ module that is not a node file (e.g. ros/robot_inputs.py, ros/robot_outputs.py).

The cases the nodes still fail are marked ``xfail(strict=True)`` with the reason: when one is fixed the test
XPASSes and fails, so the mark must then go.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NODE_FILES = sorted((ROOT / "lowrl_ros" / "ros").glob("*_node.py"))
MAX_LINES = 500
RCLPY_NODES = {("rclpy.node", "Node"), ("rclpy.lifecycle", "LifecycleNode"), ("rclpy.lifecycle.node", "LifecycleNode")}

# (file stem, rule) -> why it still fails (xfail strict): none today.
KNOWN: dict[tuple[str, str], str] = {}


def rclpy_node_names(tree: ast.Module) -> set[str]:
    """The names this module binds to rclpy's Node/LifecycleNode (``from rclpy.node import Node as N``), plus
    dotted uses of imported rclpy modules (``rclpy.node.Node``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if (node.module, alias.name) in RCLPY_NODES:
                    names.add(alias.asname or alias.name)
    names |= {f"{module}.{name}" for module, name in RCLPY_NODES}
    return names


def dotted(expr: ast.expr) -> str:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return f"{dotted(expr.value)}.{expr.attr}"
    return ""


def classes_without_rclpy(source: str) -> list[str]:
    """Names of the classes that neither subclass an rclpy node nor build one in their body."""
    tree = ast.parse(source)
    nodes = rclpy_node_names(tree)
    bad = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        subclasses = any(dotted(b) in nodes for b in cls.bases)
        builds = any(isinstance(n, ast.Call) and dotted(n.func) in nodes for n in ast.walk(cls))
        if not (subclasses or builds):
            bad.append(cls.name)
    return bad


def case(path: Path, rule: str):
    why = KNOWN.get((path.stem, rule))
    marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
    return pytest.param(path, id=f"{path.stem}-{rule}", marks=marks)


@pytest.mark.parametrize("path", [case(p, "size") for p in NODE_FILES])
def test_a_node_file_has_at_most_500_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, (f"{path.name} has {lines} lines (at most {MAX_LINES}): move the decisions to core "
                                "(lowrl_ros/core, ROS-free, unit-tested without ROS)")


@pytest.mark.parametrize("path", [case(p, "classes") for p in NODE_FILES])
def test_every_class_in_a_node_file_uses_rclpy(path):
    bad = classes_without_rclpy(path.read_text())
    assert not bad, (f"{path.name} defines {', '.join(bad)}, which use(s) no rclpy node: move it to core (a settings "
                     "dataclass, a decision) or to a ros/ helper module that is not a node file")


def test_the_guard_itself_tells_the_rules_apart():
    """The class rule on made-up sources: subclass, composition and alias pass; a plain class or dataclass fails."""
    ok = ("from rclpy.lifecycle import LifecycleNode\nfrom rclpy.node import Node as RosNode\n"
          "class A(LifecycleNode): pass\nclass B(RosNode): pass\n"
          "class C:\n    def __init__(self):\n        self.node = RosNode('c')\n")
    assert classes_without_rclpy(ok) == []
    bad = ("from dataclasses import dataclass\nfrom rclpy.node import Node\n"
           "@dataclass\nclass Settings:\n    x: int = 0\n"
           "class Helper(object):\n    def f(self):\n        return Node\n")
    assert classes_without_rclpy(bad) == ["Settings", "Helper"]
    assert len(NODE_FILES) >= 6  # the glob found the node files
