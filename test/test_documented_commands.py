"""The commands the README and docs/ tell a user to run, checked as written (issue 20, part 1).

Every ``lowrl ...`` line of a ```bash block in README.md and docs/*.md is parsed by the real `lowrl`
argparse parser of its sub-command (an unknown flag or a missing argument fails here, not on a new
user's machine), and every repository path it names (config/, launch/, models/) must exist.

The README's off-board pipeline block is then *run*, line by line, exactly as written, in a temporary
directory holding nothing but copies of config/, launch/ and models/. The only change is a smaller
budget, injected through the documented environment variable ``LOWRL_SET``
(lowrl_ros/commands/_config_flags.py), never by editing a command. Each step must leave what the
next reads: the run dir's actor, the students dir, the released bundle, a profile verdict. A line
that runs forever or needs a robot (``lowrl launch``) is checked by parsing only. The runnable
blocks of docs/compression.md and docs/profile.md run the same way (long training and benchmark
lines are parsed only).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lowrl_ros.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
DOC_PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
# Lines a test cannot run here: they run forever, need a robot or ROS 2's launch, or take hours.
# They are parsed and their paths checked like every other line.
NOT_RUN = ("lowrl launch", "lowrl demo", "lowrl bench")
# A budget small enough for 2 shared cores (about a minute of training instead of two).
SMALL_BUDGET = ("train.total_steps=3000 train.eval_interval=1000 train.eval_episodes=3 "
                "distill.bc_steps=1000 distill.dagger_rounds=2 distill.dagger_steps=500 distill.eval_episodes=5 "
                "release.eval_episodes=5")


def bash_blocks(text: str) -> list[str]:
    """The bodies of the ```bash fenced blocks of a markdown page."""
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)


def command_lines(block: str) -> list[str]:
    """Each `lowrl` command of a block, continuation lines joined, trailing comment dropped."""
    lines, joined = [], ""
    for raw in block.splitlines():
        joined += raw.rstrip()
        if joined.endswith("\\"):
            joined = joined[:-1] + " "
            continue
        line = joined.split(" #")[0].strip() if not joined.lstrip().startswith("#") else ""
        joined = ""
        line = re.sub(r"^\.venv/bin/lowrl\b", "lowrl", line)
        if line.startswith("lowrl "):
            lines.append(line)
    return lines


def documented_commands() -> list[tuple[str, str]]:
    out = []
    for page in DOC_PAGES:
        for block in bash_blocks(page.read_text(encoding="utf-8")):
            out += [(page.relative_to(ROOT).as_posix(), line) for line in command_lines(block)]
    return out


def pipeline_block() -> list[str]:
    """The README's "off-board pipeline, end to end" block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    head, found, tail = text.partition("The off-board pipeline, end to end:")
    assert found, "README.md lost its 'The off-board pipeline, end to end:' block"
    return command_lines(bash_blocks(tail)[0])


def parse(line: str) -> argparse.Namespace:
    """The line through the real parser of its `lowrl` sub-command (SystemExit on a bad line)."""
    argv = shlex.split(line)[1:]
    assert argv and argv[0] in COMMANDS, f"`{line}`: no lowrl command {argv[:1]}; known: {sorted(COMMANDS)}"
    module = importlib.import_module(COMMANDS[argv[0]][0])
    parser = argparse.ArgumentParser(prog=f"lowrl {argv[0]}", exit_on_error=False)
    module.add_arguments(parser)
    with contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            return parser.parse_args(argv[1:])
        except SystemExit:
            pytest.fail(f"`{line}` does not parse: {err.getvalue().strip()}")


def repo_paths(line: str) -> list[str]:
    """Paths in the line that a user finds in the repository (not outputs such as runs/ or releases/)."""
    words = [w.partition(":=")[2] or w for w in shlex.split(line)]
    return [w for w in words if re.match(r"^(config|launch|models|scripts)/", w)]


def test_the_pipeline_block_is_found():
    lines = pipeline_block()
    assert [shlex.split(c)[1] for c in lines] == ["train", "report", "distill", "compress", "profile", "launch"]


@pytest.mark.parametrize("page,line", documented_commands(), ids=lambda v: v if "/" not in v else None)
def test_documented_command_parses_and_names_existing_files(page, line):
    args = parse(line)
    for path in repo_paths(line):
        assert (ROOT / path).exists(), f"{page}: `{line}` names {path}, which is not in the repository"
    if line.startswith("lowrl launch"):
        check_launch(args, ROOT)


def check_launch(args: argparse.Namespace, where: Path) -> None:
    """The launch file exists (a path, or a shipped name) and declares every name:=value given."""
    from lowrl_ros.launcher import parse_launch

    path = where / args.file if (where / args.file).is_file() else ROOT / "launch" / args.file
    assert path.is_file(), f"lowrl launch {args.file}: no such launch file"
    overrides = dict(a.split(":=", 1) for a in args.launch_args)
    parse_launch(path, overrides)  # LaunchError: an undeclared arg, a bad substitution


def test_bad_lines_are_caught():
    """The check can fail: an unknown flag and a missing required argument."""
    with pytest.raises(pytest.fail.Exception, match="does not parse"):
        parse("lowrl compress runs/students --version 2 --no-such-flag 1")
    with pytest.raises(pytest.fail.Exception, match="does not parse"):
        parse("lowrl distill runs/pendulum")  # -o is required
    assert repo_paths("lowrl profile x.lowrl --budget config/nope.yaml") == ["config/nope.yaml"]


def lowrl_env(tmp: Path, budget: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), LOWRL_SET=budget, MPLBACKEND="Agg")
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    # `lowrl` on PATH is this checkout's, whatever the venv's entry point was installed from.
    (bindir / "lowrl").write_text(f"#!{sys.executable}\nimport sys\nfrom lowrl_ros.cli import main\n"
                                  "sys.exit(main())\n")
    (bindir / "lowrl").chmod(0o755)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_readme_pipeline_runs_as_written(tmp_path):
    """README's pipeline, verbatim, in a fresh directory; each step leaves what the next one reads."""
    work = tmp_path / "clone"
    for d in ("config", "launch", "models"):
        shutil.copytree(ROOT / d, work / d)
    env = lowrl_env(tmp_path, SMALL_BUDGET)
    timings = {}
    for line in pipeline_block():
        name = shlex.split(line)[1]
        if line.startswith(NOT_RUN):  # the trainer node streams forever: parsed, its watch_dir checked
            args = parse(line)
            check_launch(args, work)
            watch = dict(a.split(":=", 1) for a in args.launch_args)["watch_dir"]
            assert list((work / watch).glob("*.lowrl")), f"`{line}` would watch a dir with no bundle"
            continue
        t0 = time.monotonic()
        proc = subprocess.run(line, shell=True, cwd=work, env=env, capture_output=True, text=True, timeout=300)
        timings[name] = time.monotonic() - t0
        ok = (0, 1) if name == "profile" else (0,)  # profile: 1 is WARN (a loaded machine), 3 FAIL
        tail = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        assert proc.returncode in ok, f"`{line}` exited {proc.returncode}:\n{tail}"
        assert "LOWRL_SET" in proc.stderr or name in ("report", "profile"), "the budget did not reach the command"
        if name == "train":
            assert (work / "runs/pendulum/actor.onnx").is_file()
        elif name == "report":
            assert (work / "runs/pendulum/report.png").is_file()
        elif name == "distill":
            doc = json.loads((work / "runs/students/distill.json").read_text())
            assert [s["name"] for s in doc["students"]] == ["full", "lite"]
        elif name == "compress":
            assert (work / "releases/v2.lowrl").is_file(), proc.stderr[-3000:]
            rel = json.loads((work / "releases/v2.lowrl.release.json").read_text())
            assert rel["released"] and rel["version"] == 2 and rel["parent_version"] == 1
            assert all(g["passed"] for g in rel["gates"]) and len(rel["gates"]) == 6
        elif name == "profile":
            assert re.search(r"^verdict: (PASS|WARN)$", proc.stdout, re.M), proc.stdout
    print("step seconds:", {k: round(v, 1) for k, v in timings.items()})
    assert set(timings) == {"train", "report", "distill", "compress", "profile"}


# docs/ pages whose blocks run here, in page order, each line as written; a line whose input is made
# elsewhere (by the README's `lowrl train` run) is listed, so no line is skipped silently.
DOC_RUNS = {"docs/compression.md": ["lowrl distill runs/pendulum "], "docs/profile.md": []}
DOCS_BUDGET = ("distill.teacher_episodes=5 distill.bc_steps=500 distill.dagger_rounds=1 distill.dagger_steps=300 "
               "distill.qat_steps=200 distill.eval_episodes=3 release.eval_episodes=3")


@pytest.mark.parametrize("page", sorted(DOC_RUNS))
def test_docs_blocks_run_as_written(page, tmp_path):
    work = tmp_path / "clone"
    for d in ("config", "launch", "models"):
        shutil.copytree(ROOT / d, work / d)
    env = lowrl_env(tmp_path, DOCS_BUDGET)
    ran, elsewhere = [], []
    for block in bash_blocks((ROOT / page).read_text(encoding="utf-8")):
        for line in command_lines(block):
            if line.startswith(NOT_RUN + ("lowrl train",)):  # forever, a robot, or minutes to hours: parsed above
                continue
            if any(line.startswith(p) for p in DOC_RUNS[page]):
                elsewhere.append(line)
                continue
            proc = subprocess.run(line, shell=True, cwd=work, env=env, capture_output=True, text=True, timeout=300)
            tail = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            assert proc.returncode in ((0, 1) if line.startswith("lowrl profile") else (0,)), f"`{line}`:\n{tail}"
            ran.append(line)
    assert ran and len(elsewhere) == len(DOC_RUNS[page]), (ran, elsewhere)
    if page == "docs/compression.md":
        assert (work / "pendulum.lowrl").is_file() and (work / "pendulum_direct.lowrl").is_file()
        assert json.loads((work / "lite.json").read_text())["tiers"]
    else:
        assert json.loads((work / "profile.json").read_text())["verdict"] in ("PASS", "WARN")


def test_eval_prints_one_line_per_episode(tmp_path):
    """`lowrl eval` into a log: every episode of every tier on its own line (issue 20: no run-on line)."""
    proc = subprocess.run([sys.executable, "-m", "lowrl_ros.cli", "eval", str(ROOT / "models/pendulum_sac.lowrl"),
                           "--episodes", "2"], env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert [ln for ln in lines if "episode" in ln] == ["full: episode 1/2", "full: episode 2/2", "lite: episode 1/2",
                                                         "lite: episode 2/2"]
    assert "\r" not in proc.stderr
