"""`lowrl report DIR [DIR ...]`: a training run's or a sim-to-real session's report.

A training run (progress.csv and sparsity.csv, written by `lowrl train`): learning curves and
per-layer sparsity as a PNG; several runs are drawn on the same axes so variants can be compared
at a glance. A sim-to-real session directory (lowrl_ros.core.session.files.is_session_dir):
return over time of the sim policy and the fine-tuned versions, versions, tiers, the load phase
with the fine-tuner's pause, CPU per process, misses and latency per tier (lowrl demo's "Adaptive
compute"), as a PNG and a markdown summary that is also printed.
"""
from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

from lowrl_ros.core.sim.plot import pyplot


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dirs", nargs="+", metavar="DIR",
                        help="run directories written by `lowrl train`, or one sim-to-real session directory")
    parser.add_argument("--out", metavar="PNG", help="output file (default FIRST_RUN_DIR/report.png)")


def _read(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        raise ValueError(f"{path} does not exist; is {path.parent} a run directory written by `lowrl train`?")
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path} has no rows yet; the run has not reached its first evaluation")
    return rows


def draw(run_dirs: list[Path], out: Path) -> Path:
    """Draw the report of ``run_dirs`` into ``out`` and return it."""
    plt = pyplot()

    runs = [(d, _read(d / "progress.csv"), _read(d / "sparsity.csv")) for d in run_dirs]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    ax = axes[0]
    for d, prog, _ in runs:
        x = [int(r["env_steps"]) for r in prog]
        y = [float(r["eval_return"]) for r in prog]
        s = [float(r["eval_return_std"]) for r in prog]
        line, = ax.plot(x, y, marker="o", ms=3, label=d.name)
        ax.fill_between(x, [a - b for a, b in zip(y, s)], [a + b for a, b in zip(y, s)],
                        color=line.get_color(), alpha=0.15)
    ax.set(title="deterministic evaluation return", xlabel="environment steps", ylabel="mean return (±1 std)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)

    # Per-layer density over training (first run): RigL/RLx2 keep counts, so flat lines are expected.
    d0, _, sp0 = runs[0]
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in sp0:
        series[f"{r['network']}[{r['layer']}] {r['shape']}"].append((int(r["env_steps"]), float(r["density"])))
    ax = axes[1]
    for name, pts in series.items():
        ax.plot([p[0] for p in pts], [1 - p[1] for p in pts], marker=".", label=name)
    ax.set(title=f"per-layer sparsity over training ({d0.name})", xlabel="environment steps",
           ylabel="sparsity (fraction of zero weights)", ylim=(-0.02, 1.02))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)

    ax = axes[2]
    last_step = max(int(r["env_steps"]) for r in sp0)
    final = [r for r in sp0 if int(r["env_steps"]) == last_step]
    labels = [f"{r['network']}[{r['layer']}]\n{r['shape']}" for r in final]
    values = [1 - float(r["density"]) for r in final]
    colors = ["tab:blue" if r["network"] == "actor" else "tab:orange" for r in final]
    ax.bar(range(len(values)), values, color=colors)
    ax.set_xticks(range(len(values)), labels, fontsize=7)
    ax.set(title=f"final per-layer sparsity (Erdős–Rényi), step {last_step}", ylabel="sparsity", ylim=(0, 1))
    for i, v in enumerate(values):
        ax.text(i, v + 0.01, f"{v:.2f}", ha="center", fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _session_report(session_dir: Path) -> int:
    from lowrl_ros.core.session.report import write_session_report

    try:
        md = write_session_report(session_dir)
    except ValueError as exc:
        print(f"lowrl report: error: {exc}", file=sys.stderr)
        return 2
    print(md.read_text())
    print(f"report: {md} and {md.with_suffix('.png')}")
    return 0


def run(args: argparse.Namespace) -> int:
    dirs = [Path(d) for d in args.run_dirs]
    from lowrl_ros.core.session.files import is_session_dir

    if len(dirs) == 1 and is_session_dir(dirs[0]):
        return _session_report(dirs[0])
    out = Path(args.out) if args.out else dirs[0] / "report.png"
    try:
        path = draw(dirs, out)
    except ValueError as exc:
        print(f"lowrl report: error: {exc}", file=sys.stderr)
        return 2
    print(f"report: {path}")
    return 0
