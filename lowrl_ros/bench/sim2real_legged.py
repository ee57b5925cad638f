"""`lowrl bench sim2real --envs LeggedAnt --methods sysid`: real-to-sim-to-real on the legged robot.

Instead of learning on the robot, the robot's steps IDENTIFY its gap and the policy improves off-board:

1. **Record** K robot steps (``--robot-steps``): the deployed sim policy walks the gapped robot (numpy
   engine, as deployed) in its usual 250-step episodes; observations, actions sent and episode starts
   are logged, nothing else (not the gap, not the simulator's state).
2. **Identify** (lowrl_ros.core.sim.sysid): the sensor biases and noise in closed form from the
   episode starts, the physics (mass, friction, motor strength, PD stiffness, latency) by replaying the
   first ``--sysid-window`` actions of ``--sysid-episodes`` episodes open loop with the cross-entropy
   method.
3. **Improve off-board**: PPO continued from models/legged_ant_ppo.zip (the checkpoint the shipped
   artifact came from) in the simulator with the identified physics and noise, for ``--sysid-ppo-steps``
   simulator steps (not robot steps); imported to int8 as the shipped artifact was.
4. **Deploy**: the identified sensor biases folded into the artifact's ``obs_offset``; that artifact is
   judged on the gapped robot as every method is.

The stages' own figures go into the result JSON (``sysid``): the identified fields against the true
ones (read only to report them), the return of the shipped policy with the biases folded in (stage
4 alone) and of the PPO policy without folding (stage 3 alone).
"""
from __future__ import annotations

import argparse
import dataclasses
import io
import time
from pathlib import Path

import numpy as np


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The sysid method's options (only used with ``--methods sysid``)."""
    parser.add_argument("--sysid-episodes", type=int, default=16,
                        help="--methods sysid: recorded episodes replayed to identify the physics (16)")
    parser.add_argument("--sysid-window", type=int, default=50,
                        help="--methods sysid: policy steps replayed from each episode start (50 = 2 s)")
    parser.add_argument("--sysid-iterations", type=int, default=8,
                        help="--methods sysid: cross-entropy iterations of 20 candidates each (8)")
    parser.add_argument("--sysid-ppo-steps", type=int, default=100_000,
                        help="--methods sysid: off-board PPO steps in the identified simulator (100000; "
                             "0: only fold the sensor biases into the shipped policy)")
    parser.add_argument("--sysid-ablate-physics", action="store_true",
                        help="--methods sysid, an ablation: PPO in the simulator with the identified sensor noise "
                             "but NOT the identified physics (what the extra PPO steps alone are worth)")


def _fp32_dense_bytes(path: str | Path) -> int:
    """Bytes of ``torch.save`` of an fp32 dense state_dict of the artifact's network (the bench's yardstick),
    a residual head's layers included."""
    import torch

    from lowrl_ros.core.runtime.artifact import parse_artifact, read_artifact_bytes

    parsed = parse_artifact(read_artifact_bytes(path), str(path))
    layers = parsed.base_weights().layers + (parsed.residual.layers if parsed.residual is not None else [])
    state = {}
    for i, (w, b) in enumerate(layers):
        state[f"{i}.weight"] = torch.tensor(np.asarray(w), dtype=torch.float32)
        state[f"{i}.bias"] = torch.tensor(np.asarray(b), dtype=torch.float32)
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getbuffer().nbytes


