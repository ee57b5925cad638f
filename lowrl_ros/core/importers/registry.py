"""Which importer takes which source, what every importer returns, and how it is written (off-board;
docs/import.md). `lowrl import` dispatches through :func:`load_source`.

An importer (``sb3``, ``rsl_rl``, ``onnx``, ``isaaclab``, ``torchscript``) reads a policy another framework
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


@dataclass(frozen=True)
class ImportOptions:
    """What the user told `lowrl import` beyond the source (every importer gets the same options).

    Attributes:
        sidecar: YAML contract sidecar (plain ONNX, TorchScript; docs/import.md has the format).
        vecnormalize: SB3 VecNormalize pickle whose observation statistics are folded in.
        env_id: gymnasium id the policy was trained in (recorded; sets the control period when known).
        control_period_s: seconds; overrides whatever the source says.
        activation: hidden activation when the source does not record it (rsl_rl checkpoints).
        version: policy version written into the contract.
        tier: compute tier the artifact serves.
        last_action: "raw" | "action", what the policy reads back as its last_action observation (recorded as the
            contract's provenance ``last_action``); None: the source's own convention (Isaac Lab, rsl_rl: raw;
            SB3: action; plain ONNX and TorchScript: the sidecar's ``provenance: {last_action: ...}``, else action).
        io_descriptors: Isaac Lab IO_descriptors.yaml to read instead of looking for it in the run directory.
    """

    sidecar: Path | None = None
    vecnormalize: Path | None = None
    env_id: str | None = None
    control_period_s: float | None = None
    activation: str | None = None
    version: int = 1
    tier: str = "full"
    last_action: str | None = None
    io_descriptors: Path | None = None


# kind -> (module, function): function(source: Path, options: ImportOptions) -> Imported.
# Modules are imported only for the kind asked for (each needs its own framework: SB3, torch, onnx).
IMPORTERS: dict[str, tuple[str, str]] = {
    "sb3": ("lowrl_ros.core.importers.sb3", "load_sb3"),
    "rsl_rl": ("lowrl_ros.core.importers.rsl_rl", "load_rsl_rl"),
    "onnx": ("lowrl_ros.core.importers.onnx", "load_onnx"),
    "isaaclab": ("lowrl_ros.core.importers.onnx", "load_isaaclab_run"),
    "torchscript": ("lowrl_ros.core.importers.torchscript", "load_torchscript"),
}


def detect_kind(source: Path) -> str:
    """The source kind from the file itself (not only its name); ImportRefused when unknown.

    A directory is an Isaac Lab run (``exported/policy.onnx`` + ``params/env.yaml``); a zip with a
    ``data`` entry is an SB3 model; a zip with ``*/code/`` or ``*/constants.pkl`` is TorchScript; any
    other ``.pt`` is a torch pickle (an rsl_rl checkpoint); an ONNX protobuf is ``onnx``.
    """
    import zipfile

    source = Path(source)
    if source.is_dir():
        return "isaaclab"
    if not source.exists():
        raise ImportRefused(f"{source}: no such file or directory")
    if zipfile.is_zipfile(source):
        try:
            with zipfile.ZipFile(source) as zf:
                names = zf.namelist()
        except (zipfile.BadZipFile, OSError) as exc:
            raise ImportRefused(f"{source}: a damaged zip ({exc}); re-save the model") from None
        if "data" in names and any(n.endswith(".pth") for n in names):
            return "sb3"
        if source.suffix == ".zip":
            return "sb3"  # model.save() names it .zip (torch files are .pt); the SB3 importer says what is wrong
        if any("/code/" in n or n.endswith("/constants.pkl") for n in names):
            return "torchscript"
        if any(n.endswith("/data.pkl") for n in names):
            return "rsl_rl"
        raise ImportRefused(f"{source}: a zip that is neither an SB3 model nor a torch file; "
                            "give an SB3 .zip, an rsl_rl model_*.pt, a TorchScript .pt or an .onnx (or --from KIND)")
    if source.suffix == ".zip":
        return "sb3"  # a truncated or damaged SB3 zip: its importer names the damage
    if source.suffix in (".pkl", ".pickle"):
        raise ImportRefused(f"{source}: a pickle is not a policy; a VecNormalize file goes with its model: "
                            f"lowrl import MODEL.zip --vecnormalize {source.name} -o OUT.onnx")
    if source.suffix == ".onnx":
        return "onnx"
    if source.suffix in (".pt", ".pth"):
        return "rsl_rl"  # a legacy (non-zip) torch pickle; the rsl_rl importer says if it is not one
    raise ImportRefused(f"{source}: cannot tell what this is from its contents or its name; "
                        f"name the kind with --from {{{','.join(IMPORTERS)}}}")


def load_source(source: str | Path, kind: str | None, options: ImportOptions) -> Imported:
    """Run the importer of ``kind`` (detected when None) on ``source``."""
    import importlib

    source = Path(source)
    kind = kind or detect_kind(source)
    if kind not in IMPORTERS:
        raise ImportRefused(f"unknown source kind {kind!r}; use one of {', '.join(IMPORTERS)}")
    module_name, function = IMPORTERS[kind]
    return getattr(importlib.import_module(module_name), function)(source, options)
