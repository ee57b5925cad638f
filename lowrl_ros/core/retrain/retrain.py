"""Continue a deployed policy with PPO in the identified simulator and release it as the robot's int8 artifact.

Issue 27 (items 3 and 4): the robot's transitions identified a reality gap (a gap file); this module retrains the
policy the robot runs in the robot's own simulator with that gap, randomized around it, and gives back the next
version of the robot's artifact, or nothing and the reason.

1. The actor starts as the deployed policy exactly (core/train/ppo.py ``ArtifactActor``: the artifact's contract
   normalisation, its MLP and activations from the stored fp32 or dequantised int8 weights, its action transform),
   so iteration 0 acts as the robot does. The critic is the policy's own from its training checkpoint when one is
   given (``source_checkpoint``: core/retrain/source.py, with the exploration std the training ended at), else
   fresh; it first learns alone, ``warmup_iterations`` rollouts of the frozen actor, because a fresh critic's
   advantages would walk a good actor away (and a trained one must first take the new simulator's returns in).
2. ``n_envs`` environments (RobotSimEnv with the robot file's reward and episode ends) run in ``workers`` local
   processes or, with ``ray_address``, as Ray actors on that cluster (core/retrain/pool.py); each episode draws its
   gap around the identified one, ``spread`` of each gap_priors range. A policy of the ``raw`` last_action
   convention (rsl_rl, Isaac Lab) reads its own unclipped output back, as on the robot: fed the clipped action
   instead, a policy whose outputs lie past the clip walks differently (the shipped quadruped's: 1,107 for 1,617).
3. At the end the trained actor is written as an int8 artifact (same contract and robot, version ``version``, the
   deployed one its parent) through the release gates of `lowrl compress` (core/compress/release.py): fp32 ONNX
   vs torch parity, int8 vs fp32 action error, and a return gate: the int8 artifact, as the robot's numpy engine
   runs it, keeps ``return_fraction`` of the deployed artifact's return in the identified simulator over the
   same seeded episodes. Only then is it written, atomically, at ``out_path``.

Every ``eval_every`` steps the current actor, quantized to int8 as it would be released, runs seeded deterministic
episodes in the identified simulator (apart from the return gate's); the best one so far is what is released.
Rollout rewards cannot tell a collapse: under a wide randomization one rollout's drawn gaps can halve its reward
with the actor frozen. A stop request, a NaN, an evaluation below the deployed actor's by ``collapse_fraction``,
a dead worker or a failed gate
gives ``ok=False`` with the reason, and nothing at ``out_path``. Off-board only (torch): never imported by the
policy node or core/runtime.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import os
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from lowrl_ros.core.compress.release import GateResult, gate_int8, gate_parity
from lowrl_ros.core.config import field as config_field, require
from lowrl_ros.core.finetune.sim_env import make_robot_env
from lowrl_ros.core.retrain.pool import EnvPool, WorkerDied
from lowrl_ros.core.retrain.source import SourceRefused, load_source_critic
from lowrl_ros.core.runtime.artifact import (ArtifactError, last_action_convention, parse_artifact,
                                             raw_from_action, read_artifact_bytes, save_artifact)
from lowrl_ros.core.runtime.robot_file import load_robot_file
from lowrl_ros.core.sim.evaluate import kept_fraction
from lowrl_ros.core.sim.robot_sim import Gap, parse_sim

EVAL_SEED = 20_000  # the seeded evaluation episodes, apart from the training episodes' seed streams
SELECT_SEED = 30_000  # the seeded episodes of the evaluations during training (best actor, divergence)
HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass(frozen=True)
class RetrainSettings:
    """How to retrain; each field is also a `lowrl retrain` flag."""

    total_steps: int = config_field(200_000, "environment steps in all, critic warm-up included", range=(1, 10**9))
    n_envs: int = config_field(32, "simulated robots stepped in parallel (many per worker: each call to a worker and "
                                   "each policy call then serves more steps)", range=(1, 4096))
    workers: int = config_field(2, "worker processes (or Ray actors) the environments are split over", range=(1, 512))
    ray_address: str = config_field("", "Ray cluster: '' local processes, 'local' a new local Ray, 'auto' the "
                                        "running cluster, 'ray://HOST:10001' a remote one")
    seed: int = config_field(0, "seed of the actor's noise, the minibatches and every env's episodes")
    lr: float = config_field(3e-4, "actor learning rate (Adam)", range=(0.0, 1.0))
    critic_lr: float = config_field(1e-3, "critic learning rate (Adam)", range=(0.0, 1.0))
    n_steps: int = config_field(64, "steps per env per rollout", range=(1, 100_000))
    epochs: int = config_field(5, "PPO epochs per rollout", range=(1, 100))
    minibatches: int = config_field(4, "minibatches per epoch", range=(1, 1024))
    clip: float = config_field(0.2, "PPO ratio clip", range=(0.0, 1.0))
    ent_coef: float = config_field(0.0, "entropy bonus weight", range=(0.0, 1.0))
    init_std: float = config_field(0.1, "initial exploration std, as a share of the half action range",
                                   range=(0.0, 1.0))
    gamma: float = config_field(0.99, "discount", range=(0.0, 1.0))
    gae_lambda: float = config_field(0.95, "GAE lambda", range=(0.0, 1.0))
    critic_hidden: int = config_field(256, "the fresh critic's width (2 hidden layers, LayerNorm)", range=(8, 4096))
    source_checkpoint: str = config_field("", "the training checkpoint the deployed policy came from (an SB3 PPO "
                                              ".zip, an rsl_rl model_*.pt): its trained critic and exploration std "
                                              "start the retraining (init_std is then unused); '' a fresh critic")
    warmup_iterations: int = config_field(5, "value-only iterations on the frozen actor's rollouts before the "
                                             "actor moves", range=(0, 10_000))
    spread: float = config_field(0.1, "randomization around the identified gap: per episode each gap_priors "
                                      "parameter is drawn within +- spread * (prior range) / 2 of its identified "
                                      "value (a per-parameter spread overrides it)", range=(0.0, 1.0))
    latency_extra: int = config_field(0, "physics steps of actuation delay the robot may add to the gap's latency: "
                                         "each training and evaluation episode adds 0..latency_extra of them (over "
                                         "ROS 2 the phase of the policy's ticks against the robot's loop adds one "
                                         "or not)", range=(0, 100))
    recorded_command_share: float = config_field(0.0, "share of the training and evaluation episodes whose velocity "
                                                      "command is one the robot was given in the recording (drawn as "
                                                      "often as it was given); the rest from the robot file's "
                                                      "ranges; 0: the ranges only (the in-session retraining: "
                                                      "lowrl retrain has no recording)", range=(0.0, 1.0))
    episode_steps: int = config_field(500, "truncate training and evaluation episodes after this many steps "
                                           "(0: the robot file's episode end only)", range=(0, 10**7))
    eval_episodes: int = config_field(4, "seeded deterministic episodes of the return gate", range=(1, 1000))
    return_fraction: float = config_field(0.95, "the int8 artifact must keep this share of the deployed artifact's "
                                                "return in the identified sim (1 - (B - A)/|B|)", range=(0.0, 1.5))
    collapse_fraction: float = config_field(0.5, "stop as diverged when an evaluation's return falls this share of "
                                                 "|the deployed actor's| below it", range=(0.0, 10.0))
    eval_every: int = config_field(50_000, "steps between evaluations of the current actor (int8 as deployed, "
                                           "deterministic, the identified gap, eval_episodes seeded episodes apart "
                                           "from the return gate's): the best one is released, and one below the "
                                           "deployed actor's by collapse_fraction ends the run as diverged; 0: only "
                                           "at the end", range=(0, 10**9))
    parity_tol: float = config_field(1e-4, "max |torch - fp32 ONNX| action error", range=(0.0, 1.0))
    int8_mean_error: float = config_field(0.02, "mean |int8 - fp32| action error, share of the action range",
                                          range=(0.0, 1.0))
    int8_max_error: float = config_field(0.10, "worst |int8 - fp32| action error, share of the action range",
                                         range=(0.0, 1.0))
    budget_s: float = config_field(0.0, "wall-clock budget of the training, s: past it training ends and the "
                                        "actor goes through the gates (0: none)", range=(0.0, 1e7))
    worker_timeout_s: float = config_field(120.0, "a worker that does not answer a call within this is dead",
                                           range=(1.0, 1e5))

    def __post_init__(self) -> None:
        def positive_int(name: str) -> None:
            v = getattr(self, name)
            require(isinstance(v, int) and not isinstance(v, bool) and v >= 1, f"{name}={v!r} must be an integer >= 1")

        for name in ("total_steps", "n_envs", "workers", "n_steps", "epochs", "minibatches", "eval_episodes",
                     "critic_hidden"):
            positive_int(name)
        for name in ("warmup_iterations", "episode_steps", "eval_every", "latency_extra"):
            v = getattr(self, name)
            require(isinstance(v, int) and not isinstance(v, bool) and v >= 0, f"{name}={v!r} must be an integer >= 0")
        require(self.workers <= self.n_envs, f"workers={self.workers} exceeds n_envs={self.n_envs}: a worker steps at "
                                             "least one environment; lower workers or raise n_envs")
        require(self.n_envs * self.n_steps >= self.minibatches,
                f"minibatches={self.minibatches} exceeds the rollout's n_envs * n_steps = {self.n_envs * self.n_steps} "
                "samples; lower minibatches")
        for name, lo, hi, closed in (("lr", 0, 1, True), ("critic_lr", 0, 1, True), ("clip", 0, 1, True),
                                     ("init_std", 0, 1, True), ("gamma", 0, 1, True), ("gae_lambda", 0, 1, True),
                                     ("return_fraction", 0, 1.5, True), ("collapse_fraction", 0, 10, True),
                                     ("parity_tol", 0, 1, True), ("int8_mean_error", 0, 1, True),
                                     ("int8_max_error", 0, 1, True), ("worker_timeout_s", 0, 1e5, True)):
            v = getattr(self, name)
            require(isinstance(v, (int, float)) and math.isfinite(v) and lo < v <= hi,
                    f"{name}={v!r} must be in ({lo}, {hi}]")
        for name in ("ent_coef", "spread", "budget_s"):
            v = getattr(self, name)
            require(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0, f"{name}={v!r} must be >= 0")
        require(self.spread <= 1.0, f"spread={self.spread} must be <= 1 (a share of the prior range)")
        require(self.int8_mean_error <= self.int8_max_error,
                f"int8_mean_error={self.int8_mean_error} exceeds int8_max_error={self.int8_max_error}; lower it")
        require(isinstance(self.ray_address, str), f"ray_address={self.ray_address!r} must be a string")


@dataclass
class RetrainResult:
    """What a retraining run gave.

    Attributes:
        ok: the artifact was released at ``path``.
        reason: why not (empty when ok); names the gate, the worker or the divergence.
        path: the released artifact, or None.
        sim_return_before: the deployed artifact's mean return in the identified sim (seeded episodes).
        sim_return_after: the released candidate's (int8), None when the run never got that far.
        steps: environment steps trained.
        wall_s: seconds from start to result.
        gates: the release gates' results (core/compress/release.py GateResult), in order.
        stopped: should_stop() ended the run.
        history: one progress dict per iteration.
    """

    ok: bool
    reason: str
    path: Path | None
    sim_return_before: float | None
    sim_return_after: float | None
    steps: int
    wall_s: float
    gates: list[GateResult] = field(default_factory=list)
    stopped: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)


class RetrainRefused(ValueError):
    """The inputs cannot be retrained together; the message names what disagrees."""


def _spread_per_key(priors: Mapping[str, tuple[float, float]], spread: Mapping[str, float],
                    default: float) -> dict[str, float]:
    unknown = [k for k in spread if k not in priors]
    if unknown:
        raise RetrainRefused(f"spread names {', '.join(unknown)}, which the robot file's sim.gap_priors has no range "
                             f"for; ranged parameters: {', '.join(priors) or '(none)'}")
    bad = [k for k, v in spread.items() if not (isinstance(v, (int, float)) and 0 <= v <= 1)]
    if bad:
        raise RetrainRefused(f"spread.{bad[0]}={spread[bad[0]]!r} must be a share of the prior range in [0, 1]")
    return {k: float(spread.get(k, default)) for k in priors}


def retrain(base_artifact: str | Path, robot_file: str | Path, gap: Gap, spread: Mapping[str, float],
            settings: RetrainSettings, out_path: str | Path, version: int,
            progress: Callable[[dict], None] | None = None,
            should_stop: Callable[[], bool] | None = None, commands: np.ndarray | None = None) -> RetrainResult:
    """Retrain ``base_artifact`` with PPO in ``robot_file``'s simulator around ``gap``; release version ``version``.

    Args:
        base_artifact: the deployed artifact (any lowrl artifact without a residual head: trained here, or
            imported from rsl_rl, Isaac Lab, SB3 PPO, ONNX).
        robot_file: the robot file, with a ``sim:`` section (and its gap_priors).
        gap: the identified gap (core/sim/robot_sim.py ``load_gap_file``).
        spread: per gap_priors parameter, the share of its prior range drawn around ``gap`` each episode
            (overrides ``settings.spread`` for that parameter).
        settings: see :class:`RetrainSettings`.
        out_path: where the released int8 artifact goes (atomically; untouched unless every gate passes).
        version: the released artifact's version, above the deployed one's (which becomes its parent).
        progress: called once per iteration and per release stage with {"stage": "warmup"|"ppo"|"best"|
            "quantize"|"gates", "steps", "total_steps", "sim_return" (mean return of recent training episodes, None
            before one ended), "eta_s", "eval_return" (the last evaluation's), "best_return" and "best_steps" (the
            best evaluated actor, the one released), "base_return" (the deployed actor's on the same episodes),
            "beyond_reach" (the last rollout's share of action entries whose mean lies more than 2 std past the
            clip: how saturated the policy is; None before the first rollout)}.
        should_stop: polled once per iteration; True ends the run with ok=False, stopped=True.
        commands: the velocity commands the robot was given (rows vx, vy, yaw rate; robot_recording.
            recorded_commands): ``settings.recorded_command_share`` of the episodes draw theirs from them.

    Raises:
        RetrainRefused, ArtifactError, SimConfigError, ValueError: inputs that cannot work together (before any
            environment starts); everything later is a result with ok=False.
    """
    import torch

    from lowrl_ros.core.train.ppo import ArtifactActor, Critic, ReturnScaler, gae, next_values, ppo_update

    t0 = time.perf_counter()
    s = settings
    out_path = Path(out_path)
    base_bytes = read_artifact_bytes(base_artifact)
    parsed = parse_artifact(base_bytes, str(base_artifact))
    contract = parsed.contract
    if parsed.residual is not None:
        raise RetrainRefused(f"{base_artifact}: carries a residual correction head; retrain its base artifact (the "
                             "head would be dropped)")
    if isinstance(version, bool) or not isinstance(version, int) or version <= contract.version:
        raise RetrainRefused(f"version={version!r} must be an integer above the deployed artifact's version "
                             f"{contract.version} (versions only go up): give {contract.version + 1}")
    if s.recorded_command_share > 0 and commands is None:
        raise RetrainRefused(f"recorded_command_share {s.recorded_command_share:g} needs the commands the robot was "
                             "given (the trainer node's retraining takes them from its recording): give commands= "
                             "or set it to 0")
    robot = load_robot_file(robot_file)
    sim_cfg, _ = parse_sim(robot)
    spreads = _spread_per_key(sim_cfg.gap_priors, spread, s.spread)
    probe_env = make_robot_env(robot, gap=gap)  # checks the gap against the model; gives the sizes and names
    names = probe_env.spec_obs.entry_names()
    if (contract.obs_dim, contract.action_dim) != (len(names), probe_env.action_space.shape[0]):
        raise RetrainRefused(f"{base_artifact} maps {contract.obs_dim} observations -> {contract.action_dim} actions "
                             f"but {robot_file} builds {len(names)} -> {probe_env.action_space.shape[0]}; retrain the "
                             "policy of this robot file")
    try:  # the policy node's own rule: each entry from the term the policy names for it
        probe_env.spec_obs.check_against(contract)
    except ValueError as exc:
        raise RetrainRefused(f"{base_artifact} does not read {robot_file}'s observation: {exc}") from exc
    env_low = np.maximum(contract.action_low, probe_env.action_space.low)
    env_high = np.minimum(contract.action_high, probe_env.action_space.high)
    last_action = last_action_convention(contract)

    # One thread: the updates are small, the environments own the other cores, and a second intra-op thread
    # on a busy machine costs more than it gives (restored for the caller at the end).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(s.seed)
    gen = torch.Generator().manual_seed(s.seed)
    base_weights = parsed.base_weights()
    source = None
    if s.source_checkpoint:
        try:
            source = load_source_critic(s.source_checkpoint, contract, base_weights.output_activation)
        except SourceRefused as exc:
            raise RetrainRefused(str(exc)) from None
    init_std = source.action_std if source is not None else s.init_std * (env_high - env_low) / 2.0
    actor = ArtifactActor(base_weights, contract, init_std)
    critic = (Critic.fresh(actor, s.critic_hidden) if source is None
              else Critic.from_weights(source.weights, source.norm_a, source.norm_b, source.norm_clip))
    actor_opt = torch.optim.Adam(actor.parameters(), lr=s.lr)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=s.critic_lr)

    ids = np.array_split(np.arange(s.n_envs), s.workers)
    groups = [dict(robot_file=str(Path(robot.path).resolve()), gap=gap.as_dict(), priors=dict(sim_cfg.gap_priors),
                   spread=spreads, env_ids=[int(i) for i in part], seed=s.seed, episode_steps=s.episode_steps,
                   last_action=last_action, command_share=s.recorded_command_share, latency_extra=s.latency_extra,
                   commands=None if commands is None else np.asarray(commands, dtype=np.float64).tolist())
              for part in ids]
    sizes = [len(part) for part in ids]
    eval_seeds = [list(map(int, part)) for part in np.array_split(EVAL_SEED + np.arange(s.eval_episodes), s.workers)]
    history: list[dict[str, Any]] = []
    recent: deque[float] = deque(maxlen=max(2 * s.n_envs, 10))
    steps = 0
    before = after = None

    def report(stage: str) -> None:
        elapsed = time.perf_counter() - t0
        eta = elapsed / steps * (s.total_steps - steps) if steps and stage in ("warmup", "ppo") else 0.0
        if s.budget_s and stage in ("warmup", "ppo"):
            eta = min(eta, max(s.budget_s - elapsed, 0.0))  # the budget ends it first
        info = {"stage": stage, "steps": steps, "total_steps": s.total_steps,
                "sim_return": float(np.mean(recent)) if recent else None, "eta_s": eta,
                "eval_return": best["last"], "best_return": best["return"] if best["state"] is not None else None,
                "best_steps": best["steps"], "base_return": best["base"], "beyond_reach": reach["share"]}
        history.append(info)
        if progress is not None:
            progress(dict(info))

    def result(ok: bool, reason: str, path: Path | None = None, gates: list | None = None,
               stopped: bool = False) -> RetrainResult:
        return RetrainResult(ok, reason, path, before, after, steps, time.perf_counter() - t0, gates or [], stopped,
                             history)

    select_seeds = [list(map(int, part))
                    for part in np.array_split(SELECT_SEED + np.arange(s.eval_episodes), s.workers)]

    def evaluate(artifact: bytes, seeds: list[list[int]] = eval_seeds) -> float:
        """Mean deterministic return over ``seeds`` (per worker): the return gate's episodes, or select_seeds."""
        got = pool.call("evaluate", [(artifact, part, s.episode_steps) for part in seeds])
        return float(np.mean([r for part in got for r in part]))

    # the evaluations during training: the deployed actor's return ("base"), the last one, the best actor so far
    best: dict[str, Any] = {"base": None, "last": None, "return": -math.inf, "state": None, "steps": 0}
    # The last rollout's share of action entries whose mean lies beyond the clip by more than 2 std (the clipped
    # action is the same for 98 % of their draws): how saturated the policy is. The shipped quadruped's is 0.9,
    # and PPO still moves it where its outputs cross the clip.
    reach: dict[str, Any] = {"share": None}

    def as_int8(w) -> bytes:
        with tempfile.TemporaryDirectory(prefix="lowrl-retrain-eval-") as tmp:
            return save_artifact(Path(tmp) / "int8.onnx", w, contract, int8=True).read_bytes()

    def checkpoint(at: int) -> None:
        best["last"] = evaluate(as_int8(actor.weights()), select_seeds)
        if best["last"] > best["return"]:
            best.update({"return": best["last"], "state": copy.deepcopy(actor.state_dict()), "steps": at})

    pool = None
    try:
        try:
            pool = EnvPool(groups, s.ray_address, s.worker_timeout_s)
            before = evaluate(base_bytes)
            if s.eval_every:
                best["base"] = evaluate(base_bytes, select_seeds)
            obs = np.concatenate(pool.call("reset", [()] * s.workers))
        except WorkerDied as exc:
            return result(False, f"the environments did not start: {exc}")
        scaler = ReturnScaler(s.n_envs, s.gamma)
        iteration = 0
        stopped, diverged, reason = False, False, ""
        last_eval = 0
        last_obs = obs
        while steps < s.total_steps:
            warm = iteration < s.warmup_iterations
            T = s.n_steps
            buf = {k: np.zeros((T, s.n_envs) + shape, np.float32)
                   for k, shape in (("obs", (contract.obs_dim,)), ("act", (contract.action_dim,)), ("logp", ()),
                                    ("rew", ()), ("done", ()), ("val", ()))}
            raw_rewards = np.zeros((T, s.n_envs))
            truncated, v_final = np.zeros((T, s.n_envs), bool), np.zeros((T, s.n_envs), np.float32)
            beyond = 0
            try:
                for t in range(T):
                    with torch.no_grad():  # a ~ N(mean, std), its log-density, V(obs): as actor.dist, fewer ops
                        o = torch.from_numpy(obs.astype(np.float32))
                        noise = torch.randn(s.n_envs, contract.action_dim)
                        mean, std = actor.mean(o).numpy(), actor.log_std.exp().numpy()
                        beyond += int(((mean - 2 * std > env_high) | (mean + 2 * std < env_low)).sum())
                        a = mean + std * noise.numpy()
                        logp = (-0.5 * noise.square() - actor.log_std - HALF_LOG_2PI).sum(-1).numpy()
                        buf["val"][t] = critic(o).numpy()
                    sent = np.clip(a, env_low, env_high)
                    cut = np.cumsum(sizes)[:-1]  # the unclipped draw's network output goes back as on the robot
                    raws = np.split(raw_from_action(contract, base_weights.output_activation, a), cut)
                    got = pool.call("step", list(zip(np.split(sent, cut), raws)))
                    nxt = np.concatenate([g[0] for g in got])
                    rew = np.concatenate([g[1] for g in got])
                    term = np.concatenate([g[2] for g in got])
                    trunc = np.concatenate([g[3] for g in got])
                    final = np.concatenate([g[4] for g in got])
                    for g in got:
                        recent.extend(g[5])
                    done = term | trunc
                    buf["obs"][t], buf["act"][t], buf["logp"][t] = obs, a, logp
                    buf["rew"][t] = scaler(rew, done)
                    buf["done"][t], truncated[t] = done, trunc
                    if trunc.any():  # a time limit: bootstrap from the episode's final observation
                        with torch.no_grad():
                            v_final[t, trunc] = critic(torch.from_numpy(final[trunc].astype(np.float32))).numpy()
                    raw_rewards[t] = rew
                    obs = nxt
                    steps += s.n_envs
            except WorkerDied as exc:
                return result(False, f"an env worker died mid-rollout at step {steps}: {exc}")
            reach["share"] = beyond / (T * s.n_envs * contract.action_dim)
            with torch.no_grad():
                v_last = critic(torch.from_numpy(obs.astype(np.float32))).numpy()
            buf["next_val"] = next_values(buf["val"], v_last, v_final, buf["done"] > 0, truncated)
            last_obs = buf["obs"].reshape(-1, contract.obs_dim)
            adv, ret = gae(buf["rew"], buf["val"], buf["next_val"], buf["done"], s.gamma, s.gae_lambda)
            batch = {"obs": torch.from_numpy(last_obs),
                     "act": torch.from_numpy(buf["act"].reshape(-1, contract.action_dim)),
                     "logp": torch.from_numpy(buf["logp"].reshape(-1)),
                     "adv": torch.from_numpy(adv.reshape(-1).astype(np.float32)),
                     "ret": torch.from_numpy(ret.reshape(-1).astype(np.float32))}
            stats = ppo_update(actor, critic, None if warm else actor_opt, critic_opt, batch, epochs=s.epochs,
                               minibatches=s.minibatches, clip=s.clip, ent_coef=s.ent_coef, generator=gen)
            mean_reward = float(raw_rewards.mean())
            iteration += 1
            if not stats.finite or not math.isfinite(mean_reward):
                report("warmup" if warm else "ppo")
                what = ("the simulator's observations or rewards" if not (np.isfinite(buf["obs"]).all()
                                                                      and np.isfinite(raw_rewards).all())
                        else f"value loss {stats.value_loss:.3g}, policy loss {stats.policy_loss:.3g}, the actor "
                             f"{'finite' if actor.finite() else 'not finite'}")
                reason = (f"diverged at step {steps} ({'warm-up' if warm else 'PPO'} iteration {iteration}): NaN "
                          f"or Inf ({what}); lower --lr or --clip")
                if best["state"] is None:
                    return result(False, reason)
                diverged = True  # the best evaluated actor so far (int8, before this) goes through the gates
                reason += f"; the best actor evaluated before it (at step {best['steps']}) goes to the gates"
                break
            if not warm and s.eval_every and steps - last_eval >= s.eval_every:
                last_eval = steps
                try:
                    checkpoint(steps)
                    obs = np.concatenate(pool.call("reset", [()] * s.workers))  # env 0 ran the evaluation
                except WorkerDied as exc:
                    return result(False, f"an env worker died in an evaluation at step {steps}: {exc}")
                scaler.ret[:] = 0.0
                if best["last"] < best["base"] - s.collapse_fraction * abs(best["base"]):
                    report("ppo")
                    return result(False, f"diverged at step {steps}: the actor's evaluation return {best['last']:.4g} "
                                         f"fell below the deployed actor's {best['base']:.4g} by more than "
                                         f"collapse_fraction {s.collapse_fraction:g} of it; lower --lr or --init-std")
            report("warmup" if warm else "ppo")
            if should_stop is not None and should_stop():
                stopped, reason = True, f"stopped on request at step {steps} of {s.total_steps}; nothing written"
                break
            if s.budget_s and time.perf_counter() - t0 >= s.budget_s:
                reason = f"the wall-clock budget of {s.budget_s:g} s ended training at step {steps}"
                break
        if stopped:
            return result(False, reason, stopped=True)
        if s.eval_every:
            if steps > last_eval and not diverged:
                try:
                    checkpoint(steps)
                except WorkerDied as exc:
                    return result(False, f"an env worker died in an evaluation at step {steps}: {exc}")
            actor.load_state_dict(best["state"])
            report("best")

        # ---- release: the trained actor as the robot's int8 artifact, through the gates ----------------------
        report("quantize")
        prov = {**contract.provenance, "tool": "lowrl retrain (PPO in the identified simulator)",
                "retrain.robot_file": str(robot_file), "retrain.steps": str(steps), "retrain.seed": str(s.seed),
                "retrain.released_steps": str(best["steps"] if s.eval_every else steps),
                "retrain.gap": ", ".join(f"{k}={v}" for k, v in gap.as_dict().items()), "int8": "true"}
        new_contract = dataclasses.replace(contract, version=version, parent_version=contract.version,
                                           provenance=prov)
        weights = actor.weights()
        rng = np.random.default_rng(s.seed)
        seen = last_obs[np.isfinite(last_obs).all(axis=1)]  # a diverged simulator's rows are no probes
        probes = seen[rng.choice(len(seen), size=min(512, len(seen)), replace=False)].astype(np.float64)

        def torch_act(o: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                m = actor.mean(torch.from_numpy(np.asarray(o, np.float32))).numpy().astype(np.float64)
            return np.clip(m, contract.action_low, contract.action_high)

        with tempfile.TemporaryDirectory(prefix="lowrl-retrain-") as tmp:
            fp32 = save_artifact(Path(tmp) / "fp32.onnx", weights, new_contract)
            int8 = save_artifact(Path(tmp) / "int8.onnx", weights, new_contract, int8=True)
            gates = [gate_parity("full", torch_act, fp32, probes, s.parity_tol),
                     gate_int8("full", fp32, int8, probes, s.int8_max_error, new_contract, s.int8_mean_error)]
            gates[0].fix = "the fp32 artifact does not compute what the trained torch actor does: report it"
            gates[1].fix = ("int8 loses too much of the retrained actor: retrain with a lower --lr, or accept more "
                            "error (--int8-max-error, --int8-mean-error)")
            report("gates")
            int8_bytes = int8.read_bytes()
            if all(g.passed for g in gates):
                try:
                    after = evaluate(int8_bytes)
                except WorkerDied as exc:
                    return result(False, f"an env worker died in the return gate: {exc}", gates=gates)
                kept = kept_fraction(after, before)
                gates.append(GateResult(
                    "return in the identified sim vs the deployed artifact", "full", kept >= s.return_fraction, kept,
                    s.return_fraction, f"int8 retrained {after:.2f} vs deployed {before:.2f} over {s.eval_episodes} "
                                       f"seeded episodes: keeps {kept:.1%} (needs {s.return_fraction:.0%})",
                    "train longer (--steps), with more warm-up (--warmup-iterations) or a lower --lr"))
            failed = [g for g in gates if not g.passed]
            if failed:
                return result(False, f"gate failed: {failed[0].gate}: {failed[0].detail}", gates=gates)
            out_path.parent.mkdir(parents=True, exist_ok=True)
            tmp_out = out_path.with_name(out_path.name + ".tmp")
            tmp_out.write_bytes(int8_bytes)
            os.replace(tmp_out, out_path)  # a watching policy node never sees a half-written file
        return result(True, reason, out_path, gates)
    except ArtifactError as exc:
        return result(False, f"the retrained artifact is invalid: {exc}")
    finally:
        torch.set_num_threads(threads)
        if pool is not None:
            pool.close()
