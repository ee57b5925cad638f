"""`lowrl export-c ARTIFACT -o OUT_DIR [--name policy] [--tier full]`: dependency-free C99.

Writes ``OUT_DIR/<name>.h`` and ``OUT_DIR/<name>.c`` with the artifact's int8 (or fp32) weights,
dense or CSR, and ``void <name>_act(const float *obs, float *action)``. Compile it with any C99
compiler, e.g. ``gcc -std=c99 -O2 -c policy.c`` (add ``-lm`` when linking if the policy uses tanh
activations, which every SAC/TD3 actor does).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lowrl_ros.core.compress.export_c import export_c


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("artifact", type=Path, help="artifact (.onnx) or bundle (.lowrl)")
    parser.add_argument("-o", "--output", type=Path, required=True, help="directory for <name>.c and <name>.h")
    parser.add_argument("--name", default="policy", help="C symbol prefix: <name>_act, <NAME>_OBS_DIM, ...")
    parser.add_argument("--tier", default=None, help="tier of a bundle to export (default: full)")


def run(args: argparse.Namespace) -> int:
    try:
        result = export_c(args.artifact, args.output, args.name, args.tier)
    except ValueError as exc:  # ArtifactError is a ValueError
        print(f"lowrl export-c: {exc}", file=sys.stderr)
        return 2
    layers = ", ".join(f"{p.in_dim}->{p.out_dim} {p.dtype} {p.storage}" for p in result.layers)
    if result.head_layers:
        layers += " + residual head " + ", ".join(f"{p.in_dim}->{p.out_dim} {p.dtype} {p.storage}"
                                                  for p in result.head_layers)
    print(f"wrote {result.header} and {result.source}: {layers}; {result.weight_bytes} bytes of constants, "
          f"{result.scratch_bytes} bytes of static buffers; call {result.name}_act(obs, action)")
    return 0
