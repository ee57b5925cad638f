"""Training configuration: one frozen dataclass whose documented fields are also the CLI flags.

Every field carries a one-line ``help`` in its metadata; `lowrl train` turns each field into a
``--flag`` with that help, and YAML presets in ``config/train_*.yaml`` are flat mappings of the
same field names (validated by the same ``__post_init__``).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lowrl_ros.core import config
from lowrl_ros.core.config import field, require

ALGOS = ("sac", "td3")
# dense: full networks. small_dense: dense with a hidden width chosen so the parameter count
# matches the sparse networks. static: Erdős–Rényi masks fixed at init. set: magnitude drop,
# random grow (Mocanu et al. 2018). rigl: magnitude drop, gradient grow (Evci et al. 2020), no
# RL-specific parts. rlx2: rigl + delayed multi-step TD + dynamic-capacity buffer (Tan et al. 2023).
VARIANTS = ("dense", "small_dense", "static", "set", "rigl", "rlx2")
SPARSE_VARIANTS = ("static", "set", "rigl", "rlx2")
SPARSE_INITS = ("topk", "scaled")  # see lowrl_ros/core/train/sparse.py
# Fields that change what a run shows, not what it trains (runs differing only in them are the same run).
DISPLAY_FIELDS = ("progress", "tensorboard")
ENVS = ("Pendulum-v1", "InvertedPendulum-v5", "HalfCheetah-v5", "Hopper-v5")


@dataclass(frozen=True)
class TrainConfig:
    """Everything one training run needs; see each field's ``help`` (also ``lowrl train -h``)."""

    algo: str = field("sac", "algorithm: sac or td3")
    env_id: str = field("Pendulum-v1", "gymnasium environment id (" + ", ".join(ENVS) + " are tested)")
    variant: str = field("rlx2", "network variant: " + ", ".join(VARIANTS))
    seed: int = field(0, "seed of networks, replay sampling, exploration and environments")
    total_steps: int = field(10_000, "environment steps to train for")
    warmup_steps: int = field(1_000, "uniform-random environment steps before learning starts")
    batch_size: int = field(256, "minibatch size of each gradient step")
    updates_per_step: int = field(1, "gradient steps per environment step (update-to-data ratio)")
    hidden: int = field(256, "width of each hidden layer (small_dense picks its own width)")
    depth: int = field(2, "number of hidden layers of actor and critics")
    lr: float = field(3e-4, "Adam learning rate of actor, critics (and SAC temperature)")
    gamma: float = field(0.99, "discount factor")
    tau: float = field(0.005, "Polyak rate of the target networks")
    actor_sparsity: float = field(0.9, "fraction of actor weights that are zero (sparse variants)")
    critic_sparsity: float = field(0.8, "fraction of critic weights that are zero (sparse variants)")
    mask_interval: int = field(10_000, "RLx2/RigL/SET Delta T: optimizer updates of a network between its mask updates")
    zeta0: float = field(0.5, "initial drop/grow fraction of the cosine schedule")
    sparse_init: str = field("topk", "initial weights of a sparse layer: topk (the paper's: the largest |w| of the "
                                     "dense init) or scaled (U(+-1/sqrt(active fan-in)) per unit, the dense layer's "
                                     "scale)")
    nstep: int = field(3, "rlx2: multi-step TD horizon n used after the delay")
    nstep_delay: int = field(300_000, "rlx2: gradient steps with 1-step TD before switching to n-step")
    buffer_size: int = field(1_000_000, "replay capacity (rlx2: maximum of the dynamic capacity)")
    buffer_min: int = field(100_000, "rlx2: the dynamic buffer never shrinks below this many transitions")
    buffer_check_interval: int = field(10_000, "rlx2: environment steps between policy-distance checks")
    buffer_check_size: int = field(2_048, "rlx2: oldest transitions the policy distance is measured on (K)")
    buffer_threshold: float = field(0.2, "rlx2: policy distance above which the oldest transitions are dropped")
    buffer_drop_fraction: float = field(0.1, "rlx2: fraction of the stored transitions dropped per shrink")
    policy_delay: int = field(2, "td3: critic updates per actor update")
    policy_noise: float = field(0.2, "td3: target policy smoothing noise (normalised action units)")
    noise_clip: float = field(0.5, "td3: clip of the target smoothing noise")
    explore_noise: float = field(0.1, "td3: Gaussian exploration noise (normalised action units)")
    alpha: float = field(0.0, "sac: fixed entropy temperature; 0 means learned (target entropy -action_dim)")
    eval_interval: int = field(5_000, "environment steps between deterministic evaluations")
    eval_episodes: int = field(10, "episodes per evaluation")
    stop_return: float = field(math.nan, "stop early once an evaluation's mean return reaches this (nan: never)")
    checkpoint_interval: int = field(50_000, "environment steps between checkpoints (0: only at the end)")
    threads: int = field(1, "torch intra-op threads (1 suits a shared, busy machine; on an idle one its core count "
                            "is faster)")
    progress: bool = field(True, "draw a progress line on stderr")
    tensorboard: bool = field(False, "also write the logged scalars as TensorBoard events to RUN_DIR/tensorboard")

    def __post_init__(self) -> None:
        need = functools.partial(require, owner="TrainConfig")

        need(self.algo in ALGOS, f"algo={self.algo!r} is unknown; use one of {ALGOS}")
        need(self.variant in VARIANTS, f"variant={self.variant!r} is unknown; use one of {VARIANTS}")
        need(isinstance(self.env_id, str) and "-v" in self.env_id,
             f"env_id={self.env_id!r} is not a gymnasium id like 'Pendulum-v1'")
        for name in ("total_steps", "batch_size", "updates_per_step", "hidden", "depth", "mask_interval",
                     "nstep", "buffer_size", "buffer_min", "buffer_check_interval", "buffer_check_size",
                     "policy_delay", "eval_interval", "eval_episodes", "threads"):
            need(int(getattr(self, name)) >= 1, f"{name}={getattr(self, name)} must be >= 1")
        for name in ("warmup_steps", "nstep_delay", "checkpoint_interval"):
            need(int(getattr(self, name)) >= 0, f"{name}={getattr(self, name)} must be >= 0")
        need(self.warmup_steps < self.total_steps,
             f"warmup_steps={self.warmup_steps} must be below total_steps={self.total_steps}; "
             "lower --warmup-steps or raise --total-steps")
        for name in ("actor_sparsity", "critic_sparsity"):
            v = getattr(self, name)
            need(0.0 <= v < 1.0, f"{name}={v} must be in [0, 1); 0.9 means 90% of the weights are zero")
        need(self.sparse_init in SPARSE_INITS,
             f"sparse_init={self.sparse_init!r} is unknown; use one of {SPARSE_INITS}")
        need(0.0 < self.zeta0 <= 1.0, f"zeta0={self.zeta0} must be in (0, 1]; the paper uses 0.5")
        need(0.0 < self.gamma <= 1.0, f"gamma={self.gamma} must be in (0, 1]")
        need(0.0 < self.tau <= 1.0, f"tau={self.tau} must be in (0, 1]")
        need(self.lr > 0, f"lr={self.lr} must be > 0")
        need(self.buffer_min <= self.buffer_size,
             f"buffer_min={self.buffer_min} exceeds buffer_size={self.buffer_size}; lower --buffer-min")
        need(0.0 < self.buffer_drop_fraction < 1.0,
             f"buffer_drop_fraction={self.buffer_drop_fraction} must be in (0, 1)")
        need(self.buffer_threshold > 0, f"buffer_threshold={self.buffer_threshold} must be > 0")
        need(self.alpha >= 0, f"alpha={self.alpha} must be >= 0 (0: learned temperature)")
        for name in ("policy_noise", "noise_clip", "explore_noise"):
            need(getattr(self, name) >= 0, f"{name}={getattr(self, name)} must be >= 0")

    # --- derived switches --------------------------------------------------------------------
    @property
    def sparse(self) -> bool:
        """True when actor and critics carry masks."""
        return self.variant in SPARSE_VARIANTS

    @property
    def uses_multistep(self) -> bool:
        """Delayed multi-step TD is one of RLx2's RL-specific parts (paper §4.2)."""
        return self.variant == "rlx2" and self.nstep > 1

    @property
    def dynamic_buffer(self) -> bool:
        """The dynamic-capacity buffer is RLx2's other RL-specific part (paper §4.3)."""
        return self.variant == "rlx2"

    def replace(self, **changes: Any) -> "TrainConfig":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        """Build from a mapping of field names; unknown names are an error that lists the valid ones."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"TrainConfig: unknown field(s) {unknown}; valid fields are {sorted(names)}")
        typed = {}
        for f in dataclasses.fields(cls):
            if f.name in data:
                typed[f.name] = coerce(f, data[f.name])
        return cls(**typed)

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> "TrainConfig":
        """Load a preset (a flat YAML mapping of field names), then apply overrides."""
        import yaml

        p = Path(path)
        if not p.is_file():
            raise ValueError(f"TrainConfig: preset {p} does not exist; presets live in config/train_*.yaml")
        data = yaml.safe_load(p.read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"TrainConfig: {p} must be a mapping of field names to values")
        data.update(overrides)
        return cls.from_dict(data)


def parse_overrides(items: list[str], flag: str) -> dict[str, str]:
    """``FIELD=VALUE`` command-line items as TrainConfig overrides (TrainConfig checks names and values)."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise ValueError(f"{flag} {item!r}: use FIELD=VALUE with a TrainConfig field")
        out[name] = value
    return out


def coerce(f: dataclasses.Field, value: Any) -> Any:
    """Convert a YAML/CLI value to the field's type, with a message naming the field on failure."""
    return config.coerce(f, value, owner="TrainConfig")
