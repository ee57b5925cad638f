#!/usr/bin/env python3
"""Rebuild the graphs of artifacts and bundles with this version's exporter, weights kept bit for bit.

Artifacts written before the U8U8 fix (lowrl_ros/core/runtime/onnx_graph.py) give wrong int8 actions under
ONNX Runtime on x86 CPUs without VNNI, and the loader refuses them. This rewrites each file in place
(atomically); contract, version and stored weights are unchanged, and it checks that they are.

    .venv/bin/python scripts/reexport_models.py models/pendulum_sac_int8.onnx models/pendulum_sac.lowrl
"""
from __future__ import annotations

import io
import json
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lowrl_ros.core.runtime.artifact import parse_artifact, read_artifact_bytes, reexport_artifact  # noqa: E402
from lowrl_ros.core.runtime.bundle import MANIFEST, is_bundle_file, load_bundle, save_bundle  # noqa: E402


def _same_weights(a: Path, b: Path) -> None:
    pa, pb = (parse_artifact(read_artifact_bytes(p), str(p)) for p in (a, b))
    assert pa.contract == pb.contract, f"{a}: contract changed"
    for x, y in zip(pa.layers, pb.layers):
        for f in ("weight_t", "values", "mask", "w_scale", "bias"):
            u, v = getattr(x, f), getattr(y, f)
            assert (u is None) == (v is None) and (u is None or (u == v).all()), f"{a}: {f} changed"


def reexport(path: Path) -> None:
    data = path.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        if not is_bundle_file(data):
            old = Path(tmp) / path.name
            old.write_bytes(data)
            reexport_artifact(old, path)
            _same_weights(old, path)
        else:
            tiers = {}
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                for tier, entry in json.loads(zf.read(MANIFEST))["tiers"].items():
                    old = Path(tmp) / f"old_{tier}.onnx"
                    old.write_bytes(zf.read(entry["file"]))
                    tiers[tier] = reexport_artifact(old, Path(tmp) / f"{tier}.onnx")
                    _same_weights(old, tiers[tier])
            save_bundle(path, tiers)
    load_bundle(path)  # the loader's own checks, both engines against each other
    print(f"re-exported {path}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for arg in sys.argv[1:]:
        reexport(Path(arg))
