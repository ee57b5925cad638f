"""The fine-tune kit: what the robot needs to continue training a deployed policy (torch).

A kit is a directory (docs/finetune_reference.md, "The fine-tune kit")::

    kit.json   {"format": "lowrl.finetune_kit", "format_version": 1, "train_config": {...TrainConfig},
                "obs_dim", "action_dim", "contract": {...PolicyContract of the deployed actor}}
    agent.pt   fp32 actor, twin critics and their targets, the RLx2 masks (SAC: log alpha) —
               no optimizer state (fine-tuning starts Adam afresh at its own learning rate)
    prior.npz  optional: the newest transitions of the training run's replay (prior.py; the rlpd learner)

Two kinds of kit:

* from a `lowrl train` run (:func:`write_kit`): the actor is our own SAC/TD3 network; format 1.
* from any artifact (:func:`write_kit_from_artifact`, `lowrl kit`): an imported policy (SB3 PPO,
  rsl_rl, ...). Its actor is the artifact's MLP exactly (:class:`ArtifactActor`: its activations, its
  normaliser and action transform, frozen); the critics are new and learned first, from rollouts of
  the imported policy in a gymnasium environment or from the robot's transition log. ``kit.json``
  gains an ``"actor"`` entry (sizes, activations, masked layers, int8) and the format is 2, so an
  older robot refuses it instead of building the wrong network. Format-1 kits load as before.
"""
from __future__ import annotations

import copy
import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lowrl_ros.core.finetune.prior import write_prior
from lowrl_ros.core.runtime.artifact import PolicyContract, parse_artifact, read_artifact_bytes
from lowrl_ros.core.sim.reality_gap import RealityGapConfig, gap_file_fields, make_gapped_env
from lowrl_ros.core.train.agent import OffPolicyAgent, to_tensors
from lowrl_ros.core.train.checkpoint import load_checkpoint
from lowrl_ros.core.train.config import TrainConfig
from lowrl_ros.core.train.networks import ArtifactActor
from lowrl_ros.core.train.replay import Batch, ReplayBuffer
from lowrl_ros.core.train.sac import SACAgent
from lowrl_ros.core.train.td3 import TD3Agent
from lowrl_ros.core.train.trainer import make_agent

KIT_FORMAT = "lowrl.finetune_kit"
# 1: a `lowrl train` kit; 2: + "actor" (a kit made from an artifact). A kit is written with the lowest
# version that describes it, so a train kit still loads on a robot that reads only version 1.
KIT_FORMAT_VERSION = 2
# The agent's state entries a kit carries (and a learner snapshot keeps): no optimizer state.
AGENT_KEYS = ("actor", "critic", "critic_target", "actor_target", "actor_masker", "critic_masker", "log_alpha")


@dataclass
class FineTuneKit:
    """What the robot needs to continue training a deployed policy."""

    train_config: TrainConfig
    contract: PolicyContract
    agent_state: dict[str, Any]
    path: Path | None = None
    # A kit made from an artifact: {"sizes", "hidden_activation", "output_activation", "masked_layers", "int8", ...};
    # None for a `lowrl train` kit (our own SAC/TD3 actor).
    actor_spec: dict[str, Any] | None = None
    # What its prior data (prior.npz) are, for the fine-tuner's notes: "" for the training simulator's.
    prior_source: str = ""

    @property
    def int8(self) -> bool:
        """Whether versions are stored int8 (a train kit's always are; an imported one's as its artifact was)."""
        return True if self.actor_spec is None else bool(self.actor_spec.get("int8", True))

    @property
    def obs_dim(self) -> int:
        return self.contract.obs_dim

    @property
    def action_dim(self) -> int:
        return self.contract.action_dim


def write_kit_from_agent(agent, contract: PolicyContract, kit_dir: str | Path) -> Path:
    """Write a kit for ``agent`` (an OffPolicyAgent) whose deployed actor has ``contract``."""
    return _write(agent, contract, kit_dir, {})


