"""Many robot-file simulators stepped in parallel worker processes (off-board training; numpy, no torch).

A walking policy needs millions of steps and one MuJoCo robot steps about a thousand times a second
on one core, so the environments of core/finetune/sim_env.py (the robot file's simulator, reward and
episode ends) are spread over worker processes, a few per worker, and stepped in lockstep:
``step(actions)`` sends each worker its rows and gathers the next observations, rewards and ends.
An environment whose episode ended is reset at once (auto-reset), so the returned observation is the
new episode's first one, as rsl_rl's and Isaac Lab's vectorised environments do; the episode's return,
length and whether it fell come back in ``StepResult.finished``.

Environment ``i`` is seeded with ``seed + i`` at its first reset and keeps its own random stream after,
so a run is the same whatever the number of workers. With ``randomize`` > 0 every episode draws a gap
from the robot file's ``sim.gap_priors``, each range shrunk to that share around the nominal model
(domain randomisation, Tobin et al. 2017), from a stream of its own seeded the same way.

Workers are started with the ``spawn`` method: the parent may hold torch threads, which ``fork`` would
copy in a locked state.
"""
from __future__ import annotations

import multiprocessing as mp
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lowrl_ros.core.sim.robot_sim import Gap

NOMINAL = Gap()


def shrunk_priors(priors: dict[str, tuple[float, float]], share: float) -> dict[str, tuple[float, float]]:
    """Each ``[lo, hi]`` prior shrunk to ``share`` of itself around the nominal model's value (0 for biases and
    noises, 1 for scales), the nominal value clamped into the range first."""
    out = {}
    for key, (lo, hi) in priors.items():
        nominal = getattr(NOMINAL, key)
        nom = float(nominal[0] if isinstance(nominal, tuple) else nominal)
        nom = min(max(nom, lo), hi)
        out[key] = (nom + share * (lo - nom), nom + share * (hi - nom))
    return out


@dataclass
class StepResult:
    """One lockstep step of every environment (rows in environment order).

    Attributes:
        obs: (n, obs_dim) float32, the next observation (a new episode's first where one ended).
        reward: (n,) float32.
        terminated: (n,) bool, the episode ended in a fall (the robot file's ``episode:``).
        truncated: (n,) bool, the episode hit its time limit.
        finished: (env index, return, length in steps, fell) of every episode that ended in this step.
    """

    obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    finished: list[tuple[int, float, int, bool]] = field(default_factory=list)


class _Slot:
    """One environment inside a worker: the env, its gap stream and its running episode sums."""

    def __init__(self, robot: str, index: int, seed: int, randomize: float) -> None:
        from lowrl_ros.core.finetune.sim_env import make_robot_env

        self.env = make_robot_env(robot)
        self.index = index
        self.seed = seed + index
        self.priors = shrunk_priors(dict(self.env.sim.config.gap_priors), randomize) if randomize > 0 else None
        self.gap_rng = np.random.default_rng([seed, index, 1])
        self.ret, self.length = 0.0, 0

    def reset(self, first: bool) -> np.ndarray:
        if self.priors is not None:
            self.env.set_gap(NOMINAL.sample(self.priors, self.gap_rng))
        self.ret, self.length = 0.0, 0
        return self.env.reset(seed=self.seed if first else None)[0]

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, tuple | None]:
        obs, reward, term, trunc, _ = self.env.step(action)
        self.ret += reward
        self.length += 1
        done = None
        if term or trunc:
            done = (self.index, self.ret, self.length, bool(term))
            obs = self.reset(first=False)
        return obs, reward, term, trunc, done


