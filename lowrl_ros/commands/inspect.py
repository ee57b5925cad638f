"""`lowrl inspect PATH`: validate an artifact or bundle and print its contract, tiers and costs.

Exit status 0 when every tier loads (contract, shapes, finite weights, engines agree), 2 with the
loader's message otherwise, so it doubles as a pre-flight check before copying a file to a robot.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lowrl_ros.core.runtime.artifact import ArtifactError, artifact_head_bytes, parse_artifact
from lowrl_ros.core.runtime.bundle import load_bundle


def describe(path: Path, engine: str = "auto") -> dict:
    """Everything `inspect` prints, as a dict (also what --json writes)."""
    bundle = load_bundle(path, engine=engine)
    tiers = {}
    for name, policy in bundle.policies.items():
        parsed = parse_artifact(_tier_bytes(path, name, bundle), policy.source)
        tiers[name] = {
            "bytes": policy.nbytes,
            "sha256": policy.sha256,
            "layers": _layers(parsed.layers),
            "activations": f"{parsed.hidden_activation}/{parsed.output_activation}",
            "macs": policy.macs,
            "dense_macs": policy.dense_macs,
            "nnz_macs": policy.nnz_macs,
            "engine": policy.engine,
            "engine_choice_reason": policy.engine_choice_reason,
            "numpy_kernels": policy.kernels,
            "contract": policy.contract.to_dict(),
        }
        if parsed.residual is not None:
            tiers[name]["residual"] = {"layers": _layers(parsed.head_layers), "bound": list(parsed.residual.bound),
                                       "hidden_activation": parsed.residual.hidden_activation,
                                       "bytes": artifact_head_bytes(parsed)}
    return {"path": str(path), "version": bundle.version, "sha256": bundle.sha256,
            "smallest_tier": bundle.smallest().contract.tier, "tiers": tiers}


def _layers(layers: list) -> list[dict]:
    return [{"shape": f"{layer.in_dim}->{layer.out_dim}", "storage": layer.storage, "dtype": layer.dtype,
             "nnz": layer.nnz, "sparsity": round(1 - layer.nnz / (layer.in_dim * layer.out_dim), 4),
             "stored_bytes": layer.nbytes()} for layer in layers]


def _print_layers(layers: list[dict], what: str) -> None:
    for i, layer in enumerate(layers):
        print(f"  {what} {i}: {layer['shape']:>11} {layer['dtype']} {layer['storage']:<6} "
              f"nnz {layer['nnz']} (sparsity {layer['sparsity']:.0%}), {layer['stored_bytes']} bytes")


def _tier_bytes(path: Path, name: str, bundle) -> bytes:
    import io
    import zipfile

    from lowrl_ros.core.runtime.bundle import MANIFEST, is_bundle_file

    data = path.read_bytes()
    if not is_bundle_file(data):
        return data
    zf = zipfile.ZipFile(io.BytesIO(data))
    return zf.read(json.loads(zf.read(MANIFEST))["tiers"][name]["file"])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="artifact (.onnx) or bundle (.lowrl)")
    parser.add_argument("--engine", choices=["auto", "ort", "numpy"], default="auto", help="engine to load with")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args: argparse.Namespace) -> int:
    try:
        info = describe(args.path, args.engine)
    except ArtifactError as exc:
        print(f"lowrl inspect: INVALID: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"{info['path']}: OK, version {info['version']}, sha256 {info['sha256']}")
    print(f"tiers: {', '.join(info['tiers'])} (smallest: {info['smallest_tier']})")
    for name, t in info["tiers"].items():
        c = t["contract"]
        print(f"\n[{name}] {t['bytes']} bytes, {t['macs']} MACs per call on {t['engine']} "
              f"({t['nnz_macs']} non-zero of {t['dense_macs']}), activations {t['activations']}")
        _print_layers(t["layers"], "layer")
        if "residual" in t:
            r = t["residual"]
            print(f"  residual head: y = base + bound * tanh(head(x)), hidden {r['hidden_activation']}, "
                  f"{r['bytes']} bytes of {t['bytes']} (what a new head changes), bound "
                  + ", ".join(f"{b:g}" for b in r["bound"]))
            _print_layers(r["layers"], " head")
        print(f"  engine: {t['engine']} ({t['engine_choice_reason']})")
        print(f"  obs ({len(c['obs_names'])}): {', '.join(c['obs_names'])}")
        print(f"  actions ({len(c['action_names'])}): "
              + ", ".join(f"{n} [{lo:g}, {hi:g}]"
                          for n, lo, hi in zip(c["action_names"], c["action_low"], c["action_high"])))
        print(f"  control period {c['control_period_s']} s, version {c['version']}, parent {c['parent_version']}, "
              f"tier {c['tier']}, env {c['env_id']}")
        if c["provenance"]:
            print("  provenance: " + ", ".join(f"{k}={v}" for k, v in sorted(c["provenance"].items())))
    return 0
