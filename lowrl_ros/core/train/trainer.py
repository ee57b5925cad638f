"""The training loop: collect, learn, evaluate, log, checkpoint.

``Trainer(cfg, run_dir).run()`` is the whole of `lowrl train` without the command line. A run
directory holds:

* ``config.yaml``    the resolved configuration (a valid preset: re-run with ``--config``);
* ``progress.csv``   one row per evaluation (steps, wall-clock, returns, sparsity, buffer, timing);
* ``sparsity.csv``   density of every layer at every evaluation (for the report's sparsity plot);
* ``run.json``       costs (parameters per layer, FLOPs), timings per env/gradient step, result;
* ``checkpoint.pt``  see checkpoint.py;
* ``tensorboard/``   with ``tensorboard: true``, progress.csv's numbers and the layer densities as
  TensorBoard scalars (``tensorboard --logdir RUN_DIR``), flushed at every evaluation.
"""
from __future__ import annotations

import csv
import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lowrl_ros.core.config import gym_env_id
from lowrl_ros.core.train.agent import OffPolicyAgent
from lowrl_ros.core.train.checkpoint import load_checkpoint, save_checkpoint
from lowrl_ros.core.train.config import TrainConfig
from lowrl_ros.core.train.costs import cost_summary, reference_dense_flops
from lowrl_ros.core.train.progress import ProgressLine
from lowrl_ros.core.train.replay import ReplayBuffer, policy_distance

PROGRESS_FIELDS = ["env_steps", "gradient_steps", "wall_s", "eval_return", "eval_return_std", "train_return",
                   "actor_density", "critic_density", "buffer_size", "nstep",
                   "policy_distance", "topology_updates", "ms_per_env_step", "ms_per_gradient_step"]


def make_env(env_id: str):
    """gymnasium.make with a message that says what to do when the id is wrong or unsupported."""
    import gymnasium as gym

    try:
        env = gym.make(gym_env_id(env_id))
    except gym.error.Error as exc:
        raise ValueError(f"cannot make environment {env_id!r} ({exc}); use a gymnasium id such as "
                         "Pendulum-v1, InvertedPendulum-v5, HalfCheetah-v5 or Hopper-v5") from None
    if not isinstance(env.action_space, gym.spaces.Box) or len(env.observation_space.shape) != 1:
        raise ValueError(f"{env_id} needs a continuous (Box) action space and a flat observation; "
                         "SAC/TD3 here train continuous-control tasks only")
    return env


def make_agent(cfg: TrainConfig, obs_dim: int, act_dim: int) -> OffPolicyAgent:
    from lowrl_ros.core.train.sac import SACAgent
    from lowrl_ros.core.train.td3 import TD3Agent

    return (SACAgent if cfg.algo == "sac" else TD3Agent)(cfg, obs_dim, act_dim)


@dataclass
class TrainResult:
    """What a finished run reports."""

    run_dir: Path
    env_steps: int
    wall_s: float
    last_eval_return: float
    best_eval_return: float
    steps_to_target: int | None  # first evaluation at or above cfg.stop_return
    wall_to_target: float | None
    eval_s: float = 0.0  # wall-clock spent in evaluations (subtract it for training time alone)


def _density(masker) -> float:
    """Overall weight density of a network (non-zero weights / weights), 1.0 when dense."""
    if masker is None:
        return 1.0
    return sum(float(m.sum().item()) for m in masker.masks) / sum(m.numel() for m in masker.masks)