def _write(agent: OffPolicyAgent, contract: PolicyContract, kit_dir: str | Path, extra: dict[str, Any]) -> Path:
    kit_dir = Path(kit_dir)
    kit_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v for k, v in agent.state_dict().items() if k in AGENT_KEYS}
    tmp = kit_dir / "agent.pt.tmp"
    torch.save(state, tmp)
    tmp.replace(kit_dir / "agent.pt")
    meta = {"format": KIT_FORMAT, "format_version": 2 if "actor" in extra else 1,
            "train_config": agent.cfg.to_dict(), "obs_dim": agent.obs_dim, "action_dim": agent.act_dim,
            "contract": contract.to_dict(), **extra}
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
    contract = parse_artifact(read_artifact_bytes(artifact), str(artifact)).contract
    agent = make_agent(cfg, contract.obs_dim, contract.action_dim)
    agent.load_state_dict(state["agent"])
    if "buffer" in state:  # before kit.json: a kit.json means the kit is whole
        Path(kit_dir).mkdir(parents=True, exist_ok=True)
        write_prior(kit_dir, state["buffer"])
    return write_kit_from_agent(agent, contract, kit_dir)


def recording_policy(kit_path: str, base_policy_path: str, offboard: bool) -> Any:
    """What finetune_node records for: the kit (a FineTuneKit), or, streaming off-board without a kit
    (``learner: offboard``: the trainer node learns, e.g. ``offboard_method: retrain``), the base artifact's
    contract as ``.contract``, ``.obs_dim``, ``.action_dim``; ValueError saying which to give."""
    if kit_path:
        return load_kit(kit_path)
    if offboard and base_policy_path:
        from types import SimpleNamespace

        from lowrl_ros.core.runtime.artifact import parse_artifact, read_artifact_bytes

        contract = parse_artifact(read_artifact_bytes(base_policy_path), str(base_policy_path)).contract
        return SimpleNamespace(contract=contract, obs_dim=contract.obs_dim, action_dim=contract.action_dim)
    raise ValueError("kit_path is empty; set it to a fine-tune kit directory (lowrl kit ARTIFACT -o KIT), or, with "
                     "learner offboard, set base_policy_path (the artifact the robot runs) and no kit")


def load_kit(kit_dir: str | Path) -> FineTuneKit:
    """Load and check a kit directory; ValueError saying what is wrong and how to fix it."""
    kit_dir = Path(kit_dir)
    meta_path, agent_path = kit_dir / "kit.json", kit_dir / "agent.pt"
    if not meta_path.is_file() or not agent_path.is_file():
        raise ValueError(f"{kit_dir} is not a fine-tune kit (needs kit.json and agent.pt); write one with "
                         "lowrl_ros.core.finetune.kit.write_kit(RUN_DIR, KIT_DIR)")
    meta = json.loads(meta_path.read_text())
    fv = meta.get("format_version")
    if meta.get("format") != KIT_FORMAT or not isinstance(fv, int) or not 1 <= fv <= KIT_FORMAT_VERSION:
        raise ValueError(f"{meta_path}: format {meta.get('format')!r} v{fv!r} is not "
                         f"{KIT_FORMAT} v1..{KIT_FORMAT_VERSION}; re-write the kit with this version of lowrl_ros")
    actor_spec = meta.get("actor") if fv >= 2 else None
    if fv >= 2 and not _valid_spec(actor_spec):
        raise ValueError(f"{meta_path}: its 'actor' entry is missing or malformed ({actor_spec!r}); re-write the kit "
                         "with `lowrl kit ARTIFACT -o KIT_DIR ...`")
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
    prior = meta.get("prior") or {}
    source = (f"simulator transitions of {prior.get('env')} with the gap of {prior['gap_file']} (an identified "
              "simulator)" if prior.get("gap_file") else "")
    return FineTuneKit(cfg, contract, state, kit_dir, actor_spec, source)


