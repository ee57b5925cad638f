"""ActorQ: actors collect with int8 snapshots of the policy while an fp32 learner trains.

After Krishnan et al., "QuaRL: Quantization for Fast and Environmentally Sustainable RL" (TMLR
2022; reference/actorq.md), re-implemented on this project's parts:

- the learner is the trainer's own agent (``SACAgent``/``TD3Agent``) and ``ReplayBuffer``; the
  trainer's loop (``Trainer.run``) steps its own environment and cannot take transitions from
  elsewhere, so this module has its own learner loop around those classes (no algorithm is
  duplicated);
- every ``refresh_every`` received env steps the learner publishes a *version*: its actor exported
  with ``lowrl_ros.core.train.export.actor_weights`` and saved with ``save_artifact(int8=True)``
  (fp32 actors: ``int8=False``), i.e. per-channel int8 weights with dynamic activation
  quantization — the same artifact a robot receives. The artifact's bytes go to each actor
  process; their size is the "bytes per broadcast";
- actors (``actorq_worker.py``, separate processes, "spawn", no torch) run the snapshot through
  ``load_artifact`` and tag every transition with the snapshot's version;
- fixes for the reference's pitfalls: versions are checked on receipt (``VersionGate``: a chunk
  holding a version the learner never published, or one more than ``max_version_lag`` versions
  old, is rejected whole and counted); every published snapshot is compared with the learner's
  fp32 policy on replay states (parity against ``snapshot_tolerance``, error recorded per version);
  and returns are measured on the deployed snapshot (the artifact, through the runtime), never on
  the fp32 learner.

Data rate: the learner keeps ``updates_per_step`` gradient steps per accepted env step (after the
warm-up), like the trainer; when it falls behind it stops draining the bounded transition queue,
so actors block (backpressure) instead of producing data that would arrive stale.
"""
from __future__ import annotations

import functools
import math
import multiprocessing as mp
import queue
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from lowrl_ros.core.config import field as config_field, require

ALGOS = ("td3", "sac")
ENGINES = ("ort", "numpy", "auto")


