"""The child process of ``offboard_method: retrain`` (core/finetune/offboard_retrain.py): identify, then retrain.

Files in the job directory: ``job.json`` (what to do), ``recording.npz`` (the robot's base episodes) in;
``progress.jsonl`` (one JSON object per line: stage, steps, sim return, ETA), ``identified.json`` (the identified
gap, its uncertainty, what could not be identified) and the retrained artifact out. The caller writes
``result.json`` from what :func:`run` returns. torch is imported here, never by the trainer node's own process.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np


class Progress:
    """Appends one JSON line per report to ``progress.jsonl`` (the trainer node reads the last one)."""

    def __init__(self, path: Path) -> None:
        self.path, self.t0 = path, time.monotonic()

    def __call__(self, report: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({**report, "elapsed_s": round(time.monotonic() - self.t0, 1)}, default=float) + "\n")


def parent_gone(parent_pid: int):
    """should_stop for the retraining: the trainer node that started this job has exited (killed, restarted)."""
    return lambda: os.getppid() != parent_pid


RELEASE_MARGIN_S = 15.0  # from the retraining's last iteration to the release: its last evaluation, the gates (~6 s)
MIN_RETRAIN_S = 30.0  # less time than this left for the retraining: the job fails rather than release the base again


def run(d: Path, job: dict) -> dict:
    from types import SimpleNamespace

    from lowrl_ros.core.sim import robot_sysid
    from lowrl_ros.core.sim.robot_recording import recording_from_transitions

    progress = Progress(d / "progress.jsonl")
    release_within = float(job.get("release_within_s") or 0.0)
    deadline = time.monotonic() + release_within if release_within else None
    identified_path = d / "identified.json"
    if identified_path.is_file():
        found = json.loads(identified_path.read_text())
        progress({"stage": "identified", "resumed": True})
    else:
        progress({"stage": "identifying", "fraction": 0.0})
        with np.load(d / "recording.npz") as rec:
            batch = SimpleNamespace(**{k: rec[k] for k in rec.files})
        recording = recording_from_transitions(job["robot_file"], batch, first_is_start=True)
        settings = robot_sysid.IdentifySettings(**job["identify"]) if job.get("identify") else None
        ident = robot_sysid.identify(job["robot_file"], recording, settings, seed=int(job["seed"]),
                                     progress=lambda stage, f: progress({"stage": "identifying", "step": stage,
                                                                         "fraction": float(f)}))
        found = {**ident.to_dict(), "describe": ident.gap.describe("the nominal model")}
        tmp = d / "identified.tmp.json"
        tmp.write_text(json.dumps(found, indent=1, default=float))
        os.replace(tmp, identified_path)
    return _retrain(d, job, found, progress, deadline)


def spread_of(found: dict, priors: dict, sigmas: float) -> dict[str, float]:
    """Per gap parameter, the share of its prior range the retraining randomizes over: +- ``sigmas`` of its
    identified uncertainty (the widest entry of a per-joint one); the whole prior where it was not identified."""
    spread: dict[str, float] = {}
    for key, (lo, hi) in priors.items():
        if hi <= lo:
            continue
        if not found.get("identifiable", {}).get(key, True):
            spread[key] = 1.0
            continue
        std = np.max(np.abs(np.atleast_1d(np.asarray(found.get("std", {}).get(key, 0.0), dtype=np.float64))))
        spread[key] = float(min(1.0, 2.0 * sigmas * std / (hi - lo))) if np.isfinite(std) else 1.0
    return spread


def _retrain(d: Path, job: dict, found: dict, progress: Progress, deadline: float | None = None) -> dict:
    """Retrain in the identified simulator; with a ``deadline`` (time.monotonic()), PPO's wall-clock budget is what
    is left of it before the release margin."""
    import dataclasses

    from lowrl_ros.core.retrain import retrain
    from lowrl_ros.core.runtime.robot_file import load_robot_file
    from lowrl_ros.core.sim.robot_sim import Gap, parse_sim

    settings = retrain.RetrainSettings(**{**job.get("ppo", {}), "seed": int(job["seed"])})
    if deadline is not None:
        left = deadline - time.monotonic() - RELEASE_MARGIN_S
        if left < MIN_RETRAIN_S:
            return {"ok": False, "reason": f"release_within_s {job['release_within_s']:g} s: the identification "
                                           f"left {max(left, 0.0):.0f} s for the retraining (it needs "
                                           f"{MIN_RETRAIN_S:g} s and {RELEASE_MARGIN_S:g} s for the gates); raise "
                                           f"retrain.release_within_s or lower identify.search_steps"}
        settings = dataclasses.replace(settings, budget_s=min(left, settings.budget_s or left))
    gap = Gap.from_dict(found["gap"], "identified gap")
    priors = dict(parse_sim(load_robot_file(job["robot_file"]))[0].gap_priors)
    spread = spread_of(found, priors, float(job.get("sigmas", 2.0)))
    commands, shown = None, {}
    if settings.recorded_command_share > 0:  # the commands the robot was given while it was recorded
        from lowrl_ros.core.sim.robot_recording import recorded_commands

        with np.load(d / "recording.npz") as rec:
            commands = recorded_commands(job["robot_file"], rec["obs"])
        shown = {"recorded_commands": len(commands), "recorded_command_share": settings.recorded_command_share}
    progress({"stage": "retraining", "steps": 0, "total_steps": settings.total_steps, "spread": spread,
              "budget_s": settings.budget_s, **shown})
    out = d / f"v{int(job['version']):06d}_retrained.onnx"
    result = retrain.retrain(job["base_path"], job["robot_file"], gap, spread, settings, out, int(job["version"]),
                             progress=progress, should_stop=parent_gone(int(job["parent_pid"])), commands=commands)
    return {"ok": bool(result.ok), "reason": result.reason, "path": str(result.path) if result.path else None,
            "sim_return_before": result.sim_return_before, "sim_return_after": result.sim_return_after,
            "steps": result.steps, "wall_s": result.wall_s}
