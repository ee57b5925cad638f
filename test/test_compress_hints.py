"""Every "fix:" a release gate or `lowrl compress` prints names a flag or step that exists there and
changes the outcome (issue 20, part 3): each test makes a gate fail, applies its hint exactly as
printed, and checks that the gate's figure moved (or the release went through).

In-process through `lowrl_ros.cli.main` (the `lowrl` script's entry point) to skip a torch start-up
per command; the students are tiny so that a re-distil costs seconds.
"""
from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from lowrl_ros.cli import main
from lowrl_ros.core.runtime.artifact import MlpWeights, load_weights, save_artifact


ROOT = Path(__file__).resolve().parents[1]
TEACHER = str(ROOT / "models/pendulum_sac_int8.onnx")
TINY = ["--students", "lite:32x2@0.8", "--teacher-episodes", "8", "--bc-steps", "1200", "--dagger-rounds", "1",
        "--dagger-episodes", "3", "--dagger-steps", "400", "--eval-episodes", "3", "--qat-steps", "0", "--no-progress"]
FAST = ["--eval-episodes", "3", "--probe-count", "128"]
TIGHT = ["--int8-mean-error", "1e-7", "--int8-max-error", "1e-6"]  # an int8 gate every int8 student fails


def lowrl(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def gates(bundle: Path) -> dict[tuple[str, str], dict]:
    doc = json.loads(bundle.with_name(bundle.name + ".release.json").read_text())
    return {(g["tier"], g["gate"]): g for g in doc["gates"]}


def quoted_commands(fix: str) -> list[str]:
    return re.findall(r"`([^`]+)`", fix)


@pytest.fixture(scope="module")
def students(tmp_path_factory):
    out = tmp_path_factory.mktemp("hints") / "students"
    rc = main(["distill", TEACHER, "-o", str(out), *TINY])
    assert rc == 0 and (out / "distill.json").is_file()
    return out


def test_int8_hints_each_change_the_figure(students, tmp_path, capsys):
    students = Path(shutil.copytree(students, tmp_path / "students"))  # re-distilled below: a copy of its own
    bundle = tmp_path / "b.lowrl"
    rc, out, _ = lowrl(capsys, "compress", students, "-o", bundle, "--version", 2, *FAST, *TIGHT)
    assert rc == 1 and "[FAIL] lite: int8 vs fp32 action error" in out
    g = gates(bundle)[("lite", "int8 vs fp32 action error")]
    fix = g["fix"]
    # The students are trained: the QAT hint is the `lowrl distill` line that made them, plus the change.
    redistill = next(c for c in quoted_commands(fix) if c.startswith("lowrl distill"))
    assert redistill.endswith("--qat-steps 500") and "--students lite:32x2@0.8" in redistill
    assert "`--clip-percentile 99.9` on this compress" in fix and "--int8-max-error" in fix

    # Hint 1: clip outliers on this compress.
    rc, _, _ = lowrl(capsys, "compress", students, "-o", bundle, "--version", 2, *FAST, *TIGHT,
                     "--clip-percentile", "99.9")
    clipped = gates(bundle)[("lite", "int8 vs fp32 action error")]
    assert rc == 1 and clipped["measured"] != g["measured"]
    assert "--clip-percentile" not in clipped["fix"]  # already applied: not offered again

    # Hint 2: the re-distil line, run as printed, then this compress again.
    assert lowrl(capsys, *shlex.split(redistill)[1:])[0] == 0
    assert json.loads((students / "distill.json").read_text())["config"]["qat_steps"] == 500
    rc, _, _ = lowrl(capsys, "compress", students, "-o", bundle, "--version", 2, *FAST, *TIGHT)
    qat = gates(bundle)[("lite", "int8 vs fp32 action error")]
    assert rc == 1 and qat["measured"] != g["measured"]
    assert "--qat-steps 1000" in qat["fix"]  # asks for more than the students already had

    # Hint 3: a wider budget on this compress passes the gate.
    lowrl(capsys, "compress", students, "-o", bundle, "--version", 2, *FAST, "--int8-max-error", "0.5",
          "--int8-mean-error", "0.5")
    assert gates(bundle)[("lite", "int8 vs fp32 action error")]["passed"]


def test_compress_refuses_distill_flags_for_a_students_dir_and_names_where_they_belong(students, tmp_path, capsys):
    rc, _, err = lowrl(capsys, "compress", students, "-o", tmp_path / "b.lowrl", "--version", 2, "--qat-steps", 500)
    assert rc == 2 and "--qat-steps 500" in err and "lowrl distill" in err and not (tmp_path / "b.lowrl").exists()
    (cmd,) = [c for c in quoted_commands(err) if c.startswith("lowrl distill")]
    assert cmd.endswith("--qat-steps 500")
    rc, _, err = lowrl(capsys, "compress", students, "-o", tmp_path / "b.lowrl", "--version", 2, "--work-dir", tmp_path)
    assert rc == 2 and "drop --work-dir" in err


def test_qat_hint_of_a_teacher_compress_is_its_own_flag(tmp_path, capsys):
    bundle = tmp_path / "t.lowrl"
    args = ["compress", TEACHER, "-o", bundle, "--version", 2, *FAST, *TIGHT, *TINY[:-1]]  # --qat-steps 0
    rc, _, _ = lowrl(capsys, *args)
    g = gates(bundle)[("lite", "int8 vs fp32 action error")]
    assert rc == 1 and "`--qat-steps 500`" in g["fix"] and "lowrl distill" not in g["fix"]  # had 0
    rc, _, _ = lowrl(capsys, *args, "--qat-steps", 500)  # the hint, on the same command
    assert rc == 1 and gates(bundle)[("lite", "int8 vs fp32 action error")]["measured"] != g["measured"]


def test_parity_hint_re_distils_a_stale_students_dir(students, tmp_path, capsys):
    stale = tmp_path / "stale"
    shutil.copytree(students, stale)
    # A stale fp32 artifact: its output bias moved, so it no longer computes what lite.pt does.
    weights, contract = load_weights(stale / "lite_fp32.onnx")
    w, b = weights.layers[-1]
    moved = MlpWeights(list(weights.layers[:-1]) + [(w, b + 0.05)], weights.hidden_activation,
                       weights.output_activation)
    save_artifact(stale / "lite_fp32.onnx", moved, contract)
    bundle = tmp_path / "p.lowrl"
    rc, out, _ = lowrl(capsys, "compress", stale, "-o", bundle, "--version", 2, *FAST)
    g = gates(bundle)[("lite", "fp32 ONNX vs torch parity")]
    assert rc == 1 and not g["passed"], out
    (cmd,) = [c for c in quoted_commands(g["fix"]) if c.startswith("lowrl distill")]
    assert lowrl(capsys, *shlex.split(cmd)[1:])[0] == 0
    lowrl(capsys, "compress", stale, "-o", bundle, "--version", 2, *FAST)
    assert gates(bundle)[("lite", "fp32 ONNX vs torch parity")]["passed"]


def test_return_and_version_hints(students, tmp_path, capsys):
    bundle = tmp_path / "r.lowrl"
    rc, _, _ = lowrl(capsys, "compress", students, "-o", bundle, "--version", 2, *FAST, "--return-fraction", "1.5",
                     "--int8-max-error", "0.5", "--int8-mean-error", "0.5")
    g = gates(bundle)[("lite", "deployed return vs teacher")]
    assert rc == 1 and not g["passed"]
    (cmd,) = [c for c in quoted_commands(g["fix"]) if c.startswith("lowrl distill")]
    assert cmd.endswith("--dagger-rounds 3") and cmd.count("--dagger-rounds") == 1
    assert "`--return-fraction` lower on this compress" in g["fix"]
    rc, _, _ = lowrl(capsys, "compress", students, "-o", bundle, "--version", 2, *FAST, "--return-fraction", "0.5",
                     "--int8-max-error", "0.5", "--int8-mean-error", "0.5")
    assert rc == 0 and bundle.is_file()

    # Versions only go up: the message names the version to give, and giving it releases.
    rc, _, err = lowrl(capsys, "compress", students, "-o", bundle, "--version", 2, *FAST)
    assert rc == 2 and "give --version 3" in err
    rc, _, _ = lowrl(capsys, "compress", students, "-o", bundle, "--version", 3, *FAST, "--return-fraction", "0.5",
                     "--int8-max-error", "0.5", "--int8-mean-error", "0.5")
    assert rc == 0


# Where each module's messages are read: the `lowrl` commands that print them.
MESSAGE_HOMES = {
    "lowrl_ros/core/compress/release.py": ("compress", "distill"),  # a fix names distill flags in its distill line
    "lowrl_ros/core/compress/distill.py": ("distill", "compress"),
    "lowrl_ros/core/compress/export_c.py": ("export-c",),
    "lowrl_ros/core/budget/profile.py": ("profile",),
    "lowrl_ros/core/train/config.py": ("train",),
    "lowrl_ros/core/train/agent.py": ("train",),
    "lowrl_ros/core/train/checkpoint.py": ("train",),
    "lowrl_ros/core/train/trainer.py": ("train",),
    "lowrl_ros/commands/compress.py": ("compress", "distill"),
    "lowrl_ros/commands/distill.py": ("distill",),
    "lowrl_ros/commands/train.py": ("train",),
    "lowrl_ros/commands/eval.py": ("eval",),
    "lowrl_ros/commands/profile.py": ("profile",),
}


def flags_in_strings(path: Path) -> set[str]:
    """Every ``--flag`` inside a string literal (f-strings included) of a module, docstrings left out."""
    import ast

    tree = ast.parse(path.read_text())
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found |= set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9](?![\w-])", node.value))
    return found


def option_strings(command: str) -> set[str]:
    import argparse
    import importlib

    from lowrl_ros.cli import COMMANDS

    parser = argparse.ArgumentParser()
    importlib.import_module(COMMANDS[command][0]).add_arguments(parser)
    return {o for a in parser._actions for o in a.option_strings}


@pytest.mark.parametrize("module", sorted(MESSAGE_HOMES))
def test_every_flag_a_message_names_exists_on_its_command(module):
    options = set().union(*(option_strings(c) for c in MESSAGE_HOMES[module]))
    missing = sorted(flags_in_strings(ROOT / module) - options)
    assert not missing, f"{module} names {missing}, which {'/'.join(MESSAGE_HOMES[module])} do(es) not accept"


def test_the_flag_check_can_fail(tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text('raise ValueError("raise --timeout or --no-such-flag")\n')
    assert flags_in_strings(bad) - option_strings("profile") == {"--timeout", "--no-such-flag"}
