"""The retraining environments: groups of the robot's simulator in worker processes or Ray actors.

One :class:`EnvGroup` steps some of the ``n_envs`` environments (RobotSimEnv with the robot file's reward and
episode ends, core/finetune/sim_env.py), resets each one as its episode ends with a gap drawn around the
identified one (:func:`gap_around`), and evaluates an artifact deterministically in the identified simulator.
:class:`EnvPool` runs the groups in local processes (a pipe each) or, with ``ray_address``, as Ray actors on
that cluster: the same class, the same calls, so the work does not depend on where it runs. Every env has
its own seed stream (seed, env index), so the same seed gives the same transitions locally, on Ray and for any
number of workers.

A worker that dies (a killed process, a lost Ray node) or stops answering within ``timeout_s`` raises
:class:`WorkerDied` naming it, never a hang.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import uuid
from dataclasses import replace
from typing import Any, Mapping, Sequence

import numpy as np

from lowrl_ros.core.sim.robot_sim import PER_JOINT, Gap

RAY_NAMESPACE = "lowrl-retrain"


class WorkerDied(RuntimeError):
    """An env worker died or stopped answering; the message names it and what happened."""


def gap_around(gap: Gap, priors: Mapping[str, tuple[float, float]], spread: Mapping[str, float],
               rng: np.random.Generator, latency_extra: int = 0) -> Gap:
    """``gap`` with each parameter in ``spread`` drawn uniformly within +- spread * (hi - lo) / 2 of its identified
    value, clipped to its prior [lo, hi] (``spread`` is a share of the prior range: 0 keeps the identified value,
    1 reaches a whole prior width around it). latency_steps is drawn as an integer, then 0..``latency_extra``
    physics steps are added (the delay the robot's timing may add: RetrainSettings.latency_extra); vector parameters
    per entry."""
    drawn: dict[str, Any] = {}
    for key, share in spread.items():
        lo, hi = priors[key]
        half = share * (hi - lo) / 2.0
        value = getattr(gap, key)
        center = np.atleast_1d(np.asarray(value, dtype=np.float64))
        v = np.clip(rng.uniform(center - half, center + half), lo, hi)
        if key == "latency_steps":
            drawn[key] = int(np.clip(np.rint(v[0]), int(np.ceil(lo)), int(np.floor(hi))))
        elif isinstance(value, tuple):
            drawn[key] = tuple(map(float, v))
        elif key in PER_JOINT or np.ndim(value) == 0:
            drawn[key] = float(v[0])
    if latency_extra:  # drawn last: the other draws stay those of the same seed without it
        extra = int(rng.integers(0, latency_extra + 1))
        drawn["latency_steps"] = int(drawn.get("latency_steps", gap.latency_steps)) + extra
    return replace(gap, **drawn)


class EnvGroup:
    """Environments ``env_ids`` of a retraining run, stepped together (see the module docstring).

    Args:
        robot_file: the robot file's path (on the machine that runs the group: a Ray cluster needs the same files).
        gap: the identified gap (Gap.as_dict()).
        priors: the robot file's gap_priors; spread: per parameter, the share of its prior range drawn around gap.
        env_ids: which of the run's environments this group steps (their seed streams).
        seed: the run's seed.
        episode_steps: truncate an episode after this many steps (0: the robot file's own episode end only).
        last_action: the policy's last_action convention (artifact.last_action_convention).
        commands, command_share: that share of the episodes (evaluations included) take their velocity command
            from these rows (the commands the robot was given: RobotSimEnv.use_commands); None: the ranges only.
    """

    def __init__(self, robot_file: str, gap: dict, priors: dict, spread: dict, env_ids: Sequence[int], seed: int,
                 episode_steps: int, last_action: str, commands: list | None = None,
                 command_share: float = 0.0, latency_extra: int = 0) -> None:
        from lowrl_ros.core.finetune.sim_env import make_robot_env

        self.gap, self.priors, self.spread = Gap.from_dict(gap), dict(priors), dict(spread)
        self.latency_extra = int(latency_extra)
        self.envs = [make_robot_env(robot_file, gap=self.gap, last_action=last_action) for _ in env_ids]
        for env in self.envs:
            env.use_commands(commands, command_share)
        self.rngs = [np.random.default_rng([seed, int(i)]) for i in env_ids]
        self.episode_steps = int(episode_steps)
        self.steps = np.zeros(len(self.envs), int)
        self.returns = np.zeros(len(self.envs))
        self.obs = np.zeros((len(self.envs), self.envs[0].observation_space.shape[0]), np.float32)

    def pid(self) -> int:
        return os.getpid()

    def _reset(self, k: int) -> None:
        rng = self.rngs[k]
        self.envs[k].set_gap(gap_around(self.gap, self.priors, self.spread, rng, self.latency_extra))
        self.obs[k] = self.envs[k].reset(seed=int(rng.integers(2 ** 31)))[0]
        self.steps[k], self.returns[k] = 0, 0.0

    def reset(self) -> np.ndarray:
        for k in range(len(self.envs)):
            self._reset(k)
        return self.obs.copy()

    def step(self, actions: np.ndarray, raws: np.ndarray | None = None,
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, list]:
        """Step each env with its row of ``actions`` (``raws``: the network outputs behind them, which a ``raw``
        last_action convention reads back; None: the actions). Gives (next obs (after an auto-reset where an
        episode ended), reward, terminated, truncated, final obs of each env's step (the pre-reset one where it
        ended), returns of the episodes that ended)."""
        n = len(self.envs)
        rew, term, trunc = np.zeros(n), np.zeros(n, bool), np.zeros(n, bool)
        final = np.zeros_like(self.obs)
        finished = []
        for k, env in enumerate(self.envs):
            obs, r, te, tr, _ = env.step(actions[k], None if raws is None else raws[k])
            self.steps[k] += 1
            self.returns[k] += r
            tr = tr or (self.episode_steps > 0 and self.steps[k] >= self.episode_steps)
            rew[k], term[k], trunc[k], final[k] = r, te, tr and not te, obs
            if te or tr:
                finished.append(float(self.returns[k]))
                self._reset(k)
            else:
                self.obs[k] = obs
        return self.obs.copy(), rew, term, trunc, final, finished

    def evaluate(self, artifact: bytes, seeds: Sequence[int], steps: int) -> list[float]:
        """Deterministic returns of ``artifact`` (run by the robot's numpy engine) in the identified simulator (no
        spread; seed ``s`` adds ``s % (latency_extra + 1)`` steps of latency), one episode per seed of at most
        ``steps`` steps (0: the robot file's episode end)."""
        from lowrl_ros.core.runtime.artifact import parse_artifact
        from lowrl_ros.core.runtime.engines import build_policy

        policy = build_policy(parse_artifact(artifact, "retrain-eval"), "numpy")
        env = self.envs[0]
        out = []
        for s in seeds:
            extra = int(s) % (self.latency_extra + 1)
            env.set_gap(replace(self.gap, latency_steps=self.gap.latency_steps + extra) if extra else self.gap)
            obs, _ = env.reset(seed=int(s))
            total, n = 0.0, 0
            while True:
                action = policy.act(obs.astype(np.float64))  # the robot's: its network output read back
                obs, r, te, tr, _ = env.step(action, policy.raw_output.copy())
                total, n = total + r, n + 1
                if te or tr or (steps and n >= steps):
                    break
            out.append(total)
        self._reset(0)  # the training episode of env 0 starts afresh, gap drawn as usual
        return out


def _serve(conn, kwargs: dict) -> None:
    """A local worker process: build the group, then answer (method, args) until ("close", ())."""
    try:
        group = EnvGroup(**kwargs)
        conn.send(("ok", None))
    except Exception as exc:  # noqa: BLE001 - reported to the parent with its type
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    while True:
        method, args = conn.recv()
        if method == "close":
            return
        try:
            conn.send(("ok", getattr(group, method)(*args)))
        except Exception as exc:  # noqa: BLE001
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class EnvPool:
    """EnvGroups in local processes or Ray actors (``ray_address``: "local", "auto", "ray://HOST:PORT").

    Args:
        groups: one EnvGroup's keyword arguments per worker.
        ray_address: "" for local processes.
        timeout_s: the longest a call may take before its worker is declared dead.
    """

    def __init__(self, groups: list[dict], ray_address: str = "", timeout_s: float = 120.0) -> None:
        self.timeout_s = float(timeout_s)
        self.ray_address = ray_address
        self._procs: list[Any] = []
        self._conns: list[Any] = []
        self._actors: list[Any] = []
        self._started_ray = False
        try:
            if ray_address:
                self._start_ray(groups)
            else:
                self._start_local(groups)
        except BaseException:
            self.close()
            raise

    # ---- local processes ------------------------------------------------------------------------
    def _start_local(self, groups: list[dict]) -> None:
        ctx = mp.get_context("spawn")  # a clean interpreter: no torch threads or locks inherited from the trainer
        for kwargs in groups:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(child, kwargs), daemon=True)
            proc.start()
            child.close()
            self._procs.append(proc)
            self._conns.append(parent)
        for i in range(len(groups)):
            self._recv(i, "start")

    def _recv(self, i: int, method: str) -> Any:
        conn, proc = self._conns[i], self._procs[i]
        try:
            ready = conn.poll(self.timeout_s)
            if not ready:
                raise WorkerDied(f"env worker {i} (pid {proc.pid}) did not answer {method} within {self.timeout_s:g} s")
            status, value = conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            proc.join(1.0)
            raise WorkerDied(f"env worker {i} (pid {proc.pid}) died during {method} (exit code {proc.exitcode})") \
                from None
        if status != "ok":
            raise WorkerDied(f"env worker {i} (pid {proc.pid}) failed in {method}: {value}")
        return value

    # ---- Ray actors --------------------------------------------------------------------------------
    def _start_ray(self, groups: list[dict]) -> None:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # nothing talks to another address
        import ray

        if not ray.is_initialized():
            # A new local instance binds to 127.0.0.1 only; no dashboard, no usage stats.
            local = {"_node_ip_address": "127.0.0.1"} if self.ray_address == "local" else {}
            try:
                ray.init(address=self.ray_address, include_dashboard=False, log_to_driver=False,
                         namespace=RAY_NAMESPACE, logging_level="warning", **local)
            except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, auth errors...
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                raise WorkerDied(f"could not start or reach Ray at {self.ray_address!r}: {type(exc).__name__}: "
                                 f"{first}") from None
            self._started_ray = True
        remote = ray.remote(num_cpus=1, max_restarts=0)(EnvGroup)
        run = uuid.uuid4().hex[:8]
        self._actors = [remote.options(name=f"env-{run}-{i}", namespace=RAY_NAMESPACE).remote(**kw)
                        for i, kw in enumerate(groups)]
        self._ray_get([a.pid.remote() for a in self._actors], "start (is the cluster short of CPUs? each env "
                                                              "worker takes one)")

    def _ray_get(self, refs: list, method: str) -> list:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        out = []
        for i, ref in enumerate(refs):
            try:
                out.append(ray.get(ref, timeout=self.timeout_s))
            except RayActorError as exc:
                raise WorkerDied(f"Ray env worker {i} died during {method}: {str(exc).splitlines()[0]}") from None
            except GetTimeoutError:
                raise WorkerDied(f"Ray env worker {i} did not answer {method} within {self.timeout_s:g} s") from None
            except RayTaskError as exc:
                raise WorkerDied(f"Ray env worker {i} failed in {method}: {str(exc.cause)}") from None
        return out

    # ---- the one call ------------------------------------------------------------------------------
    def call(self, method: str, args: list[tuple]) -> list:
        """``method(*args[i])`` on every worker i, in parallel; their results in worker order."""
        if self._actors:
            return self._ray_get([getattr(a, method).remote(*arg) for a, arg in zip(self._actors, args)], method)
        for i, (conn, arg) in enumerate(zip(self._conns, args)):
            try:
                conn.send((method, arg))
            except (BrokenPipeError, OSError):
                raise WorkerDied(f"env worker {i} (pid {self._procs[i].pid}) died before {method} "
                                 f"(exit code {self._procs[i].exitcode})") from None
        return [self._recv(i, method) for i in range(len(self._conns))]

    def close(self) -> None:
        for conn in self._conns:
            try:
                conn.send(("close", ()))
            except (BrokenPipeError, OSError):
                pass
        for proc in self._procs:
            proc.join(2.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        self._procs, self._conns = [], []
        if self._actors:
            import ray

            for a in self._actors:
                ray.kill(a)
            self._actors = []
        if self._started_ray:
            import ray

            ray.shutdown()
            self._started_ray = False
