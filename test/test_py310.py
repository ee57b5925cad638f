"""Humble has no PyPI wheels, so its two constraints are checked statically here (issue 18 §6):

1. The code parses as Python 3.10 (Ubuntu 22.04's Python, Humble and JetPack 6): ``ast.parse`` with
   ``feature_version=(3, 10)`` refuses newer syntax such as ``except*``; and no standard-library name that
   only 3.11+ has is imported or used (``enum.StrEnum``, ``tomllib``, ``typing.Self``, ``datetime.UTC``, ...).
2. No rclpy API that Humble's rclpy (3.3) lacks is used without a guard: a name from ``HUMBLE_LACKS`` may
   appear only inside ``try:`` with an ``ImportError``/``AttributeError`` handler, or under
   ``if hasattr(...)``. ``lowrl_ros/ros/params.py: add_post_set_callback`` and ``ros/spinning.py:
   make_executor`` are the guarded places today; ``test/test_policy_node.py`` runs the fallback of the
   first with the method removed.

Also here: requirements-jazzy.txt differs from requirements.txt in the ROS wheels only.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for d in ("lowrl_ros", "test", "scripts") for p in (ROOT / d).rglob("*.py"))

# Standard-library names new in Python 3.11 or 3.12 (module -> names; None = the whole module).
NEWER_STDLIB: dict[str, set[str] | None] = {
    "tomllib": None,
    "enum": {"StrEnum", "ReprEnum", "EnumCheck", "verify", "member", "nonmember", "global_enum", "show_flag_values"},
    "typing": {"Self", "LiteralString", "Never", "assert_never", "reveal_type", "NotRequired", "Required",
               "TypeVarTuple", "Unpack", "dataclass_transform", "assert_type", "get_overloads", "clear_overloads",
               "override", "TypeAliasType"},
    "datetime": {"UTC"},
    "asyncio": {"TaskGroup", "timeout", "timeout_at", "Runner"},
    "hashlib": {"file_digest"},
    "contextlib": {"chdir"},
    "itertools": {"batched"},
    "math": {"exp2", "cbrt"},
    "operator": {"call"},
    "logging": {"getLevelNamesMapping"},
}
NEWER_BUILTINS = {"ExceptionGroup", "BaseExceptionGroup"}

# rclpy API that Humble's rclpy 3.3 does not have (Iron, Jazzy or Kilted added it).
HUMBLE_LACKS_MODULES = {"rclpy.experimental", "rclpy.clock_type", "rclpy.event_handler", "rclpy.parameter_client",
                        "rclpy.service_introspection", "rclpy.type_description_service", "rclpy.type_hash",
                        "rclpy.logging_service", "rclpy.destroyable", "rclpy.subscription_content_filter_options"}
HUMBLE_LACKS = {"add_post_set_parameters_callback", "add_pre_set_parameters_callback",
                "remove_post_set_parameters_callback", "remove_pre_set_parameters_callback", "EventsExecutor",
                "configure_introspection", "get_type_description", "wait_for_node", "count_clients",
                "count_services"}
HUMBLE_LACKS_KEYWORDS = {("create_timer", "autostart")}
GUARD_ERRORS = {"ImportError", "ModuleNotFoundError", "AttributeError", "Exception"}


def _catches(handler: ast.ExceptHandler) -> set[str]:
    t = handler.type
    items = t.elts if isinstance(t, ast.Tuple) else [t] if t is not None else []
    return {i.id if isinstance(i, ast.Name) else getattr(i, "attr", "") for i in items} or {"Exception"}


def _hasattr_test(test: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("hasattr", "getattr")
               for n in ast.walk(test))


def unguarded_rclpy(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for every use of rclpy API Humble lacks that is not under a guard."""
    found: list[tuple[int, str]] = []

    def flag(node: ast.AST) -> str | None:
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module in HUMBLE_LACKS_MODULES:
                return f"from {node.module} import"
            if node.module.startswith("rclpy"):
                names = {a.name for a in node.names} & (HUMBLE_LACKS | {m.rsplit(".", 1)[1]
                                                                        for m in HUMBLE_LACKS_MODULES})
                return f"from {node.module} import {', '.join(sorted(names))}" if names else None
        if isinstance(node, ast.Import):
            names = {a.name for a in node.names} & HUMBLE_LACKS_MODULES
            return f"import {', '.join(sorted(names))}" if names else None
        if isinstance(node, ast.Attribute) and node.attr in HUMBLE_LACKS:
            return f".{node.attr}"
        if isinstance(node, ast.Call):
            callee = getattr(node.func, "attr", getattr(node.func, "id", ""))
            for kw in node.keywords:
                if (callee, kw.arg) in HUMBLE_LACKS_KEYWORDS:
                    return f"{callee}({kw.arg}=...)"
        return None

    def visit(node: ast.AST, guarded: bool) -> None:
        what = flag(node)
        if what and not guarded:
            found.append((node.lineno, what))
        if isinstance(node, ast.Try):
            body_guarded = guarded or any(_catches(h) & GUARD_ERRORS for h in node.handlers)
            for child in node.body:
                visit(child, body_guarded)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, guarded)
            return
        if isinstance(node, ast.If) and _hasattr_test(node.test):
            visit(node.test, guarded)
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, guarded)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(tree, False)
    return found


