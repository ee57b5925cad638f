"""The training source's own config, for ``lowrl check --run-dir`` (off-board; may need the source's framework).

The deployed artifact's contract says what the artifact computes, not what training computed: an
artifact imported with another sidecar, an overridden control period or an old lowrl differs from
its run. This module re-reads the training source (an Isaac Lab run directory, an rsl_rl checkpoint,
an SB3 zip: anything ``lowrl import`` reads) the way ``lowrl import`` does and returns a
:class:`~lowrl_ros.core.runtime.deploy_check.TrainingConfig`, which the deploy check compares with the
artifact and the robot file, term by term.
"""
from __future__ import annotations

from pathlib import Path

from lowrl_ros.core.importers.registry import ImportOptions, load_source
from lowrl_ros.core.runtime.artifact import last_action_convention
from lowrl_ros.core.runtime.deploy_check import TrainingConfig


def training_config(source: str | Path) -> TrainingConfig:
    """What the training source says about its observation, action, period and conventions.

    Raises ImportRefused (a ValueError) when the source cannot be read, as ``lowrl import`` would.
    Isaac Lab's joint position action (``use_default_offset``, or the IO descriptors' offset) adds the
    default joint positions: its action offset is the training default pose.
    """
    source = Path(source)
    imported = load_source(source, None, ImportOptions())
    contract = imported.contract
    kind = imported.kind if imported.kind != "onnx" or not source.is_dir() else "isaaclab"
    if "isaaclab_action_term" in contract.provenance:
        kind = "isaaclab"
    clips = {}
    for key, value in contract.provenance.items():
        if key.startswith("obs_term_clip."):
            lo, hi = (float(v) for v in value.strip("[]").split(","))
            clips[key.removeprefix("obs_term_clip.")] = (lo, hi)
    pose = None
    if kind == "isaaclab" and contract.action_offset is not None:
        pose = dict(zip(contract.action_names, contract.action_offset))
    return TrainingConfig(
        source=f"{source} ({kind})", contract=contract, term_clips=clips,
        last_action=last_action_convention(contract),  # the importer records the source's convention
        quaternion_order=contract.provenance.get("quaternion_order"), default_pose=pose,
        relative_terms=tuple(sorted({n.split("[")[0] for n in contract.obs_names if "_rel" in n.split("[")[0]
                                     and "joint_pos" in n})),
    )
