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


def run(d: Path, job: dict) -> dict:
    from lowrl_ros.core.sim import robot_sysid

    progress = Progress(d / "progress.jsonl")
    identified_path = d / "identified.json"
    if identified_path.is_file():
        found = json.loads(identified_path.read_text())
        progress({"stage": "identified", "resumed": True})
    else:
        progress({"stage": "identifying", "fraction": 0.0})
        rec = np.load(d / "recording.npz")
        recording = robot_sysid.recording_from_arrays(
            job["robot_file"], obs=rec["obs"], action=rec["action"], next_obs=rec["next_obs"],
            done=rec["terminated"] | rec["truncated"], stamp=rec["stamp"], first_is_start=True)
        settings = robot_sysid.IdentifySettings(**job["identify"]) if job.get("identify") else None
        ident = robot_sysid.identify(job["robot_file"], recording, settings, seed=int(job["seed"]),
                                     progress=lambda stage, f: progress({"stage": "identifying", "step": stage,
                                                                         "fraction": float(f)}))
        found = {**ident.to_dict(), "describe": _describe_gap(ident.gap)}
        tmp = d / "identified.tmp.json"
        tmp.write_text(json.dumps(found, indent=1, default=float))
        os.replace(tmp, identified_path)
    return _retrain(d, job, found, progress)


def _describe_gap(gap) -> str:
    from lowrl_ros.core.sim.robot_sim import Gap

    nominal = Gap().as_dict()
    return ", ".join(f"{k}={v}" for k, v in gap.as_dict().items() if v != nominal.get(k)) or "the nominal model"


def _retrain(d: Path, job: dict, found: dict, progress: Progress) -> dict:
    from lowrl_ros.core.sim.robot_sim import Gap
    from lowrl_ros.core.train import retrain

    settings = retrain.RetrainSettings(**{**job.get("ppo", {}), "seed": int(job["seed"])})
    gap = Gap.from_dict(found["gap"], "identified gap")
    out = d / f"v{int(job['version']):06d}_retrained.lowrl"
    result = retrain.retrain(job["base_path"], job["robot_file"], gap, found.get("std", {}), settings, out,
                             int(job["version"]), progress=progress, should_stop=parent_gone(int(job["parent_pid"])))
    return {"ok": bool(result.ok), "reason": result.reason, "path": str(result.path),
            "sim_return_before": result.sim_return_before, "sim_return_after": result.sim_return_after,
            "steps": result.steps, "wall_s": result.wall_s}