# ---- kits made from an artifact -------------------------------------------------------------------
class KitRefused(ValueError):
    """A kit cannot be made from what was given; the message says what is wrong and what to give."""


def _valid_spec(spec: Any) -> bool:
    return (isinstance(spec, dict) and isinstance(spec.get("sizes"), list) and len(spec["sizes"]) >= 2
            and all(isinstance(n, int) and n > 0 for n in spec["sizes"])
            and isinstance(spec.get("hidden_activation"), str) and spec.get("output_activation") in ("tanh", "none")
            and isinstance(spec.get("masked_layers", []), list))


def artifact_actor(contract: PolicyContract, spec: dict[str, Any], *, stochastic: bool = False,
                   init_std: float = 0.1) -> ArtifactActor:
    """An :class:`ArtifactActor` of the shape ``spec`` describes, with ``contract``'s normaliser and transform."""
    scale, offset = contract.action_transform(spec["output_activation"])
    return ArtifactActor(list(spec["sizes"]), spec["hidden_activation"], spec["output_activation"],
                         obs_offset=contract.obs_offset, obs_scale=contract.obs_scale, obs_clip=contract.obs_clip,
                         action_scale=scale, action_offset=offset, action_low=contract.action_low,
                         action_high=contract.action_high, masked_layers=tuple(spec.get("masked_layers", ())),
                         stochastic=stochastic, init_std=init_std)


class _ArtifactAgentMixin:
    """What both learners of an imported actor share: the actor is built from the artifact, its masks kept."""

    contract: PolicyContract
    spec: dict[str, Any]

    def step_network(self, masker, opt) -> None:
        super().step_network(masker, opt)  # type: ignore[misc]
        if opt is self.actor_opt:  # type: ignore[attr-defined]
            self.actor.apply_masks()  # type: ignore[attr-defined]


class ArtifactTD3Agent(_ArtifactAgentMixin, TD3Agent):
    """TD3 over an imported deterministic actor: exploration noise on the action, twin critics, delayed actor.

    The learner for an imported actor by default (docs/finetune.md, "Fine-tune an imported policy"):
    the actor is deterministic already, and TD3 trains exactly the function that is deployed.
    """

    def __init__(self, cfg: TrainConfig, contract: PolicyContract, spec: dict[str, Any]) -> None:
        self.contract, self.spec = contract, spec
        super().__init__(cfg, contract.obs_dim, contract.action_dim)

    def build_actor(self, hidden: int) -> ArtifactActor:
        actor = artifact_actor(self.contract, self.spec)
        self.actor_target = copy.deepcopy(actor).requires_grad_(False)
        return actor