@dataclass(frozen=True)
class ActorQConfig:
    """One ActorQ run (the `lowrl bench actorq` flags mirror these fields)."""

    env_id: str = config_field("Pendulum-v1", "gymnasium environment id")
    # td3: the deterministic actor, so the snapshot is exactly the policy; sac: the snapshot is tanh of the mean.
    algo: str = config_field("td3", "learner algorithm: td3 or sac")
    int8: bool = config_field(True, "actors run int8 snapshots (false: fp32 ones, the baseline)")
    hidden: int = config_field(256, "actor hidden width")
    depth: int = config_field(2, "hidden layers of actor and critics")
    # Lets a wide actor, whose inference cost is what ActorQ is about, train with a cheaper critic.
    critic_hidden: int = config_field(0, "critic width (0: same as hidden)")
    num_actors: int = config_field(2, "actor processes")
    total_steps: int = config_field(10_000, "env steps to collect (accepted transitions)")
    warmup_steps: int = config_field(1_000, "uniform-random env steps (split among the actors) before learning starts")
    batch_size: int = config_field(256, "learner minibatch size (see TrainConfig)")
    updates_per_step: int = config_field(1, "learner gradient steps per env step (see TrainConfig)")
    lr: float = config_field(1e-3, "learner Adam learning rate (see TrainConfig)")
    # Actors pick up the newest version at their next chunk boundary.
    refresh_every: int = config_field(200, "publish a new version every this many accepted env steps (K)")
    chunk_steps: int = config_field(25, "transitions per message from an actor")
    max_version_lag: int = config_field(4, "reject chunks holding a version older than published - this")
    explore_noise: float = config_field(0.1, "Gaussian exploration noise of the actors, normalised action units")
    engine: str = config_field("ort", "runtime engine of the actors and of evaluation (ort: ORT's int8 kernels)")
    eval_interval: int = config_field(1_000, "accepted env steps between evaluations of the deployed snapshot")
    eval_episodes: int = config_field(5, "episodes per evaluation")
    target_return: float = config_field(math.nan, "stop once an evaluation reaches this mean return (nan: never)")
    time_limit_s: float = config_field(0.0, "stop after this much wall-clock (0: no limit)")
    # The int8 quantization budget: publishes above it are counted and warned.
    snapshot_tolerance: float = config_field(0.05, "max |snapshot - fp32 learner| action error, as a fraction of the "
                                                   "action range")
    seed: int = config_field(0, "seeds the learner, the actors (seed*1000 + actor id) and evaluation")
    threads: int = config_field(1, "torch threads of the learner")

    def __post_init__(self) -> None:
        need = functools.partial(require, owner="ActorQConfig")

        need(self.algo in ALGOS, f"algo={self.algo!r}: use one of {ALGOS}")
        need(self.engine in ENGINES, f"engine={self.engine!r}: use one of {ENGINES} ('ort' has int8 kernels)")
        for name in ("hidden", "depth", "num_actors", "total_steps", "batch_size", "updates_per_step",
                     "refresh_every", "chunk_steps", "max_version_lag", "eval_interval", "eval_episodes", "threads"):
            v = getattr(self, name)
            need(isinstance(v, int) and v >= 1, f"{name}={v!r} must be an integer >= 1")
        need(isinstance(self.critic_hidden, int) and self.critic_hidden >= 0,
             f"critic_hidden={self.critic_hidden!r} must be >= 0 (0: same as hidden)")
        need(0 <= self.warmup_steps < self.total_steps,
             f"warmup_steps={self.warmup_steps} must be in [0, total_steps={self.total_steps})")
        need(self.chunk_steps <= self.refresh_every,
             f"chunk_steps={self.chunk_steps} must be <= refresh_every={self.refresh_every}, or versions "
             "would go stale inside one message")
        need(self.explore_noise >= 0, f"explore_noise={self.explore_noise} must be >= 0")
        need(self.lr > 0, f"lr={self.lr} must be > 0")
        need(self.time_limit_s >= 0, f"time_limit_s={self.time_limit_s} must be >= 0 (0: no limit)")
        need(0 < self.snapshot_tolerance <= 1, f"snapshot_tolerance={self.snapshot_tolerance} must be in (0, 1], "
             "a fraction of the action range; 0.05 suits int8")

    def train_config(self):
        """The trainer's TrainConfig for the learner (dense networks, no eval/checkpoint of its own)."""
        from lowrl_ros.core.train.config import TrainConfig

        return TrainConfig(algo=self.algo, env_id=self.env_id, variant="dense", seed=self.seed,
                           total_steps=self.total_steps, warmup_steps=self.warmup_steps,
                           batch_size=self.batch_size, updates_per_step=self.updates_per_step, hidden=self.hidden,
                           depth=self.depth, lr=self.lr, buffer_size=self.total_steps,
                           buffer_min=min(100_000, self.total_steps), explore_noise=self.explore_noise,
                           threads=self.threads, progress=False)

    def actor_spec(self) -> dict[str, Any]:
        """What an actor process needs, as a plain picklable dict."""
        return {"env_id": self.env_id, "seed": self.seed, "engine": self.engine, "chunk_steps": self.chunk_steps,
                "refresh_every": self.refresh_every, "explore_noise": self.explore_noise,
                "warmup_steps": self.warmup_steps // self.num_actors}


class StaleVersionError(ValueError):
    """A transition batch carries a policy version the learner must not learn from."""


class VersionGate:
    """The learner's record of published versions and its check of every received batch.

    Args:
        max_lag: a batch whose oldest version is more than this many versions behind the newest
            published one is stale.
    """

    def __init__(self, max_lag: int) -> None:
        self.max_lag = int(max_lag)
        self.published = 0
        self.rejected_stale = 0
        self.rejected_unknown = 0

    def publish(self) -> int:
        """A new version number (1, 2, ...)."""
        self.published += 1
        return self.published

    def check(self, versions: np.ndarray) -> None:
        """Raise StaleVersionError (and count it) unless every version is known and recent enough."""
        versions = np.asarray(versions)
        lo, hi = int(versions.min()), int(versions.max())
        if lo < 1 or hi > self.published:
            self.rejected_unknown += 1
            raise StaleVersionError(f"versions {lo}..{hi} include one never published (published 1..{self.published})")
        if self.published - lo > self.max_lag:
            self.rejected_stale += 1
            raise StaleVersionError(f"version {lo} is {self.published - lo} versions behind {self.published} "
                                    f"(allowed lag {self.max_lag})")


@dataclass
class ActorQResult:
    """What a run measured (JSON-ready via ``to_dict``)."""

    config: dict[str, Any]
    env_steps: int = 0
    gradient_steps: int = 0
    wall_s: float = 0.0  # whole run, actor start-up included
    startup_s: float = 0.0  # spawning the actors until each has loaded version 1
    collect_wall_s: float = 0.0  # from the first received chunk to the end
    env_steps_per_s: float = 0.0
    versions_published: int = 0
    bytes_per_broadcast: float = 0.0  # mean artifact bytes sent to one actor per version
    bytes_broadcast_total: int = 0  # over all actors and versions
    rejected_stale: int = 0
    rejected_unknown: int = 0
    snapshot_max_error: float = 0.0  # worst |snapshot - fp32| over publishes, fraction of action range
    snapshot_errors: list[float] = field(default_factory=list)  # that error at each publish (32 replay states)
    snapshots_over_tolerance: int = 0  # publishes whose error exceeded snapshot_tolerance
    # env_steps, wall_s (since every actor was ready), return of the deployed snapshot
    evals: list[dict[str, float]] = field(default_factory=list)
    final_return: float = math.nan
    steps_to_target: int | None = None
    wall_to_target: float | None = None
    learner_cpu_s: float = 0.0
    actors: list[dict[str, Any]] = field(default_factory=list)  # per actor: steps, act/env seconds, cpu_s
    chunk_versions: list[tuple[int, int, int]] = field(default_factory=list)  # (actor, min, max) accepted
    torch_in_actors: bool = False
    actors_missing: list[int] = field(default_factory=list)  # actors whose final statistics never came

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _agent(cfg: ActorQConfig, obs_dim: int, act_dim: int):
    from lowrl_ros.core.train.sac import SACAgent
    from lowrl_ros.core.train.td3 import TD3Agent

    base = SACAgent if cfg.algo == "sac" else TD3Agent
    critic_hidden = cfg.critic_hidden

    class Learner(base):  # only the critic's width differs from the trainer's agent
        def build_critic(self, hidden: int):
            return super().build_critic(critic_hidden or hidden)

    return Learner(cfg.train_config(), obs_dim, act_dim)


class ActorQLearner:
    """The fp32 learner and its actor processes; ``run()`` trains and returns an ActorQResult.

    Args:
        cfg: the run's configuration.
        progress: called with (env_steps, fields) now and then (e.g. a progress bar).
    """

    def __init__(self, cfg: ActorQConfig, progress: Callable[[int, dict], None] | None = None) -> None:
        import torch

        from lowrl_ros.core.train.trainer import make_env
        from lowrl_ros.core.train.replay import ReplayBuffer

        self.cfg = cfg
        self.progress = progress
        torch.set_num_threads(cfg.threads)
        self.env = make_env(cfg.env_id)
        self.obs_dim = self.env.observation_space.shape[0]
        self.act_dim = self.env.action_space.shape[0]
        self.span = (self.env.action_space.high - self.env.action_space.low).astype(np.float64)
        self.agent = _agent(cfg, self.obs_dim, self.act_dim)
        self.buffer = ReplayBuffer(self.obs_dim, self.act_dim, cfg.total_steps + cfg.num_actors * cfg.chunk_steps)
        self.rng = np.random.default_rng(cfg.seed)
        self.gate = VersionGate(cfg.max_version_lag)
        self.scratch = Path(tempfile.mkdtemp(prefix="lowrl_actorq_"))
        self.snapshot = None  # the deployed Policy of the newest version (evaluation, parity)
        self.result = ActorQResult(config=asdict(cfg))

    # --- snapshots ----------------------------------------------------------------------------
    def make_snapshot(self, version: int) -> bytes:
        """The learner's actor as artifact bytes of ``version`` (int8 or fp32 per the config)."""
        from lowrl_ros.core.runtime.artifact import save_artifact
        from lowrl_ros.core.runtime.engines import load_artifact
        from lowrl_ros.core.train.export import actor_contract, actor_weights

        contract = actor_contract(self.agent, self.env, {"tool": "lowrl actorq", "algo": self.cfg.algo,
                                                         "int8": str(self.cfg.int8)})
        contract = type(contract).from_dict({**contract.to_dict(), "version": version,
                                             "parent_version": version - 1 if version > 1 else None})
        path = save_artifact(self.scratch / f"v{version}.onnx", actor_weights(self.agent), contract,
                             int8=self.cfg.int8)
        data = path.read_bytes()
        self.snapshot = load_artifact(path, engine=self.cfg.engine)
        path.unlink()
        return data

    def snapshot_error(self, obs: np.ndarray) -> float:
        """Max |deployed snapshot - fp32 learner| action over ``obs``, as a fraction of the range."""
        low = self.env.action_space.low.astype(np.float64)
        fp32 = low + (self.agent.deterministic(obs) + 1.0) * 0.5 * self.span
        deployed = np.array([self.snapshot.act(o) for o in obs])  # per row: as the actors call it
        return float((np.abs(deployed - fp32) / self.span).max())

    def evaluate(self) -> float:
        """Mean return of the newest deployed snapshot (no exploration noise) on fixed seeds."""
        returns = []
        for i in range(self.cfg.eval_episodes):
            obs, _ = self.env.reset(seed=self.cfg.seed + 10_000 + i)
            total, done = 0.0, False
            while not done:
                obs, r, term, trunc, _ = self.env.step(self.snapshot.act(obs))
                total += float(r)
                done = term or trunc
            returns.append(total)
        return float(np.mean(returns))

    # --- receiving ------------------------------------------------------------------------------
    def receive(self, actor_id: int, chunk: dict[str, np.ndarray]) -> bool:
        """Check a chunk's versions and store it; False (and counted) when rejected."""
        try:
            self.gate.check(chunk["version"])
        except StaleVersionError:
            return False
        for i in range(len(chunk["reward"])):
            self.buffer.add(chunk["obs"][i], chunk["action"][i], float(chunk["reward"][i]), chunk["next_obs"][i],
                            bool(chunk["terminated"][i]), bool(chunk["truncated"][i]), chunk["behaviour"][i])
        self.result.chunk_versions.append((actor_id, int(chunk["version"].min()), int(chunk["version"].max())))
        self.result.env_steps += len(chunk["reward"])
        return True

    # --- the loop -------------------------------------------------------------------------------
    def run(self) -> ActorQResult:
        """Start the actors, learn until total_steps / target / time limit, stop them, report."""
        import psutil

        from lowrl_ros.core.train.actorq_worker import actor_main

        cfg, res = self.cfg, self.result
        ctx = mp.get_context("spawn")
        out_q = ctx.Queue(maxsize=2 * cfg.num_actors)
        snap_qs = [ctx.Queue() for _ in range(cfg.num_actors)]
        stop = ctx.Event()
        procs = [ctx.Process(target=actor_main, args=(i, cfg.actor_spec(), snap_qs[i], out_q, stop), daemon=True,
                             name=f"lowrl-actorq-{i}") for i in range(cfg.num_actors)]
        t0 = self._t_start = time.perf_counter()
        me = psutil.Process()
        cpu0 = sum(me.cpu_times()[:2])
        for p in procs:
            p.start()
        handles = [psutil.Process(p.pid) for p in procs]
        try:
            self._publish(snap_qs)
            self._wait_ready(out_q, procs)
            self._loop(out_q, snap_qs, time.perf_counter())
        finally:
            actor_cpu = {}
            for i, h in enumerate(handles):
                try:
                    actor_cpu[i] = sum(h.cpu_times()[:2])  # read before they exit (psutil, like the monitor)
                except psutil.Error:
                    pass
            stop.set()
            res.wall_s = time.perf_counter() - t0
            res.learner_cpu_s = sum(me.cpu_times()[:2]) - cpu0
            self._collect_done(out_q, procs, actor_cpu)
            for p in procs:
                p.join(timeout=10)
                if p.is_alive():
                    p.terminate()
            # Snapshots published after an actor stopped reading sit in its pipe; without this the
            # queue's feeder thread would wait for a reader forever when this process exits.
            for q in snap_qs + [out_q]:
                q.cancel_join_thread()
                q.close()
        res.gradient_steps = self.agent.gradient_steps
        res.versions_published = self.gate.published
        res.rejected_stale, res.rejected_unknown = self.gate.rejected_stale, self.gate.rejected_unknown
        res.bytes_per_broadcast = res.bytes_broadcast_total / max(1, self.gate.published * cfg.num_actors)
        res.env_steps_per_s = res.env_steps / max(res.collect_wall_s, 1e-9)
        if not res.evals or res.evals[-1]["env_steps"] != res.env_steps:
            res.evals.append({"env_steps": res.env_steps, "wall_s": res.wall_s - res.startup_s,
                              "return": self.evaluate()})
        res.final_return = res.evals[-1]["return"]
        return res

    def _publish(self, snap_qs) -> None:
        version = self.gate.publish()
        data = self.make_snapshot(version)
        if len(self.buffer) and version > 1:
            obs, _ = self.buffer.oldest(len(self.buffer))
            probe = obs[self.rng.integers(0, len(obs), 32)]
            err = self.snapshot_error(probe)
            self.result.snapshot_errors.append(err)
            self.result.snapshot_max_error = max(self.result.snapshot_max_error, err)
            if err > self.cfg.snapshot_tolerance:
                # Counted and reported, not fatal: one probe state near a quantization edge should
                # not kill a long run, but a run where this is frequent is not learning what it acts.
                self.result.snapshots_over_tolerance += 1
                if self.result.snapshots_over_tolerance == 1:
                    print(f"actorq: snapshot v{version} differs from the fp32 learner by {err:.3g} of the action "
                          f"range > snapshot_tolerance {self.cfg.snapshot_tolerance} (counted in "
                          "snapshots_over_tolerance)", file=sys.stderr)
        for q in snap_qs:
            q.put(("snapshot", version, data))
        self.result.bytes_broadcast_total += len(data) * len(snap_qs)

    def _loop(self, out_q, snap_qs, t0: float) -> None:
        cfg, res = self.cfg, self.result
        t_first = None
        next_publish, next_eval = cfg.refresh_every, cfg.eval_interval
        while True:
            if cfg.time_limit_s and time.perf_counter() - t0 > cfg.time_limit_s:
                break
            learned = max(0, res.env_steps - cfg.warmup_steps) * cfg.updates_per_step
            if self.agent.gradient_steps < learned:
                # Behind the data: learn, and leave the (bounded) queue alone so the actors block
                # instead of producing transitions that would arrive stale.
                self.agent.update(self.buffer.sample(cfg.batch_size, self.rng, 1, self.agent.cfg.gamma))
            elif res.env_steps >= cfg.total_steps:
                break
            else:
                try:
                    msg = out_q.get(timeout=1.0)
                except queue.Empty:
                    continue
                if msg[0] == "error":
                    raise RuntimeError(f"actor {msg[1]} failed:\n{msg[2]}")
                if msg[0] == "chunk":
                    t_first = t_first or time.perf_counter()
                    self.receive(msg[1], msg[2])
            if res.env_steps >= next_publish:
                next_publish += cfg.refresh_every
                self._publish(snap_qs)
            if res.env_steps >= next_eval:
                next_eval += cfg.eval_interval
                ret = self.evaluate()
                wall = time.perf_counter() - t0
                res.evals.append({"env_steps": res.env_steps, "wall_s": wall, "return": ret})
                if self.progress:
                    self.progress(res.env_steps, {"return": f"{ret:8.1f}", "v": str(self.gate.published)})
                if not math.isnan(cfg.target_return) and ret >= cfg.target_return:
                    res.steps_to_target, res.wall_to_target = res.env_steps, wall
                    break
        res.collect_wall_s = time.perf_counter() - (t_first or t0)

    def _wait_ready(self, out_q, procs, timeout_s: float = 180.0) -> None:
        """Wait until every actor has imported its runtime and loaded version 1 (spawn takes seconds)."""
        ready: set[int] = set()
        deadline = time.perf_counter() + timeout_s
        while len(ready) < len(procs):
            if time.perf_counter() > deadline:
                raise RuntimeError(f"only {len(ready)} of {len(procs)} actors started within {timeout_s} s; "
                                   "the machine is overloaded or an actor hangs on import")
            try:
                msg = out_q.get(timeout=0.5)
            except queue.Empty:
                if not all(p.is_alive() for p in procs):
                    raise RuntimeError("an actor process died while starting; run one actor in the foreground "
                                       "(lowrl_ros.core.train.actorq_worker.actor_main) to see why") from None
                continue
            if msg[0] == "error":
                raise RuntimeError(f"actor {msg[1]} failed:\n{msg[2]}")
            if msg[0] == "ready":
                ready.add(msg[1])
        self.result.startup_s = time.perf_counter() - self._t_start

    def _collect_done(self, out_q, procs, actor_cpu: dict[int, float]) -> None:
        """Drain the queue until every actor has reported its statistics (or 15 s pass)."""
        waiting = set(range(len(procs)))
        deadline = time.perf_counter() + 15.0
        stats: dict[int, dict] = {}
        while waiting and time.perf_counter() < deadline:
            try:
                msg = out_q.get(timeout=0.5)
            except queue.Empty:
                if not any(p.is_alive() for p in procs):
                    break
                continue
            if msg[0] == "done":
                stats[msg[1]] = msg[2]
                waiting.discard(msg[1])
        for i in sorted(stats):
            s = stats[i]
            s["cpu_s_psutil"] = actor_cpu.get(i, math.nan)
            s["act_us_per_step"] = 1e6 * s["act_s"] / max(s["steps"], 1)
            s["env_us_per_step"] = 1e6 * s["env_s"] / max(s["steps"], 1)
            self.result.actors.append({"actor": i, **s})
            self.result.torch_in_actors |= bool(s.get("torch_loaded"))
        if len(stats) < len(procs):
            missing = sorted(set(range(len(procs))) - set(stats))
            self.result.actors_missing = missing


def run_actorq(cfg: ActorQConfig, progress: Callable[[int, dict], None] | None = None) -> ActorQResult:
    """Train with quantized (or fp32) actors; see ActorQLearner."""
    return ActorQLearner(cfg, progress).run()
