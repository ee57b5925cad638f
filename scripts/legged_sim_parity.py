"""The legged example in the generic simulator vs its own: the shipped policy in both, same seeds and commands.

``RobotSimEnv`` built from config/robots/legged_ant.yaml's ``sim:`` section (core/sim/robot_env.py, with the
robot file's reward and episode sections: core/finetune/sim_env.py) against ``LeggedAnt``
(core/sim/legged.py), the calibration's episodes (scripts/train_legged.py gap: 250 policy steps, seeds
10000...; each episode's command is LeggedAnt's own draw for that seed, handed to RobotSimEnv):

- nominal: mean return, falls, mean forward speed;
- the legged gap: RobotSimEnv under config/gaps/legged_example_sim.yaml vs LeggedAnt under the RealityGapConfig
  preset config/gaps/legged_example.yaml, each as a share of its own nominal return;
- the observation from the same start: both reset with one seed (same joint noise, same command) and stepped
  with the same actions (the policy on LeggedAnt's observation), the largest difference per term at each step.

    PYTHONPATH=$PWD python scripts/legged_sim_parity.py --episodes 10 [--record]
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
ROBOT = ROOT / "config" / "robots" / "legged_ant.yaml"
GAP_SIM = ROOT / "config" / "gaps" / "legged_example_sim.yaml"
GAP_PRESET = ROOT / "config" / "gaps" / "legged_example.yaml"
POLICY = ROOT / "models" / "legged_ant_int8.onnx"
STEPS, SEED = 250, 10000
NOISE_PRESET = ("imu_noise_std", "obs_noise_std")
NOISE_SIM = ("gyro_noise", "orientation_noise", "joint_position_noise", "joint_velocity_noise")


def _legged(gap_fields: dict | None):
    from lowrl_ros.core.sim import legged
    from lowrl_ros.core.sim.reality_gap import RealityGapConfig

    return legged.LeggedAnt(max_episode_steps=STEPS, gap=RealityGapConfig(**gap_fields) if gap_fields else None)


def _generic(gap: dict | None):
    from lowrl_ros.core.finetune.sim_env import make_robot_env

    return make_robot_env(ROBOT, gap=gap, last_action="action")  # the artifact's convention


def run(act, env, seed: int, command: np.ndarray) -> tuple[dict, np.ndarray]:
    """One episode of at most STEPS policy steps: (return, fell, mean forward speed in the heading frame; the
    observations)."""
    obs, _ = env.reset(seed=seed, options={"command": command})
    total, fell, vx, seen = 0.0, False, [], [obs]
    for _ in range(STEPS):
        obs, reward, fell, truncated, info = env.step(act(obs))
        total += reward
        seen.append(obs)
        vx.append(info["velocity"][0] if "velocity" in info else env.unwrapped.sim.state_estimate()[0][0])
        if fell or truncated:
            break
    return {"return": total, "fell": bool(fell), "vx": float(np.mean(vx)), "steps": len(vx)}, np.array(seen)


def compare(act, episodes: int, legged_gap: dict | None, sim_gap: dict | None) -> dict:
    old, new = _legged(legged_gap), _generic(sim_gap)
    rows, identical = [], 0
    for k in range(episodes):
        _, info = _legged(None).reset(seed=SEED + k)  # LeggedAnt's command for this seed
        command = info["command"]
        (a, a_obs), (b, b_obs) = run(act, old, SEED + k, command), run(act, new, SEED + k, command)
        identical += int(np.array_equal(a_obs, b_obs))
        rows.append({"command": command.tolist(), "LeggedAnt": a, "RobotSimEnv": b})
    out = {"episodes": rows, "identical_observations": identical}
    for name in ("LeggedAnt", "RobotSimEnv"):
        out[name] = {"mean_return": float(np.mean([r[name]["return"] for r in rows])),
                     "falls": sum(r[name]["fell"] for r in rows),
                     "mean_vx": float(np.mean([r[name]["vx"] for r in rows])),
                     "return_sd": float(np.std([r[name]["return"] for r in rows]))}
    return out


def observation_gap(act, steps: int = 25) -> list[dict]:
    """Both envs reset with one seed and command, stepped with LeggedAnt's actions: max |difference| per term."""
    from lowrl_ros.core.sim import legged

    old, new = _legged(None), _generic(None)
    command = np.array([0.3, 0.0, 0.0])
    a_obs, _ = old.reset(seed=SEED, options={"command": command})
    b_obs, _ = new.reset(seed=SEED, options={"command": command})
    names = [n.split("[")[0] for n in legged.OBS_NAMES]
    terms = list(dict.fromkeys(names))
    out = []
    for step in range(steps + 1):
        diff = np.abs(a_obs - b_obs)
        if step in (0, 1, 2, 5, 10, 25) or step == steps:
            out.append({"step": step, **{t: float(diff[[n == t for n in names]].max()) for t in terms}})
        action = act(a_obs)
        a_obs = old.step(action)[0]
        b_obs = new.step(action)[0]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--record", action="store_true", help="write bench_results/sim2real/legged_generic_parity/")
    args = p.parse_args()
    from lowrl_ros.bench.sim2real import legged_gap_preset
    from lowrl_ros.core.runtime.engines import load_artifact

    policy = load_artifact(POLICY, engine="numpy")

    def act(obs):
        return policy.act(np.asarray(obs, dtype=np.float32)).astype(np.float32)

    preset, sim_gap = legged_gap_preset(GAP_PRESET), yaml.safe_load(GAP_SIM.read_text())["gap"]
    nominal = compare(act, args.episodes, None, None)
    gapped = compare(act, args.episodes, preset, sim_gap)
    # the gap without its sensor noise: no random draws left, so the field mapping is compared alone
    quiet = compare(act, args.episodes, {k: v for k, v in preset.items() if k not in NOISE_PRESET},
                    {k: v for k, v in sim_gap.items() if k not in NOISE_SIM})
    obs = observation_gap(act)
    lines = [f"The shipped policy {POLICY.relative_to(ROOT)} (numpy engine), {args.episodes} episodes of {STEPS} "
             f"steps, seeds {SEED}..., each with LeggedAnt's command for its seed.", "",
             "| simulator | nominal return (sd) | falls | mean vx (m/s) | gapped return (sd) | drop | falls "
             "| gap without noise | drop | falls |", "|---" * 10 + "|"]
    for name, gap in (("LeggedAnt", GAP_PRESET.name), ("RobotSimEnv", GAP_SIM.name)):
        n = nominal[name]
        cells = [f"{name} ({gap})", f"{n['mean_return']:.1f} ({n['return_sd']:.1f})", f"{n['falls']}/{args.episodes}",
                 f"{n['mean_vx']:.3f}"]
        for g in (gapped[name], quiet[name]):
            drop = 100 * (n["mean_return"] - g["mean_return"]) / n["mean_return"]
            sd = f" ({g['return_sd']:.1f})" if g is gapped[name] else ""
            cells += [f"{g['mean_return']:.1f}{sd}", f"{drop:.0f} %", f"{g['falls']}/{args.episodes}"]
        lines.append("| " + " | ".join(cells) + " |")
    same = {name: f"{res['identical_observations']}/{args.episodes}"
            for name, res in (("nominal", nominal), ("quiet", quiet), ("gapped", gapped))}
    lines += ["", f"Episodes whose every observation is the same in both, bit for bit: nominal {same['nominal']}, "
              f"gap without noise {same['quiet']}, gap {same['gapped']} (its noise is drawn from other streams)."]
    terms = [k for k in obs[0] if k != "step"]
    lines += ["", "Observation, same start and actions: max |LeggedAnt - RobotSimEnv| per term", "",
              "| step | " + " | ".join(terms) + " |", "|---" * (len(terms) + 1) + "|"]
    lines += ["| " + " | ".join([str(r["step"])] + [f"{r[t]:.2g}" for t in terms]) + " |" for r in obs]
    md = "\n".join(lines) + "\n"
    print(md)
    if args.record:
        from lowrl_ros.bench import record

        command = "python scripts/legged_sim_parity.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        path = record.write_result("sim2real", {"nominal": nominal, "gapped": gapped, "gap_without_noise": quiet,
                                               "observation": obs}, md,
                                   setting="legged_generic_parity", env="LeggedAnt", command=command,
                                   headline=f"nominal {nominal['LeggedAnt']['mean_return']:.1f} (LeggedAnt) vs "
                                            f"{nominal['RobotSimEnv']['mean_return']:.1f} (RobotSimEnv)")
        print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