class ArtifactSACAgent(_ArtifactAgentMixin, SACAgent):
    """SAC over an imported actor with a learned state-independent log-std (no tanh squash).

    The deployed action stays the artifact's (the clamped mean); the log-std only shapes exploration
    and the entropy term, and is dropped from every version.
    """

    def __init__(self, cfg: TrainConfig, contract: PolicyContract, spec: dict[str, Any]) -> None:
        self.contract, self.spec = contract, spec
        super().__init__(cfg, contract.obs_dim, contract.action_dim)

    def build_actor(self, hidden: int) -> ArtifactActor:
        return artifact_actor(self.contract, self.spec, stochastic=True, init_std=max(self.cfg.explore_noise, 1e-3))

    @torch.no_grad()
    def explore(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = torch.from_numpy(np.asarray(obs, dtype=np.float32))[None]
        a, _ = self.actor.sample(x)
        return a[0].numpy(), self.actor(x)[0].numpy()

    def update(self, batch: Batch, train_actor: bool = True, bc_weight: float = 0.0) -> None:
        obs, act, rew, next_obs, disc = to_tensors(batch)
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            next_a, next_logp = self.actor.sample(next_obs)
            y = rew + disc * (self.critic_target(next_obs, next_a).min(0).values - alpha * next_logp)
        q = self.critic(obs, act)
        critic_loss = 0.5 * (q - y).square().mean(1).sum()
        self.critic_step(critic_loss)
        self.gradient_steps += 1
        if not train_actor:
            self.polyak()
            return
        a, logp = self.actor.sample(obs)
        q_pi = self.critic(obs, a).min(0).values
        if bc_weight > 0.0:  # TD3+BC, as SACAgent: soft-Q term over its mean |Q| + bc_weight x MSE of the mean action
            lam = 1.0 / q_pi.detach().abs().mean().clamp_min(1e-6)
            actor_loss = lam * (alpha * logp - q_pi).mean() + bc_weight * (self.actor(obs) - act).square().mean()
        else:
            actor_loss = (alpha * logp - q_pi).mean()
        self.actor_step(actor_loss)
        self.temperature_step(logp)
        self.polyak()


def make_kit_agent(cfg: TrainConfig, contract: PolicyContract, actor_spec: dict[str, Any] | None,
                   wrap=None) -> OffPolicyAgent:
    """The learner a kit describes: our own SAC/TD3 (``actor_spec`` None) or one over an imported actor.

    ``wrap`` turns the agent class into another (crossq.learner_class: the crossq and rlpd learners).
    """
    if actor_spec is None:
        cls, args = (SACAgent if cfg.algo == "sac" else TD3Agent), (contract.obs_dim, contract.action_dim)
    else:
        cls, args = (ArtifactSACAgent if cfg.algo == "sac" else ArtifactTD3Agent), (contract, actor_spec)
    return (wrap(cls) if wrap is not None else cls)(cfg, *args)


@dataclass(frozen=True)
class WarmupReport:
    """What the critic warm-up of :func:`write_kit_from_artifact` saw and did."""

    source: str
    transitions: int
    critic_updates: int
    td_error_before: float
    td_error_after: float
    mean_reward: float
    wall_s: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def write_kit_from_artifact(artifact: str | Path, kit_dir: str | Path, *, env_id: str | None = None,
                            transitions: str | Path | None = None, algo: str = "td3", warmup_steps: int = 5000,
                            critic_updates: int = 5000, seed: int = 0, hidden: int = 256, depth: int = 2,
                            batch_size: int = 256, explore_noise: float = 0.1, gamma: float = 0.99,
                            threads: int = 1, progress: bool = False,
                            gap_file: str | Path | None = None) -> tuple[Path, WarmupReport]:
    """Make a fine-tune kit from any artifact (an imported SB3 / rsl_rl / Isaac Lab policy).

    The actor is the artifact's network exactly (:class:`ArtifactActor`); new twin critics
    (``hidden`` x ``depth``, ReLU) learn first, with the actor held still: ``critic_updates`` TD
    updates on transitions of the imported policy. They come from ``warmup_steps`` steps of the
    policy in the gymnasium environment ``env_id`` with Gaussian exploration noise
    (``explore_noise`` x half the action range; the env's reward), or from the robot's transition
    log at ``transitions`` (its recorded rewards). Exactly one of the two is required. ``threads``:
    torch threads (1: best on a shared machine). ``gap_file`` (with ``env_id``): a sim robot node params
    file whose ``gap.*`` entries the environment runs with, e.g. the gap the off-board identifier found:
    the critics and the prior data then come from the identified simulator, not the training one.

    Raises:
        KitRefused: neither or both data sources, spaces that do not match the contract, a log
            without usable transitions. ArtifactError for a bad artifact. Nothing is written then.
    """
    if (env_id is None) == (transitions is None):
        raise KitRefused("a kit needs data for its critics: give --env ENV_ID (a gymnasium environment with the "
                         "policy's observation and action spaces, its reward) or --transitions LOG (a transition "
                         "log the robot recorded, with rewards)" if env_id is None else
                         "give --env or --transitions, not both (the critics learn from one source)")
    if algo not in ("td3", "sac"):
        raise KitRefused(f"--algo {algo!r}: use td3 (default) or sac")
    gap = None
    if gap_file is not None:
        if env_id is None:
            raise KitRefused("--gap-file changes the simulator of --env: give --env ENV_ID too")
        try:
            gap = gap_file_fields(gap_file)
        except ValueError as exc:
            raise KitRefused(str(exc)) from None
    for name, value in (("warmup_steps", warmup_steps), ("critic_updates", critic_updates)):
        if int(value) < 0:
            raise KitRefused(f"{name}={value} must be >= 0")
    parsed = parse_artifact(read_artifact_bytes(artifact), str(artifact))
    # The kit's actor is the base network; a residual head (if any) is part of the parity reference below.
    weights, contract = parsed.base_weights(), parsed.contract
    # One thread by default, as the trainer: on a busy 2-core machine two intra-op threads made the warm-up
    # ~10x slower (4 against 42 updates/s measured here), spinning against the other load.
    torch.set_num_threads(int(threads))
    spec = {"sizes": [weights.input_dim] + [w.shape[0] for w, _ in weights.layers],
            "hidden_activation": weights.hidden_activation, "output_activation": weights.output_activation,
            "masked_layers": [i for i, layer in enumerate(parsed.layers) if layer.storage != "dense"],
            "int8": all(layer.dtype == "int8" for layer in parsed.layers),
            "artifact": str(artifact), "artifact_sha256": parsed.sha256}
    # TrainConfig needs a gymnasium-style id; a kit made from the robot's log has none of its own.
    cfg = TrainConfig(algo=algo, env_id=env_id or (contract.env_id if contract.env_id and "-v" in contract.env_id
                                                   else "robot-v0"),
                      variant="dense", seed=int(seed), hidden=int(hidden), depth=int(depth),
                      batch_size=int(batch_size), explore_noise=float(explore_noise), gamma=float(gamma),
                      lr=1e-3, progress=False)  # lr: the warm-up's (new critics); fine-tuning uses its own
    agent = make_kit_agent(cfg, contract, spec)
    agent.actor.load_layers(weights.layers)
    if getattr(agent, "actor_target", None) is not None:
        agent.actor_target.load_state_dict(agent.actor.state_dict())
    _check_parity(agent.actor, parsed, seed)

    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    if env_id is not None:
        buffer, source = _env_rollouts(agent.actor, contract, env_id, int(warmup_steps), explore_noise, seed, progress,
                                       gap)
    else:
        buffer, source = _log_transitions(contract, Path(transitions))
    before = _td_error(agent, buffer, rng, cfg.gamma)
    bar = _progress(int(critic_updates), progress)
    for k in range(int(critic_updates)):
        agent.update(buffer.sample(cfg.batch_size, rng, 1, cfg.gamma), train_actor=False)
        if bar is not None and (k + 1) % 100 == 0:
            bar.update(k + 1, {"phase": "critic warm-up"})
    if bar is not None:
        if critic_updates % 100:
            bar.update(int(critic_updates), {"phase": "critic warm-up"}, force=True)
        bar.close()
    after = _td_error(agent, buffer, rng, cfg.gamma)
    _check_parity(agent.actor, parsed, seed)  # the warm-up never moves the actor
    report = WarmupReport(source, len(buffer), int(critic_updates), before, after,
                          float(np.mean(buffer.reward[:len(buffer)])), round(time.perf_counter() - started, 1))
    if env_id is not None:  # the simulator's warm-up data is the kit's prior data (RLPD), as a trained kit's replay is
        Path(kit_dir).mkdir(parents=True, exist_ok=True)
        write_prior(kit_dir, buffer.state_dict())  # before kit.json: a kit.json means the kit is whole
    extra = {"actor": spec, "warmup": report.to_dict()}
    if env_id is not None:  # where the prior data came from: the fine-tuner says it (FineTuneKit.prior_source)
        extra["prior"] = {"env": env_id, "gap_file": None if gap_file is None else str(gap_file), "gap": gap}
    return _write(agent, contract, kit_dir, extra), report


def _progress(total: int, enabled: bool):
    if not enabled or total <= 0:
        return None
    from lowrl_ros.core.train.progress import ProgressLine

    return ProgressLine(total)


def _check_parity(actor: ArtifactActor, parsed, seed: int) -> None:
    """The torch actor must compute the artifact's action (the fp32 reference, a residual head included):
    else a kit trains another policy."""
    contract = parsed.contract
    probe = np.random.default_rng(seed + 7).normal(0.0, 1.0, (64, contract.obs_dim))
    probe = probe / np.asarray(contract.obs_scale) + np.asarray(contract.obs_offset)  # spread over the normalised range
    got, want = actor.act(probe), parsed.reference_action(probe)
    err = float(np.max(np.abs(got - want) / (1.0 + np.abs(want))))
    if not err <= 1e-4:
        if parsed.residual is not None:
            raise KitRefused(f"the artifact carries a residual correction head that moves its actions by {err:.2e} "
                             "(relative) from its base network, and a kit fine-tunes one network: make the kit from "
                             "the base artifact, or go on with the residual learner, which keeps the head apart")
        raise KitRefused(f"the torch actor differs from the artifact by {err:.2e} (relative): this network cannot be "
                         "fine-tuned exactly; report it with the artifact")


def _norm_action(contract: PolicyContract, action: np.ndarray) -> np.ndarray:
    low, high = np.asarray(contract.action_low), np.asarray(contract.action_high)
    return np.clip(2.0 * (np.asarray(action, dtype=np.float64) - low) / (high - low) - 1.0, -1.0, 1.0)


def norm_obs(contract: PolicyContract, obs: np.ndarray) -> np.ndarray:
    """The contract's normalised observation: clip((obs - offset) * scale, -obs_clip, obs_clip)."""
    x = (np.asarray(obs, dtype=np.float64) - np.asarray(contract.obs_offset)) * np.asarray(contract.obs_scale)
    return x if contract.obs_clip is None else np.clip(x, -contract.obs_clip, contract.obs_clip)


def check_env_spaces(env, contract: PolicyContract, env_id: str) -> None:
    """KitRefused unless ``env``'s spaces are what the contract reads and writes."""
    import gymnasium as gym

    obs_space, act_space = env.observation_space, env.action_space
    if not isinstance(act_space, gym.spaces.Box) or not isinstance(obs_space, gym.spaces.Box):
        raise KitRefused(f"{env_id}: needs Box observation and action spaces, has {obs_space} / {act_space}")
    if tuple(obs_space.shape) != (contract.obs_dim,) or tuple(act_space.shape) != (contract.action_dim,):
        raise KitRefused(f"{env_id} observes {tuple(obs_space.shape)} and acts {tuple(act_space.shape)} but the "
                         f"artifact reads {contract.obs_dim} observations and writes {contract.action_dim} actions; "
                         "give the environment the policy was trained in")


def _env_rollouts(actor: ArtifactActor, contract: PolicyContract, env_id: str, steps: int, noise: float, seed: int,
                  progress: bool, gap: dict[str, Any] | None = None) -> tuple[ReplayBuffer, str]:
    from lowrl_ros.core.train.trainer import make_env

    if steps < 1:
        raise KitRefused("--warmup-steps must be >= 1 with --env: the critics need transitions to learn from")
    try:
        env = make_env(env_id) if gap is None else make_gapped_env(env_id, RealityGapConfig(**gap))
    except ValueError as exc:
        raise KitRefused(str(exc)) from None
    try:
        check_env_spaces(env, contract, env_id)
        buffer = ReplayBuffer(contract.obs_dim, contract.action_dim, steps)
        low, high = np.asarray(contract.action_low), np.asarray(contract.action_high)
        rng = np.random.default_rng(seed + 1)
        obs, _ = env.reset(seed=seed)
        bar = _progress(steps, progress)
        for step in range(steps):
            behaviour = _norm_action(contract, actor.act(obs))
            a = np.clip(behaviour + noise * rng.standard_normal(behaviour.shape), -1.0, 1.0)
            robot = low + (a + 1.0) * (high - low) / 2.0
            nxt, r, term, trunc, _ = env.step(robot.astype(env.action_space.dtype))
            # In simulation the truncated step's next observation is the true one: bootstrap through it.
            buffer.add(norm_obs(contract, obs), a, float(r), norm_obs(contract, nxt), bool(term), False, behaviour)
            obs = nxt
            if term or trunc:
                obs, _ = env.reset()
            if bar is not None and (step + 1) % 200 == 0:
                bar.update(step + 1, {"phase": f"rollouts in {env_id}"})
        if bar is not None:
            bar.close()
    finally:
        env.close()
    return buffer, f"env {env_id}"


def _log_transitions(contract: PolicyContract, log_dir: Path) -> tuple[ReplayBuffer, str]:
    from lowrl_ros.core.finetune.transition_log import read_log

    if not log_dir.is_dir():
        raise KitRefused(f"--transitions {log_dir}: no such directory; give the fine-tuner's work_dir/transitions")
    batch, _ = read_log(log_dir)
    if len(batch) == 0:
        raise KitRefused(f"--transitions {log_dir}: no transitions in it; record some on the robot first, "
                         "or give --env")
    if batch.obs.shape[1] != contract.obs_dim or batch.action.shape[1] != contract.action_dim:
        raise KitRefused(f"--transitions {log_dir}: transitions of {batch.obs.shape[1]} observations and "
                         f"{batch.action.shape[1]} actions, but the artifact reads {contract.obs_dim} and writes "
                         f"{contract.action_dim}; give the log recorded with this policy")
    buffer = ReplayBuffer(contract.obs_dim, contract.action_dim, len(batch))
    for i in range(len(batch)):
        # A robot's truncated step carries the next episode's first observation: not trained on (as FineTuner).
        if batch.truncated[i] and not batch.terminated[i]:
            continue
        row = (batch.obs[i], batch.action[i], batch.next_obs[i])
        if not (all(np.all(np.isfinite(v)) for v in row) and math.isfinite(float(batch.reward[i]))):
            continue
        a = _norm_action(contract, batch.action[i])
        buffer.add(norm_obs(contract, batch.obs[i]), a, float(batch.reward[i]), norm_obs(contract, batch.next_obs[i]),
                   bool(batch.terminated[i]), False, a)
    if len(buffer) == 0:
        raise KitRefused(f"--transitions {log_dir}: none of its {len(batch)} transitions can be trained on (all "
                         "truncated or non-finite)")
    return buffer, f"transitions {log_dir} ({len(buffer)} of {len(batch)} usable)"


@torch.no_grad()
def _td_error(agent: OffPolicyAgent, buffer: ReplayBuffer, rng: np.random.Generator, gamma: float) -> float:
    """RMS TD error of the critics on a sample, with the deterministic target action (a diagnostic)."""
    obs, act, rew, next_obs, disc = to_tensors(buffer.sample(min(1024, 4 * len(buffer)), rng, 1, gamma))
    target_actor = getattr(agent, "actor_target", None) or agent.actor
    y = rew + disc * agent.critic_target(next_obs, target_actor.deterministic(next_obs)).min(0).values
    return float((agent.critic(obs, act) - y).square().mean().sqrt())


def remove_partial_kit(kit_dir: Path, existed: bool) -> None:
    """Leave nothing half-written behind a refused `lowrl kit` (only a directory it created)."""
    if not existed and kit_dir.exists():
        shutil.rmtree(kit_dir, ignore_errors=True)