def newer_stdlib(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for every use of a standard-library name newer than Python 3.10."""
    found = []
    aliases: dict[str, str] = {}  # local name -> module, for `import typing as t`
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name] = a.name
                if a.name in NEWER_STDLIB and NEWER_STDLIB[a.name] is None:
                    found.append((node.lineno, f"import {a.name}"))
        elif isinstance(node, ast.ImportFrom) and node.module in NEWER_STDLIB and node.level == 0:
            names = NEWER_STDLIB[node.module]
            bad = [a.name for a in node.names if names is None or a.name in names]
            if bad:
                found.append((node.lineno, f"from {node.module} import {', '.join(bad)}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = aliases.get(node.value.id)
            if module in NEWER_STDLIB and (NEWER_STDLIB[module] or set()) & {node.attr}:
                found.append((node.lineno, f"{module}.{node.attr}"))
        elif isinstance(node, ast.Name) and node.id in NEWER_BUILTINS:
            found.append((node.lineno, node.id))
    return found


def test_every_module_parses_as_python_3_10_and_uses_no_newer_stdlib():
    assert len(SOURCES) > 100  # the package, its tests and scripts, not an empty glob
    problems = []
    for path in SOURCES:
        rel = path.relative_to(ROOT)
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), str(rel), feature_version=(3, 10))
        except SyntaxError as exc:
            problems.append(f"{rel}:{exc.lineno}: not Python 3.10 syntax: {exc.msg}")
            continue
        problems += [f"{rel}:{line}: {what} is Python 3.11+" for line, what in newer_stdlib(tree)]
    assert not problems, "Humble and JetPack 6 run Python 3.10:\n" + "\n".join(problems)


def test_no_rclpy_api_humble_lacks_without_a_guard():
    problems = []
    for path in SOURCES:
        if "lowrl_ros" not in path.parts:
            continue
        for line, what in unguarded_rclpy(ast.parse(path.read_text(encoding="utf-8"))):
            problems.append(f"{path.relative_to(ROOT)}:{line}: {what} (Humble's rclpy has no such API: guard it "
                            "with hasattr or try/except ImportError and give a fallback, as ros/params.py does)")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("source, bad", [
    ("node.add_post_set_parameters_callback(cb)\n", True),
    ("if hasattr(node, 'add_post_set_parameters_callback'):\n    node.add_post_set_parameters_callback(cb)\n", False),
    ("from rclpy.experimental import EventsExecutor\n", True),
    ("try:\n    from rclpy.experimental import EventsExecutor\nexcept ImportError:\n    pass\n", False),
    ("try:\n    from rclpy.experimental import EventsExecutor\nexcept ValueError:\n    pass\n", True),
    ("import rclpy.event_handler\n", True),
    ("node.create_timer(0.1, cb, autostart=False)\n", True),
    ("node.create_timer(0.1, cb)\n", False),
])
def test_the_rclpy_check_can_fail(source, bad):
    assert bool(unguarded_rclpy(ast.parse(source))) is bad


@pytest.mark.parametrize("source, bad", [
    ("from enum import StrEnum\n", True), ("import tomllib\n", True), ("import typing\nx: typing.Self\n", True),
    ("import datetime as dt\nz = dt.UTC\n", True), ("raise ExceptionGroup('x', [])\n", True),
    ("from enum import Enum\nimport datetime\nz = datetime.timezone.utc\n", False),
])
def test_the_stdlib_check_can_fail(source, bad):
    assert bool(newer_stdlib(ast.parse(source))) is bad
    with pytest.raises(SyntaxError):
        ast.parse("try:\n    pass\nexcept* ValueError:\n    pass\n", feature_version=(3, 10))


def _pins(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def test_jazzy_requirements_differ_in_the_ros_wheels_only():
    kilted, jazzy = _pins(ROOT / "requirements.txt"), _pins(ROOT / "requirements-jazzy.txt")
    ros = re.compile(r"^ros-")
    assert [p for p in kilted if not ros.match(p)] == [p for p in jazzy if not ros.match(p)]
    assert {p for p in jazzy if ros.match(p)} == {
        "ros-jazzy-rclpy[fastrtps]==7.1.6", "ros-jazzy-std-msgs==5.3.6", "ros-jazzy-sensor-msgs==5.3.6",
        "ros-jazzy-diagnostic-msgs==5.3.6", "ros-jazzy-trajectory-msgs==5.3.6"}
    assert {p.split("==")[0].replace("ros-", "ros-jazzy-", 1) for p in kilted if ros.match(p)} == \
        {p.split("==")[0] for p in jazzy if ros.match(p)}  # the same ROS packages, Jazzy's builds
