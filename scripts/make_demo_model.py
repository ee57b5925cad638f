#!/usr/bin/env python3
"""Make a shipped demo policy: SB3 SAC on Pendulum-v1 (or InvertedPendulum-v5), via `lowrl import-sb3`.

Reproducible (fixed seed, one torch thread). Writes, under --out (default models/), with PREFIX
"pendulum" for Pendulum-v1 and "inverted_pendulum" for InvertedPendulum-v5:

- PREFIX_sac_int8.onnx: the deployed artifact (int8, dense), tier "full";
- PREFIX_sac.lowrl: a two-tier bundle: "full" (int8) and "lite": a obs-32-32-act student distilled
  from the deployed full artifact by behaviour cloning on states it visits (with exploration noise
  for coverage), then int8. Pruning the 256-wide actor by magnitude without retraining does not
  work here: measured, 50-90% pruned actors score -700 to -1250, so the lite tier is distilled;
  the project's `lowrl distill` does this properly (RLx2/sparse students);
- PREFIX_sac.json: how they were made and the mean return of every DEPLOYED artifact, evaluated
  through lowrl's own runtime in Pendulum-v1 (not the fp32 SB3 model that was trained).

    .venv/bin/python scripts/make_demo_model.py            # Pendulum-v1, ~2-3 min on 2 cores
    .venv/bin/python scripts/make_demo_model.py --env InvertedPendulum-v5 --steps 10000
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "Pendulum-v1"  # set from --env in main()
PREFIXES = {"Pendulum-v1": "pendulum", "InvertedPendulum-v5": "inverted_pendulum"}


def evaluate(act, episodes: int, seed: int) -> list[float]:
    """Undiscounted return of ``act(obs) -> action`` over seeded episodes."""
    import gymnasium as gym

    env = gym.make(ENV_ID)
    returns = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def train(steps: int, seed: int, model_zip: Path) -> float:
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    torch.set_num_threads(1)  # the machine is shared; one thread is also what makes runs repeatable

    class Progress(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % 100 == 0 or self.num_timesteps == steps:
                done = self.num_timesteps / steps
                bar = "#" * int(30 * done)
                print(f"\rtraining SAC on {ENV_ID}: [{bar:<30}] {self.num_timesteps}/{steps}", end="", flush=True)
            return True

    model = SAC("MlpPolicy", ENV_ID, seed=seed, device="cpu", verbose=0)
    start = time.perf_counter()
    model.learn(total_timesteps=steps, callback=Progress())
    seconds = time.perf_counter() - start
    print()
    model.save(model_zip)
    return seconds


def distill_lite(teacher_path: Path, out: Path, hidden: list[int], seed: int, episodes: int = 40,
                 steps: int = 3000) -> Path:
    """Behaviour-clone the deployed teacher artifact into a small int8 student (tier "lite")."""
    import dataclasses

    import gymnasium as gym
    import torch

    from lowrl_ros.core.runtime.artifact import MlpWeights, save_artifact
    from lowrl_ros.core.runtime.engines import load_artifact

    teacher = load_artifact(teacher_path)
    c = teacher.contract
    low, high = np.array(c.action_low), np.array(c.action_high)
    rng = np.random.default_rng(seed)
    env = gym.make(ENV_ID)
    states = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + 20_000 + ep)
        done = False
        while not done:
            states.append(obs)
            # Noisy actions visit states just off the teacher's path, where the student must still act well.
            action = np.clip(teacher.act(obs) + rng.normal(0, 0.3 * (high - low) / 2), low, high)
            obs, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
    env.close()
    x = np.array(states, np.float32)
    y = (np.stack([teacher.act(s) for s in x]) - (high + low) / 2) / ((high - low) / 2)  # tanh space
    torch.manual_seed(seed)
    dims = [x.shape[1], *hidden, y.shape[1]]
    layers = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU() if i < len(dims) - 2 else torch.nn.Tanh()]
    net = torch.nn.Sequential(*layers)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.float32))
    for step in range(steps):
        idx = torch.randint(0, len(xt), (256,))
        loss = torch.nn.functional.mse_loss(net(xt[idx]), yt[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 300 == 0 or step == steps - 1:
            print(f"\rdistilling lite {dims}: step {step + 1}/{steps}, loss {loss.item():.4f}", end="", flush=True)
    print()
    linears = [m for m in net if isinstance(m, torch.nn.Linear)]
    weights = MlpWeights([(m.weight.detach().numpy(), m.bias.detach().numpy()) for m in linears])
    provenance = {**c.provenance, "tool": "make_demo_model.py distill_lite", "teacher_sha256": teacher.sha256}
    return save_artifact(out, weights, dataclasses.replace(c, tier="lite", provenance=provenance), int8=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=list(PREFIXES), default="Pendulum-v1", help="gymnasium environment")
    parser.add_argument("--steps", type=int, default=5000, help="SAC environment steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lite-hidden", type=int, nargs="+", default=[32, 32], help="hidden sizes of the lite student")
    parser.add_argument("--sb3-zip", type=Path, default=None, help="reuse this trained SB3 model instead of training")
    parser.add_argument("--episodes", type=int, default=10, help="evaluation episodes per artifact")
    parser.add_argument("--out", type=Path, default=ROOT / "models")
    parser.add_argument("--save-sb3-zip", type=Path, default=None, help="also keep the trained SB3 zip here")
    args = parser.parse_args(argv)
    global ENV_ID
    ENV_ID = args.env
    prefix = PREFIXES[args.env]

    from stable_baselines3 import SAC

    from lowrl_ros.core.importers.sb3 import import_sb3
    from lowrl_ros.core.runtime.engines import load_artifact
    from lowrl_ros.core.runtime.bundle import load_bundle, save_bundle

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.sb3_zip:
            model_zip, train_s = args.sb3_zip, float("nan")
        else:
            model_zip = args.save_sb3_zip or tmp / f"{prefix}_sac_sb3.zip"
            train_s = train(args.steps, args.seed, model_zip)
        full = import_sb3(model_zip, args.out / f"{prefix}_sac_int8.onnx", int8=True, env_id=ENV_ID)
        eval_seed = 10_000  # episodes the policy never trained on
        lite = distill_lite(full, tmp / "lite.onnx", args.lite_hidden, args.seed)
        bundle_path = save_bundle(args.out / f"{prefix}_sac.lowrl", {"full": full, "lite": lite})
        sb3_model = SAC.load(model_zip, device="cpu")
        results = {"sb3_fp32_predict": evaluate(lambda o: sb3_model.predict(o, deterministic=True)[0],
                                                args.episodes, eval_seed)}
        deployed = load_artifact(full)
        results[f"{prefix}_sac_int8.onnx"] = evaluate(deployed.act, args.episodes, eval_seed)
        bundle = load_bundle(bundle_path)
        for name, policy in bundle.policies.items():
            results[f"{prefix}_sac.lowrl:{name}"] = evaluate(policy.act, args.episodes, eval_seed)
        report = {
            "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
            "env_id": ENV_ID,
            "algo": "SB3 SAC, default hyperparameters (MlpPolicy 256x256)",
            "steps": args.steps,
            "seed": args.seed,
            "train_seconds": None if args.sb3_zip else round(train_s, 1),
            "python": platform.python_version(),
            "eval_episodes": args.episodes,
            "eval_seeds": f"{eval_seed}..{eval_seed + args.episodes - 1}",
            "mean_return": {k: round(float(np.mean(v)), 1) for k, v in results.items()},
            "std_return": {k: round(float(np.std(v)), 1) for k, v in results.items()},
            "files": {p.name: {"bytes": p.stat().st_size} for p in (full, bundle_path)},
            "lite": {"hidden": args.lite_hidden, "distilled_from": full.name, "macs": bundle.policies["lite"].macs,
                     "full_macs": bundle.policies["full"].macs},
        }
    (args.out / f"{prefix}_sac.json").write_text(json.dumps(report, indent=2) + "\n")
    how = f"reused {args.sb3_zip}" if args.sb3_zip else f"trained {args.steps} steps in {train_s:.0f} s"
    print(f"{how}; mean return over {args.episodes} episodes:")
    for k, v in report["mean_return"].items():
        print(f"  {k:32s} {v:8.1f} ± {report['std_return'][k]:.1f}")
    print(f"wrote {full}, {bundle_path}, {args.out / f'{prefix}_sac.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
