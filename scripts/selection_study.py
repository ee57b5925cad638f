"""How well does each version-selection rule keep the fine-tuner's best version? (docs/finetune.md)

Replays selection rules on fixed sequences of versions: the versions an earlier `lowrl bench
sim2real` run's fine-tuner made for one sim policy (RUN_DIR/finetune-*/versions/), in the order it
made them. Each version first runs EPISODES gapped Pendulum-v1 episodes from common start states
(its "pool": the return and the frozen kit critic's value of the start state, the score's
baseline); the pool means are the versions' true values. Then, REPS times, a fine-tuning run is
replayed with episodes drawn at random from the pools (the base runs 8 episodes, every later
version 5, judged after 3, rollbacks as on the robot), and the version each rule keeps is scored by
its true value minus the base's. The learner's feedback (a rollback restores another learner) is
left out: the rules see the same versions.

    .venv/bin/python scripts/selection_study.py runs/bench_sim2real/Pendulum-v1-s*-10000-* \
        runs/bench_sim2real_b256/Pendulum-v1-s*-10000-*

The rules: a version's score from its first 3 episodes or from all of them; plain returns or
returns adjusted for the start state (VersionTracker's within-version Theil-Sen fit); a new best
only when higher by z standard errors of the difference (z = 0: the highest score wins).
"""
from __future__ import annotations

import argparse
import glob
import math
from pathlib import Path

import numpy as np

RULES = {  # name: (adjusted, all episodes, z)
    "plain, first 3 (before 2026-11-24)": (False, False, 0.0),
    "adjusted, first 3": (True, False, 0.0),
    "adjusted, all": (True, True, 0.0),
    "adjusted, all, z=1": (True, True, 1.0),
    "adjusted, all, z=2 (VersionTracker)": (True, True, 2.0),
    "adjusted, all, z=3": (True, True, 3.0),
}


def pools_of(run_dir: Path, episodes: int) -> tuple[list[str], list[tuple[np.ndarray, np.ndarray]]]:
    from lowrl_ros.bench.sim2real import BENCH_GAP
    from lowrl_ros.core.runtime.engines import load_artifact
    from lowrl_ros.core.finetune.kit import load_kit
    from lowrl_ros.core.finetune.learner import FineTuner
    from lowrl_ros.core.finetune.config import FineTuneConfig
    from lowrl_ros.core.sim.reality_gap import RealityGapConfig, make_gapped_env

    ft_dir = sorted(glob.glob(str(run_dir / "finetune-*")))[0]
    tuner = FineTuner(load_kit(run_dir / "kit"), FineTuneConfig(), Path("/tmp") / f"selection_study_{run_dir.name}",
                      base_path=str(run_dir / "actor_int8.onnx"))
    paths = [str(run_dir / "actor_int8.onnx")] + sorted(glob.glob(ft_dir + "/versions/v*.onnx"))
    env = make_gapped_env("Pendulum-v1", RealityGapConfig(**BENCH_GAP))
    pools = []
    for path in paths:
        policy = load_artifact(path, engine="numpy")
        returns, values = [], []
        for k in range(episodes):
            obs, _ = env.reset(seed=70_000 + k)  # the same start states for every version
            values.append(tuner.start_value(obs))
            total, done = 0.0, False
            while not done:
                obs, r, term, trunc, _ = env.step(policy.act(obs).astype(np.float32))
                total, done = total + float(r), term or trunc
            returns.append(total)
        pools.append((np.array(returns), np.array(values)))
    return [Path(p).stem for p in paths], pools


def _fit(recs: dict) -> tuple[float, float]:
    """VersionTracker.baseline_fit on plain lists."""
    slopes, values = [], []
    for returns, base in recs.values():
        r, b = np.array(returns), np.array(base)
        values += list(b)
        i, j = np.triu_indices(len(b), 1)
        d = b[i] - b[j]
        keep = np.abs(d) > 1e-9
        slopes.append((r[i] - r[j])[keep] / d[keep])
    slopes = np.concatenate(slopes) if slopes else np.empty(0)
    if len(values) < 6 or slopes.size == 0:
        return 0.0, float(np.mean(values)) if values else 0.0
    return max(0.0, float(np.median(slopes))), float(np.mean(values))


def replay(pools, rng, adjusted: bool, all_episodes: bool, z: float, n: int = 3, slot: int = 5, first: int = 8,
           margin: float = 150.0) -> int:
    """One fine-tuning run's selection with episodes drawn from the pools; returns the kept version's index."""
    recs: dict[int, tuple[list, list]] = {}
    status: dict[int, str] = {}
    state = {"best": None, "current": 0}

    def score(v, fit):
        returns, base = recs[v]
        if len(returns) < n:
            return None
        r, b = (np.array(returns), np.array(base)) if all_episodes else (np.array(returns[:n]), np.array(base[:n]))
        return r.mean() - (fit[0] * (b.mean() - fit[1]) if adjusted else 0.0)

    def se(a, b, fit):
        squares = count = groups = 0
        for returns, base in recs.values():
            x = np.array(returns) - (fit[0] * np.array(base) if adjusted else 0.0)
            squares, count, groups = squares + ((x - x.mean()) ** 2).sum(), count + len(x), groups + 1
        if count - groups < 2:
            return 0.0
        return math.sqrt(squares / (count - groups)) * math.sqrt(1 / len(recs[a][0]) + 1 / len(recs[b][0]))

    def episode():
        cur = state["current"]
        returns, base = pools[cur]
        k = rng.integers(len(returns))
        recs.setdefault(cur, ([], []))
        recs[cur][0].append(returns[k])
        recs[cur][1].append(base[k])
        fit = _fit(recs) if adjusted else (0.0, 0.0)
        s = score(cur, fit)
        if s is None or (status.get(cur) == "good" and not all_episodes):
            return
        status[cur] = "good"
        scores = {v: score(v, fit) for v in status if status[v] == "good"}
        top = max(scores, key=scores.get)
        best = state["best"]
        if best not in scores or scores[top] - scores[best] > z * (se(top, best, fit) if z else 0.0):
            state["best"] = best = top
        if cur != best and s < scores[best] - margin:
            status[cur] = "rejected"
            state["current"] = best

    for _ in range(first):
        episode()
    for v in range(1, len(pools)):
        state["current"] = v
        for _ in range(slot):
            episode()
    return state["best"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="sim-policy run dirs of lowrl bench sim2real (with kit/)")
    parser.add_argument("--episodes", type=int, default=60, help="pool episodes per version (60)")
    parser.add_argument("--reps", type=int, default=200, help="replayed fine-tuning runs per rule (200)")
    args = parser.parse_args()
    total = {rule: [] for rule in RULES}
    print("| run | true value of each version (base first) | " + " | ".join(RULES) + " |")
    print("|---" * (len(RULES) + 2) + "|")
    for run_dir in args.runs:
        _, pools = pools_of(run_dir, args.episodes)
        true = np.array([r.mean() for r, _ in pools])
        cells = []
        for rule, (adjusted, all_episodes, z) in RULES.items():
            rng = np.random.default_rng(0)
            gains = np.array([true[replay(pools, rng, adjusted, all_episodes, z)] - true[0] for _ in range(args.reps)])
            total[rule].append(gains.mean())
            cells.append(f"{gains.mean():+.1f} (P[< -20] {np.mean(gains < -20):.2f})")
        print(f"| {run_dir.parent.name}/{run_dir.name} | {' '.join(str(int(round(t))) for t in true)} | "
              + " | ".join(cells) + " |", flush=True)
    print("| mean over runs | | " + " | ".join(f"{np.mean(v):+.1f}" for v in total.values()) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
