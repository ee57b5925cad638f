"""What every policy importer returns and how it is written (off-board; see docs/import.md).

An importer (``sb3``, ``rsl_rl``, ``onnx_import``, ``torchscript``) reads a policy another framework
trained and returns an :class:`Imported`: the actor as :class:`MlpWeights` and its I/O contract,
with the deterministic path of the source framework folded in (observation normalisation and clip,
action scale, offset and limits). Anything it cannot represent exactly it refuses with
:class:`ImportRefused`, one line naming what was found, what is supported and how to export a
supported policy instead. :func:`write_imported` writes the artifact atomically, so a refused or
failed import leaves nothing on disk.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract, prune_by_magnitude, save_artifact


class ImportRefused(ValueError):
    """The source cannot be imported; the message is one line: found, supported, what to do."""


@dataclass
class Imported:
    """An imported actor, ready to be written as an artifact.

    Attributes:
        weights: the actor MLP (float32), activations from core/runtime/activations.py.
        contract: its I/O contract (names, normalisation, action transform, limits, period, provenance).
        kind: the source kind ("sb3", "rsl_rl", "onnx", "torchscript").
        notes: one-line facts the user should see (e.g. "VecNormalize folded in: clip_obs 10").
    """

    weights: MlpWeights
    contract: PolicyContract
    kind: str
    notes: list[str] = field(default_factory=list)


def write_imported(imported: Imported, output: str | Path, *, int8: bool = False, sparsity: float = 0.0) -> Path:
    """Write ``imported`` as an artifact at ``output`` (atomically; nothing is left behind on failure)."""
    weights = imported.weights
    if sparsity:
        weights = prune_by_magnitude(weights, sparsity, skip_output=True)
    return save_artifact(output, weights, imported.contract, int8=int8)
