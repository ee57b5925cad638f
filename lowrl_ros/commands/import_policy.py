"""`lowrl import SOURCE -o OUT.onnx`: a policy trained elsewhere as a lowrl artifact (docs/import.md).

Sources: a Stable-Baselines3 zip (PPO, A2C, SAC, TD3, DDPG; ``--vecnormalize``), an rsl_rl
checkpoint ``model_*.pt`` or its exported ONNX, a plain ONNX MLP with a YAML sidecar, an Isaac Lab
run directory, a TorchScript MLP. The kind is detected from the file; ``--from KIND`` forces it.
Whatever cannot be represented exactly is refused in one line with exit code 2, and nothing is
left on disk.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lowrl_ros.core.importers.registry import IMPORTERS, ImportOptions, ImportRefused, load_source, write_imported
from lowrl_ros.core.runtime.artifact import ArtifactError
from lowrl_ros.core.runtime.engines import load_artifact


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", type=Path,
                        help="SB3 .zip, rsl_rl model_*.pt, .onnx, TorchScript .pt, or an Isaac Lab run directory")
    parser.add_argument("--from", dest="kind", choices=sorted(IMPORTERS), default=None,
                        help="source kind (default: detected from the file)")
    parser.add_argument("--sidecar", type=Path, default=None,
                        help="YAML contract (names, scaling, limits, period) for ONNX, TorchScript or rsl_rl "
                             "sources (docs/import.md)")
    parser.add_argument("--activation", default=None,
                        help="hidden activation when the source does not record it (rsl_rl checkpoints; default elu)")
    parser.add_argument("--io-descriptors", type=Path, default=None,
                        help="Isaac Lab IO_descriptors.yaml (default: looked for in the run directory, docs/import.md)")
    add_output_arguments(parser)


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags every import command shares (this one and `lowrl import-sb3`)."""
    parser.add_argument("-o", "--output", type=Path, required=True, help="artifact to write (.onnx)")
    parser.add_argument("--vecnormalize", type=Path, default=None,
                        help="SB3 VecNormalize pickle (VecNormalize.save) to fold into the artifact")
    parser.add_argument("--int8", action="store_true", help="store weights as per-channel int8")
    parser.add_argument("--sparsity", type=float, default=0.0, help="prune this fraction of each hidden layer (0..1)")
    parser.add_argument("--version", type=int, default=1, help="policy version (>= 1)")
    parser.add_argument("--tier", default="full", help="compute tier this artifact serves (full, lite, ...)")
    parser.add_argument("--env-id", default=None,
                        help="gymnasium id it was trained in (recorded; sets the control period)")
    parser.add_argument("--control-period", type=float, default=None,
                        help="seconds; overrides the source's (default: the source's, the env's dt, else 0.02)")
    parser.add_argument("--last-action", choices=("raw", "action"), default=None,
                        help="what the policy reads back as its last_action observation: raw (the network's output, "
                             "Isaac Lab/rsl_rl/rl_sar) or action (the executed action); default: the source's own "
                             "(Isaac Lab, rsl_rl: raw; SB3: action; plain ONNX/TorchScript: the sidecar's, "
                             "else action)")


def options_from(args: argparse.Namespace) -> ImportOptions:
    return ImportOptions(sidecar=getattr(args, "sidecar", None), vecnormalize=getattr(args, "vecnormalize", None),
                         env_id=args.env_id, control_period_s=args.control_period,
                         activation=getattr(args, "activation", None), version=args.version, tier=args.tier,
                         last_action=args.last_action, io_descriptors=getattr(args, "io_descriptors", None))


def run(args: argparse.Namespace, prog: str = "lowrl import") -> int:
    output: Path = args.output
    existed = output.exists()
    try:
        imported = load_source(args.source, args.kind, options_from(args))
        path = write_imported(imported, output, int8=args.int8, sparsity=args.sparsity)
        policy = load_artifact(path)  # validates what was written, the way the robot will
    except (ImportRefused, ArtifactError, ValueError, ImportError, OSError) as exc:
        if not existed and output.exists():
            output.unlink()  # nothing half-written stays behind
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    for note in imported.notes:
        print(f"  {note}")
    print(f"wrote {path} ({imported.kind}; {policy.nbytes} bytes, sha256 {policy.sha256[:16]}…, "
          f"{policy.macs} MACs, engine {policy.engine}: {policy.engine_choice_reason})")
    return 0
