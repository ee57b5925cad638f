"""The fine-tune kit: what the robot needs to continue training a deployed policy (torch).

A kit is a directory (docs/finetune.md)::

    kit.json   {"format": "lowrl.finetune_kit", "format_version": 1, "train_config": {...TrainConfig},
                "obs_dim", "action_dim", "contract": {...PolicyContract of the deployed actor}}
    agent.pt   fp32 actor, twin critics and their targets, the RLx2 masks (SAC: log alpha) —
               no optimizer state (fine-tuning starts Adam afresh at its own learning rate)
    prior.npz  optional: the newest transitions of the training run's replay (prior.py; the rlpd learner)
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lowrl_ros.core.finetune.prior import write_prior
from lowrl_ros.core.runtime.artifact import PolicyContract, load_weights
from lowrl_ros.core.train.checkpoint import load_checkpoint
from lowrl_ros.core.train.config import TrainConfig
from lowrl_ros.core.train.trainer import make_agent

KIT_FORMAT = "lowrl.finetune_kit"
KIT_FORMAT_VERSION = 1
# The agent's state entries a kit carries (and a learner snapshot keeps): no optimizer state.
AGENT_KEYS = ("actor", "critic", "critic_target", "actor_target", "actor_masker", "critic_masker", "log_alpha")


@dataclass
class FineTuneKit:
    """What the robot needs to continue training a deployed policy."""

    train_config: TrainConfig
    contract: PolicyContract
    agent_state: dict[str, Any]
    path: Path | None = None

    @property
    def obs_dim(self) -> int:
        return self.contract.obs_dim

    @property
    def action_dim(self) -> int:
        return self.contract.action_dim


def write_kit_from_agent(agent, contract: PolicyContract, kit_dir: str | Path) -> Path:
    """Write a kit for ``agent`` (an OffPolicyAgent) whose deployed actor has ``contract``."""
    kit_dir = Path(kit_dir)
    kit_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v for k, v in agent.state_dict().items() if k in AGENT_KEYS}
    tmp = kit_dir / "agent.pt.tmp"
    torch.save(state, tmp)
    tmp.replace(kit_dir / "agent.pt")
    meta = {"format": KIT_FORMAT, "format_version": KIT_FORMAT_VERSION,
            "train_config": agent.cfg.to_dict(), "obs_dim": agent.obs_dim, "action_dim": agent.act_dim,
            "contract": contract.to_dict()}
    tmp = kit_dir / "kit.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2, default=float))
    tmp.replace(kit_dir / "kit.json")  # written last: a kit.json means the kit is whole
    return kit_dir


def write_kit(run_dir: str | Path, kit_dir: str | Path, artifact: str | Path | None = None) -> Path:
    """Write a fine-tune kit from a `lowrl train` run directory.

    Args:
        run_dir: holds ``checkpoint.pt`` and ``actor.onnx`` (what `lowrl train` writes).
        kit_dir: destination directory (created).
        artifact: the deployed artifact whose contract (version, scaling) the kit carries;
            default ``run_dir/actor.onnx``.
    """
    run_dir = Path(run_dir)
    artifact = Path(artifact) if artifact else run_dir / "actor.onnx"
    if not artifact.is_file():
        raise ValueError(f"{artifact} does not exist; give the artifact the robot runs (lowrl train writes "
                         "RUN_DIR/actor.onnx)")
    state = load_checkpoint(run_dir)
    cfg = TrainConfig.from_dict(state["config"])
    _, contract = load_weights(artifact)
    agent = make_agent(cfg, contract.obs_dim, contract.action_dim)
    agent.load_state_dict(state["agent"])
    if "buffer" in state:  # before kit.json: a kit.json means the kit is whole
        Path(kit_dir).mkdir(parents=True, exist_ok=True)
        write_prior(kit_dir, state["buffer"])
    return write_kit_from_agent(agent, contract, kit_dir)


def load_kit(kit_dir: str | Path) -> FineTuneKit:
    """Load and check a kit directory; ValueError saying what is wrong and how to fix it."""
    kit_dir = Path(kit_dir)
    meta_path, agent_path = kit_dir / "kit.json", kit_dir / "agent.pt"
    if not meta_path.is_file() or not agent_path.is_file():
        raise ValueError(f"{kit_dir} is not a fine-tune kit (needs kit.json and agent.pt); write one with "
                         "lowrl_ros.core.finetune.kit.write_kit(RUN_DIR, KIT_DIR)")
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != KIT_FORMAT or meta.get("format_version") != KIT_FORMAT_VERSION:
        raise ValueError(f"{meta_path}: format {meta.get('format')!r} v{meta.get('format_version')!r} is not "
                         f"{KIT_FORMAT} v{KIT_FORMAT_VERSION}; re-write the kit with this version of lowrl_ros")
    cfg = TrainConfig.from_dict(meta["train_config"])
    contract = PolicyContract.from_dict(meta["contract"])
    if (contract.obs_dim, contract.action_dim) != (meta["obs_dim"], meta["action_dim"]):
        raise ValueError(f"{meta_path}: the contract is {contract.obs_dim}->{contract.action_dim} but the kit says "
                         f"{meta['obs_dim']}->{meta['action_dim']}; re-write the kit")
    # weights_only=False: tensors plus plain ints; the kit is our own file, checked by the trainer's HMAC stream.
    state = torch.load(agent_path, map_location="cpu", weights_only=False)
    missing = [k for k in ("actor", "critic", "critic_target") if k not in state]
    if missing:
        raise ValueError(f"{agent_path} lacks {missing}; re-write the kit")
    return FineTuneKit(cfg, contract, state, kit_dir)
