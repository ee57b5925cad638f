"""On-robot fine-tuning: the fine-tune kit, the learner, versions, and the rollback rule (no ROS).

The one on-robot module that imports torch (the fine-tuner process runs under a memory cap; the
policy node and the budget monitor never import this). It reuses the trainer's SAC/TD3 agents,
replay buffer and masks (lowrl_ros/core/train/) instead of re-implementing them.

Fine-tune kit (a directory, see docs/finetune.md)::

    kit.json   {"format": "lowrl.finetune_kit", "format_version": 1, "train_config": {...TrainConfig},
                "obs_dim", "action_dim", "contract": {...PolicyContract of the deployed actor}}
    agent.pt   fp32 actor, twin critics and their targets, the RLx2 masks (SAC: log alpha) —
               no optimizer state (fine-tuning starts Adam afresh at its own learning rate)

Fine-tuning keeps every mask fixed (the agent is rebuilt with the "static" method: masked weights
stay exactly zero, no drop/grow on the robot), so each published version has the sparsity the
deployed policy was compressed to.

Versions and rollback (:class:`VersionTracker`): every ``version_every_updates`` updates the actor
is quantized to an int8 artifact with ``version = highest + 1`` and ``parent_version = running``.
A version is judged once it has run ``eval_episodes`` episodes, and re-scored with every later
one (a version that did well on lucky first episodes loses its place when later ones fail): the
best judged version is kept; a running version whose score falls more than ``rollback_margin``
below the best one's, or a
safety trip (non-finite weights, a rejected swap, a return below ``min_return``), rolls back to the
best version (its artifact is re-deployed and the learner restarts from its fp32 weights).

A version's score is its mean return, adjusted for where its episodes started
(``judge_baseline``): an episode's return depends on its start state as much as on the policy
(Pendulum: 0 to -600 from the start angle alone), so a few episodes of a new version are mostly
a draw of start states. The kit's critic, frozen when fine-tuning starts, values each episode's
first observation, b = Q_kit(s0, pi_kit(s0)); the score is the regression-adjusted mean

    score_v = mean_v(R) - c * (mean_v(b) - mean_all(b))

with c the within-version Theil-Sen slope of R on b over every episode recorded (0 until
``_MIN_BASELINE_EPISODES`` episodes carry a baseline, and never negative). Unbiased for the
version's expected return at any fixed c, and with the return's spread cut to sqrt(1 - rho^2) of
it: on the gapped Pendulum-v1 the kit critic's b correlates with R at rho = 0.91-0.93 (100
episodes each, three sim policies), the per-episode spread falls from 142-153 to 53-63.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lowrl_ros.core.config import field as config_field, require
from lowrl_ros.core.runtime.artifact import PolicyContract, load_weights, save_artifact
from lowrl_ros.core.train.checkpoint import load_checkpoint
from lowrl_ros.core.train.config import TrainConfig
from lowrl_ros.core.train.export import actor_weights
from lowrl_ros.core.train.trainer import make_agent
from lowrl_ros.core.train.replay import ReplayBuffer
from lowrl_ros.core.finetune.transition_log import TransitionBatch

KIT_FORMAT = "lowrl.finetune_kit"
KIT_FORMAT_VERSION = 1
_AGENT_KEYS = ("actor", "critic", "critic_target", "actor_target", "actor_masker", "critic_masker", "log_alpha")


# ---- kit ------------------------------------------------------------------------------------
@dataclass
class FineTuneKit:
    """What the robot needs to continue training a deployed policy."""

    train_config: TrainConfig
    contract: PolicyContract
    agent_state: dict[str, Any]
    path: Path | None = None

    @property
    def obs_dim(self) -> int:
        return self.contract.obs_dim

    @property
    def action_dim(self) -> int:
        return self.contract.action_dim


def write_kit_from_agent(agent, contract: PolicyContract, kit_dir: str | Path) -> Path:
    """Write a kit for ``agent`` (an OffPolicyAgent) whose deployed actor has ``contract``."""
    kit_dir = Path(kit_dir)
    kit_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v for k, v in agent.state_dict().items() if k in _AGENT_KEYS}
    tmp = kit_dir / "agent.pt.tmp"
    torch.save(state, tmp)
    tmp.replace(kit_dir / "agent.pt")
    meta = {"format": KIT_FORMAT, "format_version": KIT_FORMAT_VERSION,
            "train_config": agent.cfg.to_dict(), "obs_dim": agent.obs_dim, "action_dim": agent.act_dim,
            "contract": contract.to_dict()}
    tmp = kit_dir / "kit.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2, default=float))
    tmp.replace(kit_dir / "kit.json")  # written last: a kit.json means the kit is whole
    return kit_dir


def write_kit(run_dir: str | Path, kit_dir: str | Path, artifact: str | Path | None = None) -> Path:
    """Write a fine-tune kit from a `lowrl train` run directory.

    Args:
        run_dir: holds ``checkpoint.pt`` and ``actor.onnx`` (what `lowrl train` writes).
        kit_dir: destination directory (created).
        artifact: the deployed artifact whose contract (version, scaling) the kit carries;
            default ``run_dir/actor.onnx``.
    """
    run_dir = Path(run_dir)
    artifact = Path(artifact) if artifact else run_dir / "actor.onnx"
    if not artifact.is_file():
        raise ValueError(f"{artifact} does not exist; give the artifact the robot runs (lowrl train writes "
                         "RUN_DIR/actor.onnx)")
    state = load_checkpoint(run_dir)
    cfg = TrainConfig.from_dict(state["config"])
    _, contract = load_weights(artifact)
    agent = make_agent(cfg, contract.obs_dim, contract.action_dim)
    agent.load_state_dict(state["agent"])
    return write_kit_from_agent(agent, contract, kit_dir)


def load_kit(kit_dir: str | Path) -> FineTuneKit:
    """Load and check a kit directory; ValueError saying what is wrong and how to fix it."""
    kit_dir = Path(kit_dir)
    meta_path, agent_path = kit_dir / "kit.json", kit_dir / "agent.pt"
    if not meta_path.is_file() or not agent_path.is_file():
        raise ValueError(f"{kit_dir} is not a fine-tune kit (needs kit.json and agent.pt); write one with "
                         "lowrl_ros.core.finetune.learner.write_kit(RUN_DIR, KIT_DIR)")
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != KIT_FORMAT or meta.get("format_version") != KIT_FORMAT_VERSION:
        raise ValueError(f"{meta_path}: format {meta.get('format')!r} v{meta.get('format_version')!r} is not "
                         f"{KIT_FORMAT} v{KIT_FORMAT_VERSION}; re-write the kit with this version of lowrl_ros")
    cfg = TrainConfig.from_dict(meta["train_config"])
    contract = PolicyContract.from_dict(meta["contract"])
    if (contract.obs_dim, contract.action_dim) != (meta["obs_dim"], meta["action_dim"]):
        raise ValueError(f"{meta_path}: the contract is {contract.obs_dim}->{contract.action_dim} but the kit says "
                         f"{meta['obs_dim']}->{meta['action_dim']}; re-write the kit")
    # weights_only=False: tensors plus plain ints; the kit is our own file, checked by the trainer's HMAC stream.
    state = torch.load(agent_path, map_location="cpu", weights_only=False)
    missing = [k for k in ("actor", "critic", "critic_target") if k not in state]
    if missing:
        raise ValueError(f"{agent_path} lacks {missing}; re-write the kit")
    return FineTuneKit(cfg, contract, state, kit_dir)


# ---- config ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class FineTuneConfig:
    """How the robot fine-tunes (finetune_node's parameters of the same names; trainer_node's ``finetune.<name>``)."""

    # 1e-3, measured in `lowrl bench sim2real` (docs/sim_to_real.md): as good as 1e-4 on Pendulum-v1 and far
    # better on InvertedPendulum-v5 (all 3 seeds to ~1000 on the gapped robot, against 29-43 % of the gap at 1e-4).
    lr: float = config_field(1e-3, "Adam learning rate of the fine-tuner", range=(1e-7, 1.0))
    batch_size: int = config_field(128, "minibatch size of each update", range=(1, 4096))
    buffer_size: int = config_field(50_000, "replay capacity (transitions in memory; the log on disk keeps "
                                            "everything)", range=(1, 10_000_000))
    min_transitions: int = config_field(400, "updates start once the buffer holds this many transitions",
                                        range=(1, 10_000_000))
    updates_per_transition: float = config_field(1.0, "at most this many updates per transition recorded "
                                                      "(update-to-data cap)", range=(1e-3, 100.0))
    version_every_updates: int = config_field(1000, "updates between new policy versions", range=(1, 10_000_000))
    eval_episodes: int = config_field(3, "episodes a version runs before it is judged", range=(1, 1000))
    rollback_margin: float = config_field(150.0, "roll back when a version's mean return is this much below the "
                                                 "best (return units)", range=(0.0, 1e9))
    # dynamic: a YAML or -p value may come as an int (-1500); NaN does not survive every YAML parser.
    min_return: float = config_field(math.nan, "safety floor: any episode below it trips a rollback (nan: off)",
                                     dynamic=True)
    seed: int = config_field(0, "seed of replay sampling and of the networks' noise", range=(0, 2**31 - 1))
    threads: int = config_field(1, "torch threads of the learner (1 leaves the other core to control)",
                                range=(1, 64))
    memory_cap_mb: float = config_field(1500.0, "resident memory (MB) of the fine-tuner above which learning "
                                                "pauses", range=(64.0, 1e6))
    nice: int = config_field(10, "niceness added to the learner thread (0..19; higher = lower priority than "
                                 "control)", range=(0, 19))
    updates_per_slice: int = config_field(8, "updates between checks of the tier, memory and events",
                                          range=(1, 10_000))
    # The critics learn the robot's dynamics before the actor follows them: a sim critic on a small, fresh
    # buffer otherwise drags the policy down first (the offline-to-online dip). Versions count from its end.
    critic_warmup_updates: int = config_field(0, "first updates that train the critics only (versions count "
                                                 "from their end)", range=(0, 10_000_000))
    # TD3+BC: the Q term divided by its mean |Q|, plus bc_weight x the squared distance to the recorded action;
    # keeps the actor near what the robot did, where the critic has data.
    bc_weight: float = config_field(0.0, "weight of a behaviour-cloning term in the actor loss (TD3+BC; 0: off)",
                                    range=(0.0, 1e6))
    # See the module docstring: the baseline is the frozen kit critic's value of each episode's start state.
    judge_baseline: bool = config_field(True, "judge versions by their mean return adjusted for each episode's "
                                              "start state (false: plain mean returns)")

    def __post_init__(self) -> None:
        need = functools.partial(require, owner="FineTuneConfig")

        need(self.lr > 0, f"lr={self.lr} must be > 0 (e.g. 1e-3)")
        for name in ("batch_size", "buffer_size", "min_transitions", "version_every_updates", "eval_episodes",
                     "threads", "updates_per_slice"):
            need(int(getattr(self, name)) >= 1, f"{name}={getattr(self, name)} must be >= 1")
        need(self.min_transitions <= self.buffer_size,
             f"min_transitions={self.min_transitions} exceeds buffer_size={self.buffer_size}; lower it")
        need(self.critic_warmup_updates >= 0, f"critic_warmup_updates={self.critic_warmup_updates} must be >= 0")
        need(math.isfinite(self.bc_weight) and self.bc_weight >= 0,
             f"bc_weight={self.bc_weight} must be >= 0 (0: off; e.g. 0.4, TD3+BC's 1/2.5)")
        need(self.updates_per_transition > 0, f"updates_per_transition={self.updates_per_transition} must be > 0")
        need(self.rollback_margin >= 0, f"rollback_margin={self.rollback_margin} must be >= 0 (return units)")
        need(self.seed >= 0, f"seed={self.seed} must be >= 0")
        need(self.memory_cap_mb >= 64, f"memory_cap_mb={self.memory_cap_mb} must be >= 64 (torch alone is ~230 MB)")
        need(0 <= self.nice <= 19, f"nice={self.nice} must be in 0..19 (10: below the control path)")


# ---- versions and the rollback rule ---------------------------------------------------------
@dataclass
class VersionRecord:
    """One policy version the fine-tuner knows (the base, or one it made)."""

    version: int
    parent_version: int | None
    path: str
    updates: int = 0  # learner updates when it was made
    created: float = field(default_factory=time.time)
    returns: list[float] = field(default_factory=list)  # episodes run while it was deployed
    status: str = "candidate"  # candidate -> good | rejected
    # The start-state value b of each episode in ``returns`` (nan where none was given).
    baselines: list[float] = field(default_factory=list)

    def score(self, n: int, slope: float = 0.0, mean_baseline: float = 0.0) -> float | None:
        """Mean return of all its episodes once it has ``n``, regression-adjusted by ``slope``.

        The adjustment (see the module docstring) applies only when each episode has a baseline.
        """
        if len(self.returns) < n:
            return None
        ret = float(np.mean(self.returns))
        b = self.baselines
        if slope > 0.0 and len(b) == len(self.returns) and all(math.isfinite(x) for x in b):
            ret -= slope * (float(np.mean(b)) - mean_baseline)
        return ret


@dataclass(frozen=True)
class Decision:
    """What the tracker tells the caller to do after an event."""

    action: str  # "none" | "rollback" | "pause"
    target: VersionRecord | None = None
    reason: str = ""


_MIN_BASELINE_EPISODES = 6  # episodes with a baseline before the score adjustment is fitted
# A judged version takes the best's place only when its score is higher by this many standard errors
# of the difference: with 3-5 episodes a version and ~10 versions a run, the highest score is often
# the luckiest, not the best. Chosen by replaying the rules on six fine-tuning runs' versions
# (scripts/selection_study.py, docs/finetune.md): 2 kept the large gains and lost <= 1.6 on average
# where no version was better; 1 lost up to 11, plain first-3-episode means up to 57.
PROMOTE_Z = 2.0
_KEEP_STATES = 3  # fp32 learner states kept for rollbacks besides the running and best versions' (~1.6 MB each)
_FIT_EPISODES = 64  # at most this many (the latest) episodes of a version enter the fit: O(64^2) pairs each


class VersionTracker:
    """Keeps the best version by return and decides rollbacks (no torch; plain numbers).

    Args:
        eval_episodes: episodes a version runs before it is judged.
        rollback_margin: a judged version more than this below the best one rolls back.
        min_return: an episode below this trips a rollback at once (nan: off).
    """

    def __init__(self, eval_episodes: int, rollback_margin: float, min_return: float = math.nan) -> None:
        self.eval_episodes = int(eval_episodes)
        self.rollback_margin = float(rollback_margin)
        self.min_return = float(min_return)
        self.versions: dict[int, VersionRecord] = {}
        self.current: int | None = None
        self.best: int | None = None

    def add(self, record: VersionRecord, *, deployed: bool = True) -> None:
        self.versions[record.version] = record
        if deployed:
            self.current = record.version

    @property
    def next_version(self) -> int:
        return max(self.versions) + 1 if self.versions else 1

    def judged(self) -> bool:
        """True when the running version has its score (a new one may replace it)."""
        rec = self.versions.get(self.current)
        return rec is not None and rec.status != "candidate"

    def baseline_fit(self) -> tuple[float, float]:
        """(slope c, mean baseline) of the score adjustment, from every episode that has a baseline.

        c is the Theil-Sen slope of return on baseline within versions: the median of
        (R_i - R_j) / (b_i - b_j) over pairs of episodes of the same version, so better versions do
        not tilt it and a failed swing-up (an outlier return) does not throw it (least squares gave
        1.2-4.1 where 100 episodes say 1.7-1.9 on the gapped Pendulum-v1; Theil-Sen 1.7-2.0).
        0 with fewer than ``_MIN_BASELINE_EPISODES`` such episodes, and never negative.
        """
        slopes, baselines = [], []
        for rec in self.versions.values():
            n = min(len(rec.returns), len(rec.baselines))
            r, b = np.asarray(rec.returns[:n], dtype=np.float64), np.asarray(rec.baselines[:n], dtype=np.float64)
            ok = np.isfinite(b)
            r, b = r[ok][-_FIT_EPISODES:], b[ok][-_FIT_EPISODES:]  # a long-running version: its latest
            baselines.append(b)
            i, j = np.triu_indices(len(b), k=1)
            db = b[i] - b[j]
            keep = np.abs(db) > 1e-9
            slopes.append((r[i] - r[j])[keep] / db[keep])
        baselines_all = np.concatenate(baselines) if baselines else np.empty(0)
        slopes_all = np.concatenate(slopes) if slopes else np.empty(0)
        if baselines_all.size == 0:
            return 0.0, 0.0
        mean_b = float(baselines_all.mean())
        if baselines_all.size < _MIN_BASELINE_EPISODES or slopes_all.size == 0:
            return 0.0, mean_b
        return max(0.0, float(np.median(slopes_all))), mean_b

    def _difference_se(self, a: int, b: int, fit: tuple[float, float]) -> float:
        """Standard error of score(a) - score(b): the pooled within-version spread of the
        (adjusted) returns, sqrt(1/n_a + 1/n_b); 0 while there are too few episodes to tell."""
        slope = fit[0]
        squares, count, groups = 0.0, 0, 0
        for rec in self.versions.values():
            x = np.asarray(rec.returns, dtype=np.float64)
            base = np.asarray(rec.baselines[:len(x)], dtype=np.float64)
            if slope > 0.0 and len(base) == len(x) and np.isfinite(base).all():
                x = x - slope * base
            if len(x):
                squares += float(((x - x.mean()) ** 2).sum())
                count, groups = count + len(x), groups + 1
        if count - groups < 2:
            return 0.0
        sigma = math.sqrt(squares / (count - groups))
        return sigma * math.sqrt(1.0 / len(self.versions[a].returns) + 1.0 / len(self.versions[b].returns))

    def score(self, rec: VersionRecord) -> float | None:
        """``rec``'s score: the mean of its returns (once it has ``eval_episodes``), adjusted (module docstring)."""
        return rec.score(self.eval_episodes, *self.baseline_fit())

    def on_episode(self, version: int, ret: float, baseline: float = math.nan) -> Decision:
        """Count an episode's return (and its start state's baseline value) for ``version``.

        Ignored unless ``version`` is the running one."""
        rec = self.versions.get(version)
        if rec is None or version != self.current or not math.isfinite(ret):
            return Decision("none")
        rec.baselines.extend([math.nan] * (len(rec.returns) - len(rec.baselines)))  # records of old files
        rec.returns.append(float(ret))
        rec.baselines.append(float(baseline) if math.isfinite(baseline) else math.nan)
        if not math.isnan(self.min_return) and ret < self.min_return:
            return self.on_safety_trip(f"episode return {ret:.1f} below min_return {self.min_return:.1f}")
        fit = self.baseline_fit()
        score = rec.score(self.eval_episodes, *fit)
        if score is None:
            return Decision("none")
        judged_now = rec.status == "candidate"
        rec.status = "good"
        # Every episode of the running version is more evidence: re-rank the judged versions, so a
        # version judged well on lucky first episodes loses its place when its later ones fail.
        before = self.best
        scores = {r.version: r.score(self.eval_episodes, *fit) for r in self.versions.values() if r.status == "good"}
        scores = {v: x for v, x in scores.items() if x is not None}
        top = max(scores, key=scores.get)
        if before not in scores or scores[top] - scores[before] > PROMOTE_Z * self._difference_se(top, before, fit):
            self.best = top  # the best changes hands only on evidence (the winner's curse of noisy scores)
        best = self.versions[self.best]
        if best is rec:
            if judged_now or before != version:
                return Decision("none", rec, f"v{version} is the best so far ({score:.1f})")
            return Decision("none")
        if score < scores[self.best] - self.rollback_margin:
            rec.status = "rejected"
            self.current = best.version
            return Decision("rollback", best, f"v{version} returned {score:.1f}, more than {self.rollback_margin:g} "
                                              f"below v{best.version}'s {scores[self.best]:.1f}")
        if judged_now or before != self.best:  # within the margin: kept running, not the best
            return Decision("none", rec, f"v{version} returned {score:.1f} (best v{best.version}: "
                                         f"{scores[self.best]:.1f})")
        return Decision("none")

    def on_safety_trip(self, reason: str) -> Decision:
        """A safety limit tripped on the running version: roll back to the best, or pause if it is the best."""
        rec = self.versions.get(self.current)
        if rec is not None and self.best is not None and rec.version != self.best:
            rec.status = "rejected"
            self.current = self.best
            return Decision("rollback", self.versions[self.best], f"safety: {reason}")
        return Decision("pause", rec, f"safety: {reason} (no better version to roll back to)")

    def to_dict(self) -> dict[str, Any]:
        return {"current": self.current, "best": self.best,
                "versions": [dataclasses.asdict(r) for r in self.versions.values()]}

    def load_dict(self, data: dict[str, Any]) -> None:
        self.versions = {int(r["version"]): VersionRecord(**r) for r in data["versions"]}
        self.current, self.best = data["current"], data["best"]


