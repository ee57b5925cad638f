"""docs/architecture.md stays true: its layout names every module, and its import table is the one
test/test_import_rules.py enforces (CORE_ALLOWED). A lint-tier guard (make lint)."""
from __future__ import annotations

import re
from pathlib import Path

from test_import_rules import CORE_ALLOWED

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("core", "ros", "commands", "bench")  # every module of these (and lowrl_ros/*.py) is named


def layout_block(text: str) -> list[str]:
    """The lines of the first fenced block after '## Layout'."""
    after = text.split("## Layout", 1)[1]
    return after.split("```", 2)[1].splitlines()[1:]


def documented_modules(lines: list[str]) -> set[str]:
    """'core/runtime/step_row.py'-style paths: a file named on a line belongs to the folder above it (by indent)."""
    stack: list[tuple[int, str]] = []
    found = set()
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        first = line.split()[0]
        here = "/".join(d for _, d in stack)
        if first.endswith("/"):
            stack.append((indent, first.rstrip("/")))
            here = "/".join(d for _, d in stack)
        for name in re.findall(r"(?<![\w/])(\w+\.py)\b", line):
            found.add(f"{here}/{name}" if here else name)
    return found


def module_paths() -> set[str]:
    pkg = ROOT / "lowrl_ros"
    out = {p.relative_to(pkg).as_posix() for p in pkg.rglob("*.py") if p.name != "__init__.py"}
    return {m for m in out if "/" not in m or m.split("/")[0] in PACKAGES}


def test_the_layout_names_every_module():
    documented = documented_modules(layout_block(DOC.read_text()))
    documented = {m.removeprefix("lowrl_ros/") for m in documented}
    missing = sorted(module_paths() - documented)
    assert not missing, f"docs/architecture.md's layout does not name: {', '.join(missing)} (add each under its folder)"
    gone = sorted(m for m in documented - module_paths()
                  if m.split("/")[0] in PACKAGES and "/" in m and not m.endswith("__init__.py"))
    assert not gone, f"docs/architecture.md names modules that do not exist: {', '.join(gone)}"


def doc_import_table(text: str) -> dict[str, set[str]]:
    table = text.split("## Import rules", 1)[1]
    rows: dict[str, set[str]] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`core/"):
            continue
        allowed = set() if cells[2] in ("nothing", "") else {a.strip() for a in cells[2].split(",")}
        for name in re.findall(r"`core/(\w+)(?:\.py)?`", cells[0]):
            rows[name] = allowed
    return rows


def test_the_import_table_is_the_one_the_import_rules_enforce():
    assert doc_import_table(DOC.read_text()) == CORE_ALLOWED


def test_the_guards_catch_a_missing_module_and_a_wrong_table():
    """The twin: a layout without a module and a table with an extra import are caught."""
    lines = ["lowrl_ros/", "  core/", "    runtime/", "      a.py  b.py   text c.py", "  ros/", "    n.py"]
    assert documented_modules(lines) == {"lowrl_ros/core/runtime/a.py", "lowrl_ros/core/runtime/b.py",
                                         "lowrl_ros/core/runtime/c.py", "lowrl_ros/ros/n.py"}
    doc = ("## Import rules\n| `core/runtime` | robot | types, config, sim | x |\n"
           "| `core/types.py` | both | nothing | n |\n")
    assert doc_import_table(doc) == {"runtime": {"types", "config", "sim"}, "types": set()}
