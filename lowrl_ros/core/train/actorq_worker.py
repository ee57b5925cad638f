"""ActorQ actor process: collects experience with a policy snapshot from the learner (no torch).

Runs in its own process (multiprocessing "spawn"), so its imports are its own: gymnasium, numpy,
onnxruntime and the artifact runtime, never torch — the actor is the robot-side runtime, exactly
what would run on the robot (ActorQ, Krishnan et al. 2022: quantized actors, fp32 learner).

Protocol (all messages are tuples on multiprocessing queues):

- learner -> actor (its own ``snapshots`` queue): ``("snapshot", version, artifact_bytes)``. The
  bytes are a complete artifact (int8 or fp32 ONNX) made by ``save_artifact``; the actor writes
  them to its scratch directory and loads them with ``load_artifact`` — every snapshot passes the
  runtime's full validation, as a policy sent to a robot would.
- actor -> learner (shared ``transitions`` queue): ``("ready", actor_id, load_s)`` once its first
  snapshot is loaded; ``("chunk", actor_id, arrays)`` with arrays of
  ``chunk_steps`` transitions, each tagged with the ``version`` of the snapshot that chose its
  action; ``("episode", actor_id, return, version)`` per finished episode; on stop,
  ``("done", actor_id, stats)``; on failure ``("error", actor_id, traceback)``.

The actor polls for the newest waiting snapshot at every chunk boundary (older waiting ones are
skipped: only the newest matters). Polling only every ``refresh_every`` of its *own* steps let an
actor fall ``num_actors`` versions behind between polls, and chunks then arrived stale.
"""
from __future__ import annotations

import os
import queue
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

TRANSITION_FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated", "behaviour", "version")


def _newest_snapshot(snapshots, block: bool, stop) -> tuple[int, bytes] | None:
    """Drain the snapshot queue; return the newest (version, bytes), or None if none waited."""
    newest = None
    while True:
        try:
            msg = snapshots.get(timeout=0.2) if (block and newest is None) else snapshots.get_nowait()
        except queue.Empty:
            if newest is not None or not block or stop.is_set():
                return newest
            continue
        if msg[0] == "snapshot":
            newest = (int(msg[1]), msg[2])


def _put(out, msg, stop) -> bool:
    """Put with backpressure: wait while the learner is behind, give up when told to stop."""
    while not stop.is_set():
        try:
            out.put(msg, timeout=0.2)
            return True
        except queue.Full:
            continue
    return False


def actor_main(actor_id: int, spec: dict[str, Any], snapshots, out, stop) -> None:
    """Entry point of one actor process; ``spec`` is a plain dict (see ActorQConfig.actor_spec)."""
    try:
        _run(actor_id, spec, snapshots, out, stop)
    except Exception:  # report instead of dying silently: the learner raises it with the traceback
        out.put(("error", actor_id, traceback.format_exc()))


def _run(actor_id: int, spec: dict[str, Any], snapshots, out, stop) -> None:
    import gymnasium as gym

    from lowrl_ros.core.runtime.engines import load_artifact

    env = gym.make(spec["env_id"])
    rng = np.random.default_rng(spec["seed"] * 1000 + actor_id)
    low = env.action_space.low.astype(np.float64)
    high = env.action_space.high.astype(np.float64)
    act_dim, obs_dim = low.size, env.observation_space.shape[0]
    n = int(spec["chunk_steps"])
    buf = {"obs": np.zeros((n, obs_dim), np.float32), "next_obs": np.zeros((n, obs_dim), np.float32),
           "action": np.zeros((n, act_dim), np.float32), "behaviour": np.zeros((n, act_dim), np.float32),
           "reward": np.zeros(n, np.float32), "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool),
           "version": np.zeros(n, np.int64)}
    scratch = Path(tempfile.mkdtemp(prefix=f"lowrl_actor{actor_id}_"))
    path = scratch / "snapshot.onnx"
    stats = {"steps": 0, "act_s": 0.0, "env_s": 0.0, "load_s": 0.0, "loads": 0, "wait_s": 0.0,
             "episodes": 0, "pid": os.getpid()}
    t_wait = time.perf_counter()
    first = _newest_snapshot(snapshots, True, stop)
    stats["wait_s"] += time.perf_counter() - t_wait
    if first is None:
        return
    policy, version = None, 0

    def load(snap: tuple[int, bytes]) -> None:
        nonlocal policy, version
        t0 = time.perf_counter()
        path.write_bytes(snap[1])
        policy = load_artifact(path, engine=spec["engine"])
        if policy.contract.version != snap[0]:
            raise RuntimeError(f"snapshot says version {snap[0]} but its contract says {policy.contract.version}")
        version = snap[0]
        stats["load_s"] += time.perf_counter() - t0
        stats["loads"] += 1

    load(first)
    if not _put(out, ("ready", actor_id, stats["load_s"]), stop):
        return
    obs, _ = env.reset(seed=spec["seed"] * 1000 + actor_id)
    warmup, noise = int(spec["warmup_steps"]), float(spec["explore_noise"])
    half, mid = (high - low) / 2.0, (high + low) / 2.0
    ep_return, k = 0.0, 0
    clock = time.perf_counter
    while not stop.is_set():
        if k == 0 and stats["steps"]:  # at every chunk boundary: a non-blocking poll costs ~µs
            snap = _newest_snapshot(snapshots, False, stop)
            if snap is not None and snap[0] > version:
                load(snap)
        t0 = clock()
        if stats["steps"] < warmup:
            a = rng.uniform(-1.0, 1.0, act_dim)
            behaviour = a  # the warm-up policy is uniform; its sample is its action
        else:
            behaviour = (policy.act(obs) - mid) / half  # normalised to [-1, 1], as the learner stores it
            a = np.clip(behaviour + noise * rng.standard_normal(act_dim), -1.0, 1.0)
        t1 = clock()
        next_obs, r, term, trunc, _ = env.step(mid + half * a)
        stats["act_s"] += t1 - t0
        stats["env_s"] += clock() - t1
        buf["obs"][k], buf["action"][k], buf["reward"][k] = obs, a, r
        buf["next_obs"][k], buf["terminated"][k], buf["truncated"][k] = next_obs, term, trunc
        buf["behaviour"][k], buf["version"][k] = behaviour, version
        k += 1
        stats["steps"] += 1
        ep_return += float(r)
        if term or trunc:
            stats["episodes"] += 1
            _put(out, ("episode", actor_id, ep_return, version), stop)
            ep_return = 0.0
            obs, _ = env.reset()
        else:
            obs = next_obs
        if k == n:
            t_wait = clock()
            if not _put(out, ("chunk", actor_id, {key: v.copy() for key, v in buf.items()}), stop):
                break
            stats["wait_s"] += clock() - t_wait
            k = 0
    cpu = os.times()
    stats["cpu_s"] = cpu.user + cpu.system
    stats["torch_loaded"] = "torch" in sys.modules
    stats["last_version"] = version
    out.put(("done", actor_id, stats))