# ---- the learner ----------------------------------------------------------------------------
class FineTuner:
    """SAC/TD3 updates on a bounded buffer, keeping the kit's masks; versions and rollbacks.

    Args:
        kit: the fine-tune kit.
        config: fine-tuning settings.
        out_dir: where versions (``versions/v000002.onnx``), ``versions.json`` and ``learner.pt`` go.
        base_path: the artifact the robot runs now (the rollback target before any version is good).
        base_version: its version (default: the kit contract's).

    A directory that already holds ``learner.pt`` and ``versions.json`` is resumed: learner weights,
    counters and the version history come back; the replay buffer is refilled by the caller from
    the transition log (:meth:`add_batch`).
    """

    def __init__(self, kit: FineTuneKit, config: FineTuneConfig, out_dir: str | Path, base_path: str = "",
                 base_version: int | None = None) -> None:
        self.kit, self.config = kit, config
        self.out_dir = Path(out_dir)
        (self.out_dir / "versions").mkdir(parents=True, exist_ok=True)
        torch.set_num_threads(config.threads)
        cfg = kit.train_config
        # "static": the masks never change on the robot (no drop/grow), but still gate every step.
        self.agent_config = cfg.replace(variant="static" if cfg.sparse else cfg.variant, lr=config.lr,
                                        batch_size=config.batch_size, seed=config.seed)
        self.agent = make_agent(self.agent_config, kit.obs_dim, kit.action_dim)
        self._load_agent(kit.agent_state)
        # The kit's actor and critic, frozen: the fixed yardstick of start states (start_value).
        self._yardstick = (copy.deepcopy(self.agent.actor).requires_grad_(False),
                           copy.deepcopy(self.agent.critic).requires_grad_(False))
        c = kit.contract
        self._offset, self._scale = np.asarray(c.obs_offset), np.asarray(c.obs_scale)
        self._low, self._high = np.asarray(c.action_low), np.asarray(c.action_high)
        self.buffer = ReplayBuffer(kit.obs_dim, kit.action_dim, config.buffer_size)
        self.rng = np.random.default_rng(config.seed)
        self.updates = 0
        self.transitions_seen = 0
        self._last_version_updates = 0
        self.tracker = VersionTracker(config.eval_episodes, config.rollback_margin, config.min_return)
        # fp32 learner state of each version at the time it was made, kept for the running and the
        # best version only (a rollback restarts the learner from what the robot proved).
        self._states: dict[int, dict[str, Any]] = {}
        if not self._resume():
            base = base_version if base_version is not None else c.version
            self.tracker.add(VersionRecord(base, c.parent_version, str(base_path), status="candidate"))
            self._states[base] = self._snapshot()

    # -- state --
    def _load_agent(self, state: dict[str, Any]) -> None:
        a = self.agent
        a.actor.load_state_dict(state["actor"])
        a.critic.load_state_dict(state["critic"])
        a.critic_target.load_state_dict(state["critic_target"])
        if getattr(a, "actor_target", None) is not None and "actor_target" in state:
            a.actor_target.load_state_dict(state["actor_target"])
        for name in ("actor_masker", "critic_masker"):
            masker = getattr(a, name)
            if masker is not None:
                if name not in state:
                    raise ValueError(f"the kit has no {name} but its config is sparse; re-write the kit")
                masker.load_state_dict(state[name])
                masker.apply_to_weights()
        if "log_alpha" in state and hasattr(a, "log_alpha"):
            with torch.no_grad():
                a.log_alpha.copy_(state["log_alpha"])
        a.polyak_masks_only()

    def _snapshot(self) -> dict[str, Any]:
        return {k: v for k, v in _clone(self.agent.state_dict()).items() if k in _AGENT_KEYS}

    def _resume(self) -> bool:
        learner, versions = self.out_dir / "learner.pt", self.out_dir / "versions.json"
        if not (learner.is_file() and versions.is_file()):
            return False
        state = torch.load(learner, map_location="cpu", weights_only=False)
        if state.get("kit") != self._kit_id():
            raise ValueError(f"{learner} was written for another kit ({state.get('kit')}, this kit: "
                             f"{self._kit_id()}); give this kit its own work_dir (or move the old one away)")
        self.agent.load_state_dict(state["agent"])
        self._states = state["states"]
        self.updates, self._last_version_updates = state["updates"], state["last_version_updates"]
        self.transitions_seen = state["transitions_seen"]
        self.rng.bit_generator.state = state["rng"]
        self.tracker.load_dict(json.loads(versions.read_text()))
        return True

    def _kit_id(self) -> dict[str, Any]:
        cfg = self.kit.train_config
        return {"obs_dim": self.kit.obs_dim, "action_dim": self.kit.action_dim, "algo": cfg.algo,
                "hidden": cfg.hidden, "depth": cfg.depth, "variant": cfg.variant, "env_id": cfg.env_id}

    def save(self) -> None:
        """Write ``learner.pt`` and ``versions.json`` atomically (resume point)."""
        state = {"kit": self._kit_id(), "agent": self.agent.state_dict(), "states": self._states,
                 "updates": self.updates,
                 "last_version_updates": self._last_version_updates, "transitions_seen": self.transitions_seen,
                 "rng": self.rng.bit_generator.state}
        tmp = self.out_dir / "learner.pt.tmp"
        torch.save(state, tmp)
        tmp.replace(self.out_dir / "learner.pt")
        tmp = self.out_dir / "versions.json.tmp"
        tmp.write_text(json.dumps(self.tracker.to_dict(), indent=1))
        tmp.replace(self.out_dir / "versions.json")

    # -- data --
    def _norm_obs(self, obs: np.ndarray) -> np.ndarray:
        return (np.asarray(obs, dtype=np.float64) - self._offset) * self._scale

    def _norm_action(self, action: np.ndarray) -> np.ndarray:
        a = 2.0 * (np.asarray(action, dtype=np.float64) - self._low) / (self._high - self._low) - 1.0
        return np.clip(a, -1.0, 1.0)

    def add(self, obs, action, reward: float, next_obs, terminated: bool, truncated: bool) -> bool:
        """Add one recorded transition (robot units); returns False when it is not trained on.

        A truncated transition is kept in the log but not trained on: on a robot its next
        observation is the first one of the new episode, not the state the time limit cut.
        """
        self.transitions_seen += 1
        if truncated and not terminated:
            return False
        if not (np.all(np.isfinite(obs)) and np.all(np.isfinite(next_obs)) and np.all(np.isfinite(action))
                and math.isfinite(reward)):
            return False
        a = self._norm_action(action)
        self.buffer.add(self._norm_obs(obs), a, float(reward), self._norm_obs(next_obs), bool(terminated),
                        False, a)
        return True

    def add_batch(self, batch: TransitionBatch) -> int:
        """Add every transition of a log read (resume); returns how many were trained on."""
        used = 0
        for i in range(len(batch)):
            used += self.add(batch.obs[i], batch.action[i], batch.reward[i], batch.next_obs[i],
                             bool(batch.terminated[i]), bool(batch.truncated[i]))
        return used

    # -- learning --
    def can_update(self) -> bool:
        """Enough data, and under the update-to-data cap."""
        return (len(self.buffer) >= self.config.min_transitions
                and self.updates < self.config.updates_per_transition * self.transitions_seen)

    def update(self, n: int = 1) -> int:
        """Run up to ``n`` updates (fewer when the cap is reached); returns how many ran."""
        done = 0
        while done < n and self.can_update():
            self.agent.update(self.buffer.sample(self.config.batch_size, self.rng, 1, self.agent_config.gamma),
                              train_actor=self.updates >= self.config.critic_warmup_updates,
                              bc_weight=self.config.bc_weight)
            self.updates += 1
            done += 1
        return done

    def weights_finite(self) -> bool:
        return all(bool(torch.isfinite(p).all()) for p in self.agent.actor.parameters()) and \
            all(bool(torch.isfinite(p).all()) for p in self.agent.critic.parameters())

    def version_due(self) -> bool:
        """N updates since the last version, and the running version has been judged."""
        since = self.updates - max(self._last_version_updates, self.config.critic_warmup_updates)
        return since >= self.config.version_every_updates and self.tracker.judged()

    def make_version(self) -> VersionRecord:
        """Quantize the actor to an int8 artifact as the next version (parent: the running one)."""
        if not self.weights_finite():
            raise ValueError("the learner's weights are not finite; roll back instead of publishing")
        version = self.tracker.next_version
        parent = self.tracker.current
        provenance = dict(self.kit.contract.provenance)
        provenance.update({"tool": "lowrl finetune", "updates": str(self.updates),
                           "transitions": str(self.transitions_seen), "parent": str(parent)})
        contract = dataclasses.replace(self.kit.contract, version=version, parent_version=parent,
                                       provenance=provenance)
        path = save_artifact(self.out_dir / "versions" / f"v{version:06d}.onnx", actor_weights(self.agent),
                             contract, int8=True)
        record = VersionRecord(version, parent, str(path), updates=self.updates)
        self.tracker.add(record)
        self._states[version] = self._snapshot()
        self._prune_states()
        self._last_version_updates = self.updates
        self.save()
        return record

    @torch.no_grad()
    def start_value(self, obs) -> float:
        """The frozen kit critic's value of a start observation (robot units): Q_kit(s0, pi_kit(s0))."""
        x = np.asarray(obs, dtype=np.float64)
        if x.shape != (self.kit.obs_dim,) or not np.all(np.isfinite(x)):
            return math.nan
        actor, critic = self._yardstick
        s = torch.as_tensor(self._norm_obs(x), dtype=torch.float32)[None]
        return float(critic(s, actor.deterministic(s)).min(0).values[0])

    def on_episode(self, version: int, ret: float, start_obs=None) -> Decision:
        """Count an episode; on a new best keep its fp32 weights, on a rollback restore them.

        ``start_obs``, the episode's first observation, lets the version's score be adjusted for
        where it started (``judge_baseline``); without it the plain return counts."""
        baseline = self.start_value(start_obs) if start_obs is not None and self.config.judge_baseline else math.nan
        decision = self.tracker.on_episode(version, ret, baseline)
        self._apply(decision)
        return decision

    def on_safety_trip(self, reason: str) -> Decision:
        decision = self.tracker.on_safety_trip(reason)
        self._apply(decision)
        return decision

    def _apply(self, decision: Decision) -> None:
        if decision.action == "rollback":
            state = self._states.get(decision.target.version)
            if state is not None:  # else (a version that climbed back from outside the kept few): learn on
                self._load_agent(state)
            self._last_version_updates = self.updates  # the next version comes N updates after the restore
        if decision.target is not None or decision.action != "none":
            self._prune_states()
            self.save()

    def _prune_states(self) -> None:
        """Keep the fp32 learner states a rollback may need: the running version's and the best few judged ones'."""
        tr = self.tracker
        fit = tr.baseline_fit()
        judged = sorted((r for r in tr.versions.values() if r.status == "good" and r.version in self._states),
                        key=lambda r: _or_worst(r.score(tr.eval_episodes, *fit)), reverse=True)
        keep = {tr.current, tr.best} | {r.version for r in judged[:_KEEP_STATES]}
        self._states = {v: st for v, st in self._states.items() if v in keep}


def _or_worst(score: float | None) -> float:
    return -math.inf if score is None else score


def _clone(state: Any) -> Any:
    if isinstance(state, torch.Tensor):
        return state.detach().clone()
    if isinstance(state, dict):
        return {k: _clone(v) for k, v in state.items()}
    if isinstance(state, list):
        return [_clone(v) for v in state]
    return state