def ppo_in_sim(gap, steps: int, seed: int, out: Path, ppo_zip: Path, env_kwargs: dict) -> Path:
    """PPO continued from ``ppo_zip`` in the simulator with ``gap`` (scripts/train_legged.py's settings: 8 envs,
    rewards normalised), imported to an int8 artifact at ``out`` the way the shipped artifact was."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from lowrl_ros.core.importers.registry import ImportOptions, load_source, write_imported
    from lowrl_ros.core.sim import legged

    torch.set_num_threads(1)  # ~one core: the machine is shared
    env = VecNormalize(make_vec_env(legged.make, n_envs=8, seed=seed, env_kwargs={**env_kwargs, "gap": gap}),
                       norm_obs=False, norm_reward=True, gamma=0.99)
    model = PPO.load(ppo_zip, env=env, device="cpu", seed=seed)
    model.learn(total_timesteps=steps)
    model.save(out.with_suffix(".zip"))
    env.close()
    imported = load_source(out.with_suffix(".zip"), "sb3", ImportOptions(control_period_s=0.04))
    imported.contract = dataclasses.replace(imported.contract, obs_names=legged.OBS_NAMES,
                                            action_names=legged.JOINTS, env_id=legged.ENV_ID,
                                            provenance={**imported.contract.provenance,
                                                        "trained_by": "bench sim2real --methods sysid (SB3 PPO in "
                                                                      "the identified simulator)"})
    return write_imported(imported, out, int8=True)


def sysid_method(run_dir: Path, gap, seed: int, args: argparse.Namespace, ppo_zip: Path, env_kwargs: dict,
                 returns) -> dict:
    """Record, identify, improve off-board, fold, for one seed; a dict with fine_tune's keys plus ``sysid``.

    ``returns(path, gap)`` is the bench's evaluation (the same seeded episodes as every figure of the run)."""
    import psutil

    from lowrl_ros.core.runtime.engines import load_artifact
    from lowrl_ros.core.sim import sysid
    from lowrl_ros.core.sim.reality_gap import make_gapped_env

    proc = psutil.Process()
    out_dir = run_dir / (f"sysid-s{seed}-k{args.robot_steps}-e{args.sysid_episodes}-w{args.sysid_window}"
                         f"-i{args.sysid_iterations}-p{args.sysid_ppo_steps}"
                         + ("-nophysics" if args.sysid_ablate_physics else ""))
    out_dir.mkdir(parents=True, exist_ok=True)
    base = run_dir / "actor_int8.onnx"
    policy = load_artifact(base, engine="numpy")
    t0 = time.perf_counter()
    env = make_gapped_env("LeggedAnt", gap, **env_kwargs)
    rec = sysid.record(lambda o: policy.act(np.asarray(o, dtype=np.float32)), env, args.robot_steps,
                       seed=seed + 50_000)  # robot episodes apart from the evaluation seeds, as fine_tune's
    env.close()
    record_s = time.perf_counter() - t0
    found = sysid.identify(rec, window=args.sysid_window, episodes=args.sysid_episodes,
                           iterations=args.sysid_iterations, seed=seed, log=lambda m: print(m, flush=True))
    print(f"  sysid: identified {found.gap().describe()} ({found.wall_s} s, {found.evaluations} replays)",
          flush=True)
    folded_base = sysid.fold_sensor_offsets(base, out_dir / "shipped_folded_int8.onnx", found.sensors)
    stages = {"folded_shipped": float(np.mean(returns(folded_base, gap)))}
    ppo_s = 0.0
    final = folded_base
    if args.sysid_ppo_steps > 0:
        t1 = time.perf_counter()
        print(f"  sysid: PPO from {ppo_zip} in the identified simulator, {args.sysid_ppo_steps} steps", flush=True)
        sim_gap = found.gap(biases=False)
        if args.sysid_ablate_physics:
            from lowrl_ros.core.sim.reality_gap import RealityGapConfig

            sim_gap = RealityGapConfig(imu_noise_std=sim_gap.imu_noise_std, obs_noise_std=sim_gap.obs_noise_std)
        print(f"  sysid: the off-board simulator's gap: {sim_gap.describe()}", flush=True)
        ppo_art = ppo_in_sim(sim_gap, args.sysid_ppo_steps, seed, out_dir / "ppo_int8.onnx", ppo_zip, env_kwargs)
        ppo_s = time.perf_counter() - t1
        stages["ppo_unfolded"] = float(np.mean(returns(ppo_art, gap)))
        final = sysid.fold_sensor_offsets(ppo_art, out_dir / "actor_int8.onnx", found.sensors)
    wall = time.perf_counter() - t0
    size = Path(final).stat().st_size
    truth = sysid.true_fields(gap)
    return {"best_version": 2, "best_path": str(final), "versions": 2, "updates": 0, "wall_s": round(wall, 1),
            "algorithm": "sysid", "updates_per_s": float("nan"), "learner_notes": [],
            "rss_mb_max": round(proc.memory_info().rss / 2**20, 1), "episode_returns": [],
            "version_bytes": [size], "fp32_state_dict_bytes": _fp32_dense_bytes(final),
            "statuses": {}, "version_paths": {2: str(final)}, "out_dir": str(out_dir),
            "robot_steps_used": rec.steps,
            "sysid": {"identified": found.to_dict(), "true": truth, "stage_returns": stages,
                      "record_s": round(record_s, 1), "identify_s": found.wall_s, "ppo_s": round(ppo_s, 1),
                      "episodes_recorded": len(rec.observations)}}
