"""`lowrl bench NAME`: each benchmark is lowrl_ros/bench/NAME.py with add_arguments, run and headline (the
one line of its results that the index shows; record.headline_rule looks it up).

Results go to bench_results/ as JSON and markdown (layout and index: lowrl_ros/bench/record.py), with the
exact command and the machine, and
every speed claim is a ratio against a baseline measured in the same run (machines here are
shared and noisy).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import pkgutil
from pathlib import Path

_HERE = Path(__file__).parent
_NOT_BENCHMARKS = {"record", "loop_monitoring", "budget_ladder"}  # helpers of `lowrl bench loop --monitoring`
# and `lowrl bench budget --ladder`, not benchmarks of their own


def names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules([str(_HERE)]) if m.name not in _NOT_BENCHMARKS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", metavar="NAME", required=True)
    for name in names():
        module = importlib.import_module(f"lowrl_ros.bench.{name}")
        p = sub.add_parser(name, help=(module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else None)
        module.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    module = importlib.import_module(f"lowrl_ros.bench.{args.bench}")
    return int(module.run(args) or 0)