def _tensorboard_writer(log_dir: Path, env_steps: int):
    """A SummaryWriter that drops earlier events past ``env_steps`` (a resumed run writes them again)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ValueError("tensorboard=true needs the tensorboard package (pinned in requirements.txt: "
                         "pip install tensorboard==2.21.0), or train with --no-tensorboard") from None
    return SummaryWriter(str(log_dir), purge_step=env_steps + 1 if env_steps else None)


class Trainer:
    """One training run into ``run_dir``.

    Args:
        cfg: the configuration.
        run_dir: output directory (created).
        resume: continue from ``run_dir/checkpoint.pt`` instead of starting fresh.
    """

    def __init__(self, cfg: TrainConfig, run_dir: str | Path, resume: bool = False) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        torch.set_num_threads(cfg.threads)
        self.env = make_env(cfg.env_id)
        self.eval_env = make_env(cfg.env_id)
        space = self.env.action_space
        self.low = space.low.astype(np.float64)
        self.high = space.high.astype(np.float64)
        self.obs_dim = self.env.observation_space.shape[0]
        self.act_dim = space.shape[0]
        self.agent = make_agent(cfg, self.obs_dim, self.act_dim)
        self.buffer = ReplayBuffer(self.obs_dim, self.act_dim, min(cfg.buffer_size, cfg.total_steps))
        self.rng = np.random.default_rng(cfg.seed)
        self.env_steps = 0
        self.episodes = 0
        self.wall_before = 0.0  # wall-clock of earlier sessions of a resumed run
        self.env_time = 0.0
        self.update_time = 0.0
        self.eval_time = 0.0
        self.best_eval = -math.inf
        self.last_eval = math.nan
        self.last_distance = math.nan
        self.steps_to_target: int | None = None
        self.wall_to_target: float | None = None
        self.recent_returns: list[float] = []
        if resume:
            self._restore(load_checkpoint(self.run_dir))
        else:
            for name in ("progress.csv", "sparsity.csv"):
                (self.run_dir / name).unlink(missing_ok=True)
            shutil.rmtree(self.run_dir / "tensorboard", ignore_errors=True)
            self._write_config()
        self.tb = _tensorboard_writer(self.run_dir / "tensorboard", self.env_steps) if cfg.tensorboard else None

    # --- bookkeeping ------------------------------------------------------------------------------
    def _write_config(self) -> None:
        import yaml

        (self.run_dir / "config.yaml").write_text(yaml.safe_dump(self.cfg.to_dict(), sort_keys=False))

    def _restore(self, state: dict) -> None:
        saved = TrainConfig.from_dict(state["config"])
        for key in ("algo", "env_id", "variant", "hidden", "depth", "actor_sparsity", "critic_sparsity"):
            if getattr(saved, key) != getattr(self.cfg, key):
                raise ValueError(f"cannot resume: checkpoint has {key}={getattr(saved, key)!r}, the config has "
                                 f"{getattr(self.cfg, key)!r}; resume with the run's own config.yaml")
        self.agent.load_state_dict(state["agent"])
        self.buffer.load_state_dict(state["buffer"])
        self.rng.bit_generator.state = state["numpy_rng"]
        for key in ("env_steps", "episodes", "env_time", "update_time", "eval_time", "best_eval", "last_eval",
                    "steps_to_target", "wall_to_target"):
            setattr(self, key, state["loop"][key])
        self.wall_before = state["loop"]["wall"]

    def _checkpoint(self, wall: float) -> None:
        loop = {key: getattr(self, key) for key in ("env_steps", "episodes", "env_time", "update_time", "eval_time",
                                                     "best_eval", "last_eval", "steps_to_target",
                                                     "wall_to_target")}
        loop["wall"] = wall
        save_checkpoint(self.run_dir, {"config": self.cfg.to_dict(), "agent": self.agent.state_dict(),
                                       "buffer": self.buffer.state_dict(),
                                       "numpy_rng": self.rng.bit_generator.state, "loop": loop})

    def to_env_action(self, a: np.ndarray) -> np.ndarray:
        return self.low + (np.asarray(a, dtype=np.float64) + 1.0) * 0.5 * (self.high - self.low)

    def evaluate(self) -> tuple[float, float]:
        """Mean and std of the deterministic policy's return over ``eval_episodes`` fixed-seed episodes."""
        returns = []
        for i in range(self.cfg.eval_episodes):
            # Same start states at every evaluation, so curves compare policies, not luck.
            obs, _ = self.eval_env.reset(seed=self.cfg.seed + 10_000 + i)
            total, done = 0.0, False
            while not done:
                a = self.agent.deterministic(obs)
                obs, r, term, trunc, _ = self.eval_env.step(self.to_env_action(a))
                total += float(r)
                done = term or trunc
            returns.append(total)
        return float(np.mean(returns)), float(np.std(returns))

    def _nstep(self) -> int:
        # Delayed multi-step TD (RLx2 §4.2): 1-step until nstep_delay gradient steps have passed.
        if self.cfg.uses_multistep and self.agent.gradient_steps >= self.cfg.nstep_delay:
            return self.cfg.nstep
        return 1

    def _check_buffer(self) -> None:
        """RLx2's dynamic buffer: drop the oldest data when it is far from the current policy."""
        obs, behaviour = self.buffer.oldest(self.cfg.buffer_check_size)
        self.last_distance = policy_distance(self.agent.deterministic(obs), behaviour)
        if self.last_distance > self.cfg.buffer_threshold:
            self.buffer.shrink(self.cfg.buffer_drop_fraction, self.cfg.buffer_min)

    def _log_eval(self, wall: float, ret: float, std: float) -> None:
        a, c = self.agent.actor_masker, self.agent.critic_masker
        grad_steps = max(self.agent.gradient_steps, 1)
        row = {"env_steps": self.env_steps, "gradient_steps": self.agent.gradient_steps, "wall_s": round(wall, 3),
               "eval_return": round(ret, 3), "eval_return_std": round(std, 3),
               "train_return": round(float(np.mean(self.recent_returns[-10:])), 3) if self.recent_returns else "",
               "actor_density": round(_density(a), 5), "critic_density": round(_density(c), 5),
               "buffer_size": len(self.buffer), "nstep": self._nstep(),
               "policy_distance": "" if math.isnan(self.last_distance) else round(self.last_distance, 5),
               "topology_updates": self.agent.topology_updates,
               "ms_per_env_step": round(1e3 * self.env_time / max(self.env_steps, 1), 4),
               "ms_per_gradient_step": round(1e3 * self.update_time / grad_steps, 4)}
        self._append_csv("progress.csv", PROGRESS_FIELDS, [row])
        rows = []
        for name, net, masker in (("actor", self.agent.actor_net, a), ("critic", self.agent.critic_net, c)):
            for i, w in enumerate(net.weights):
                dens = masker.masks[i].mean().item() if masker else 1.0
                rows.append({"env_steps": self.env_steps, "network": name, "layer": i,
                             "shape": "x".join(map(str, w.shape)), "density": round(dens, 5)})
        self._append_csv("sparsity.csv", ["env_steps", "network", "layer", "shape", "density"], rows)
        if self.tb is not None:
            for key, value in row.items():
                if key != "env_steps" and value != "":
                    self.tb.add_scalar(f"train/{key}", value, self.env_steps)
            for r in rows:
                self.tb.add_scalar(f"density/{r['network']}/{r['layer']}", r["density"], self.env_steps)
            self.tb.flush()

    def _append_csv(self, name: str, fields: list[str], rows: list[dict]) -> None:
        path = self.run_dir / name
        new = not path.exists()
        with path.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            if new:
                writer.writeheader()
            writer.writerows(rows)

    # --- the loop ---------------------------------------------------------------------------------
    def run(self) -> TrainResult:
        """Train until ``total_steps`` (or ``stop_return``); write logs, run.json and a checkpoint."""
        cfg = self.cfg
        t0 = time.perf_counter() - self.wall_before
        bar = ProgressLine(cfg.total_steps, cfg.progress)
        obs, _ = self.env.reset(seed=cfg.seed + self.episodes)
        self.env.action_space.seed(cfg.seed)
        ep_return = 0.0
        stop = False
        while self.env_steps < cfg.total_steps and not stop:
            ts = time.perf_counter()
            if self.env_steps < cfg.warmup_steps:
                action = self.rng.uniform(-1.0, 1.0, self.act_dim).astype(np.float32)
                behaviour = action  # the warm-up policy is the uniform one; its sample is its action
            else:
                action, behaviour = self.agent.explore(obs)
            next_obs, r, term, trunc, _ = self.env.step(self.to_env_action(action))
            self.buffer.add(obs, action, float(r), next_obs, bool(term), bool(trunc), behaviour)
            ep_return += float(r)
            self.env_steps += 1
            if term or trunc:
                self.episodes += 1
                self.recent_returns.append(ep_return)
                ep_return = 0.0
                obs, _ = self.env.reset()
            else:
                obs = next_obs
            tu = time.perf_counter()
            self.env_time += tu - ts
            if self.env_steps > cfg.warmup_steps:
                nstep = self._nstep()
                for _ in range(cfg.updates_per_step):
                    self.agent.update(self.buffer.sample(cfg.batch_size, self.rng, nstep, cfg.gamma))
                self.update_time += time.perf_counter() - tu
            if cfg.dynamic_buffer and self.env_steps % cfg.buffer_check_interval == 0 \
                    and self.env_steps > cfg.warmup_steps:
                self._check_buffer()
            if self.env_steps % cfg.eval_interval == 0 or self.env_steps == cfg.total_steps:
                te = time.perf_counter()
                ret, std = self.evaluate()
                self.eval_time += time.perf_counter() - te
                wall = time.perf_counter() - t0
                self.last_eval, self.best_eval = ret, max(self.best_eval, ret)
                self._log_eval(wall, ret, std)
                if not math.isnan(cfg.stop_return) and ret >= cfg.stop_return and self.steps_to_target is None:
                    self.steps_to_target, self.wall_to_target = self.env_steps, wall
                    stop = True
            if cfg.checkpoint_interval and self.env_steps % cfg.checkpoint_interval == 0:
                self._checkpoint(time.perf_counter() - t0)
            bar.update(self.env_steps, {"eval": f"{self.last_eval:8.1f}",
                                        "train": f"{self.recent_returns[-1]:8.1f}" if self.recent_returns else "-"},
                       force=self.env_steps == cfg.total_steps)
        bar.close()
        if self.tb is not None:
            self.tb.close()
        wall = time.perf_counter() - t0
        self._checkpoint(wall)
        self._write_summary(wall)
        return TrainResult(self.run_dir, self.env_steps, wall, self.last_eval, self.best_eval,
                           self.steps_to_target, self.wall_to_target, self.eval_time)

    def _write_summary(self, wall: float) -> None:
        costs = cost_summary(self.agent)
        if self.cfg.variant != "dense":
            ref = reference_dense_flops(self.cfg, self.obs_dim, self.act_dim)
            costs["vs_full_dense"] = {
                "train_flops_reduction": ref["train_flops_per_gradient_step_dense"]
                / costs["train_flops_per_gradient_step_sparse"],
                "inference_flops_reduction": ref["inference_flops_dense"] / costs["inference_flops_sparse"],
                "compression": (ref["actor_params"] + ref["critic_params"])
                / (costs["actor_params"] + costs["critic_params"]),
                "actor_compression": ref["actor_params"] / costs["actor_params"],
            }
        summary = {
            "config": self.cfg.to_dict(), "env_steps": self.env_steps, "episodes": self.episodes,
            "gradient_steps": self.agent.gradient_steps, "topology_updates": self.agent.topology_updates,
            "wall_s": wall, "eval_s": self.eval_time, "ms_per_env_step": 1e3 * self.env_time / max(self.env_steps, 1),
            "ms_per_gradient_step": 1e3 * self.update_time / max(self.agent.gradient_steps, 1),
            "last_eval_return": self.last_eval, "best_eval_return": self.best_eval,
            "steps_to_target": self.steps_to_target, "wall_to_target": self.wall_to_target,
            "buffer": {"size": len(self.buffer), "max_size": self.buffer.max_size, "dropped": self.buffer.dropped},
            "torch_threads": torch.get_num_threads(), "costs": costs,
        }
        (self.run_dir / "run.json").write_text(json.dumps(summary, indent=2, default=float))