def _worker(conn: Any, robot: str, indices: list[int], seed: int, randomize: float) -> None:
    """A worker's loop: ("reset"|"step", payload) in, arrays out; ("close", None) ends it."""
    try:
        slots = [_Slot(robot, i, seed, randomize) for i in indices]
        conn.send(("ready", slots[0].env.observation_space.shape[0], slots[0].env.action_space.shape[0]))
        while True:
            cmd, payload = conn.recv()
            if cmd == "reset":
                conn.send(np.stack([s.reset(first=True) for s in slots]))
            elif cmd == "step":
                rows = [s.step(a) for s, a in zip(slots, payload)]
                conn.send((np.stack([r[0] for r in rows]), np.array([r[1] for r in rows], np.float32),
                           np.array([r[2] for r in rows]), np.array([r[3] for r in rows]),
                           [r[4] for r in rows if r[4] is not None]))
            else:
                break
    except (EOFError, KeyboardInterrupt):
        pass  # the parent went away or was interrupted: just end
    except Exception as exc:  # noqa: BLE001 - tell the parent what broke instead of hanging it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


class RobotEnvPool:
    """``num_envs`` simulators of one robot file over ``workers`` processes (see the module docstring).

    Args:
        robot: the robot file's path (with ``sim:``, ``reward:`` and ``episode:`` sections).
        num_envs: environments in all.
        workers: processes (at most ``num_envs``); the environments are split into contiguous blocks.
        seed: environment ``i`` is seeded with ``seed + i``.
        randomize: share (0..1) of each ``sim.gap_priors`` range drawn from per episode; 0: the nominal model.
    """

    def __init__(self, robot: str | Path, num_envs: int, workers: int = 1, seed: int = 0,
                 randomize: float = 0.0) -> None:
        if num_envs < 1 or workers < 1:
            raise ValueError(f"need at least one environment and one worker, got {num_envs} and {workers}")
        if not 0.0 <= randomize <= 1.0:
            raise ValueError(f"randomize is a share of each gap prior's range, 0..1; got {randomize}")
        self.num_envs = num_envs
        workers = min(workers, num_envs)
        blocks = np.array_split(np.arange(num_envs), workers)
        ctx = mp.get_context("spawn")
        self._conns, self._procs, self._blocks = [], [], [list(map(int, b)) for b in blocks]
        try:
            for block in self._blocks:
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_worker, args=(child, str(robot), block, seed, randomize), daemon=True)
                proc.start()
                child.close()
                self._conns.append(parent)
                self._procs.append(proc)
            ready = [self._recv(c) for c in self._conns]
        except BaseException:
            self.close()
            raise
        self.obs_dim, self.action_dim = int(ready[0][1]), int(ready[0][2])

    def _recv(self, conn: Any) -> Any:
        try:
            msg = conn.recv()
        except EOFError:
            raise RuntimeError("a simulator worker died (out of memory or killed); see its output above") from None
        if isinstance(msg, tuple) and msg and isinstance(msg[0], str) and msg[0] == "error":
            raise RuntimeError(f"a simulator worker failed: {msg[1]}")
        return msg

    def reset(self) -> np.ndarray:
        """Every environment's first observation (seeded), (num_envs, obs_dim) float32."""
        for conn in self._conns:
            conn.send(("reset", None))
        return np.concatenate([self._recv(c) for c in self._conns]).astype(np.float32)

    def step(self, actions: np.ndarray) -> StepResult:
        """Step every environment once with its row of ``actions`` (num_envs, action_dim); auto-reset."""
        actions = np.asarray(actions, dtype=np.float64)
        if actions.shape != (self.num_envs, self.action_dim):
            raise ValueError(f"actions must be ({self.num_envs}, {self.action_dim}), got {actions.shape}")
        for conn, block in zip(self._conns, self._blocks):
            conn.send(("step", actions[block[0]:block[-1] + 1]))
        parts = [self._recv(c) for c in self._conns]
        return StepResult(np.concatenate([p[0] for p in parts]).astype(np.float32),
                          np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]),
                          np.concatenate([p[3] for p in parts]), [f for p in parts for f in p[4]])

    def close(self) -> None:
        """Stop the workers (idempotent): ask each to end, then wait; a worker that does not end is terminated."""
        for conn in self._conns:
            try:
                conn.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
        for proc in self._procs:
            proc.join(timeout=5.0)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=1.0)
        for conn in self._conns:
            conn.close()
        self._conns = []

    @property
    def exitcodes(self) -> list[int | None]:
        """Each worker's exit code (None: still running; 0: ended when asked)."""
        return [p.exitcode for p in self._procs]

    def __enter__(self) -> RobotEnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
