"""On-robot fine-tuning: the learner, FineTuner, and its settings, FineTuneConfig (no ROS).

The fine-tuner's torch side (the fine-tuner process runs under a memory cap; the policy node and
the budget monitor never import this). It reuses the trainer's SAC/TD3 agents, replay buffer and
masks (lowrl_ros/core/train/) instead of re-implementing them. The kit is in kit.py, the versions,
the rollback rule and the episode rule in versions.py (torch-free), the loop in session.py.

Fine-tuning keeps every mask fixed (the agent is rebuilt with the "static" method: masked weights
stay exactly zero, no drop/grow on the robot), so each published version has the sparsity the
deployed policy was compressed to.

A kit made from an imported artifact (`lowrl kit`, kit.py) trains that artifact's own actor
(``ArtifactActor``: its activations, frozen normaliser and action transform, the zeros of its sparse
layers kept); its versions keep the imported architecture and contract, only the weights change.
The ``residual`` learner (residual.py) trains none of the actor: the base artifact stays frozen and a
small head learns a bounded correction; its versions are the base artifact plus that head.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lowrl_ros.core.finetune.config import FineTuneConfig
from lowrl_ros.core.finetune.demos import DemoBuffer
from lowrl_ros.core.finetune.kit import AGENT_KEYS, FineTuneKit, make_kit_agent, norm_obs
from lowrl_ros.core.finetune.prior import PRIOR_RATIO, load_learner_prior, mixed_batch
from lowrl_ros.core.finetune.residual import ResidualAgent, base_id, load_base, save_residual_version
from lowrl_ros.core.finetune.transition_log import TransitionBatch
from lowrl_ros.core.finetune.versions import Decision, VersionRecord, VersionTracker
from lowrl_ros.core.runtime.artifact import MlpWeights, save_artifact
from lowrl_ros.core.train.crossq import learner_class, resolve_learner
from lowrl_ros.core.train.export import actor_weights
from lowrl_ros.core.train.replay import ReplayBuffer

_KEEP_STATES = 3  # fp32 learner states kept for rollbacks besides the running and best versions' (~1.6 MB each)
# crossq and rlpd start fresh critics (the kit's have no normalisation layers): the actor waits this many
# critic-only updates (or critic_warmup_updates if more) so a random critic cannot drag the kit's policy down.
# residual's fresh critics wait residual_critic_updates instead (FineTuneConfig).
FRESH_CRITIC_WARMUP = 1000


# ---- the learner ----------------------------------------------------------------------------
class FineTuner:
    """SAC/TD3 updates on a bounded buffer, keeping the kit's masks; versions and rollbacks.

    Args:
        kit: the fine-tune kit.
        config: fine-tuning settings.
        out_dir: where versions (``versions/v000002.onnx``), ``versions.json`` and ``learner.pt`` go.
        base_path: the artifact the robot runs now (the rollback target before any version is good).
        base_version: its version (default: the kit contract's).
        nstep: n-step TD targets (1 on the robot; more is an in-process experiment).
        train_on_truncated: train on time-limit truncations too, as n-step cuts. Only where the
            truncated step's next observation is the true last state (in-process, lockstep); on a
            robot it is the next episode's first observation, so the node leaves this off.

    A directory that already holds ``learner.pt`` and ``versions.json`` is resumed: learner weights,
    counters and the version history come back; the replay buffer is refilled by the caller from
    the transition log (:meth:`add_batch`).
    """

    def __init__(self, kit: FineTuneKit, config: FineTuneConfig, out_dir: str | Path, base_path: str = "",
                 base_version: int | None = None, *, nstep: int = 1, train_on_truncated: bool = False) -> None:
        if int(nstep) < 1:
            raise ValueError(f"nstep={nstep} must be >= 1")
        self.kit, self.config = kit, config
        self.nstep, self.train_on_truncated = int(nstep), bool(train_on_truncated)
        self.out_dir = Path(out_dir)
        (self.out_dir / "versions").mkdir(parents=True, exist_ok=True)
        torch.set_num_threads(config.threads)
        cfg = kit.train_config
        # "static": the masks never change on the robot (no drop/grow), but still gate every step.
        self.agent_config = cfg.replace(variant="static" if cfg.sparse else cfg.variant, lr=config.lr,
                                        batch_size=config.batch_size, seed=config.seed)
        # "kit", or the kit's own algorithm named: the kit's agent as it was trained; crossq/rlpd: crossq.py;
        # residual: the base artifact frozen, a correction on top (residual.py).
        self.learner = "residual" if config.algorithm == "residual" else resolve_learner(config.algorithm, cfg.algo)
        self._base = load_base(base_path, kit.contract) if self.learner == "residual" else None
        self.agent = self._make_agent()
        # residual with residual_critic kit: the kit's critics, loaded below (not its actor: the base is frozen).
        self.fresh_critic = self.learner != "kit" and not (self._base and config.residual_critic == "kit")
        warmup = {"kit": 0, "residual": config.residual_critic_updates}.get(self.learner, FRESH_CRITIC_WARMUP)
        self.critic_warmup = max(config.critic_warmup_updates, warmup)
        self.utd = config.rlpd_updates_per_transition if self.learner == "rlpd" else config.updates_per_transition
        self.notes: list[str] = []
        # The residual learner's actor is the base artifact's, not the kit's.
        self._load_agent(kit.agent_state, critic=not self.fresh_critic, actor=self._base is None)
        # The kit's actor and critic, frozen: the fixed yardstick of start states (start_value).
        kit_agent = self.agent
        if self.fresh_critic:
            kit_agent = make_kit_agent(self.agent_config, kit.contract, kit.actor_spec)
            self._load_agent(kit.agent_state, agent=kit_agent)
        self._yardstick = (copy.deepcopy(kit_agent.actor).requires_grad_(False),
                           copy.deepcopy(kit_agent.critic).requires_grad_(False))
        del kit_agent
        c = kit.contract
        self._low, self._high = np.asarray(c.action_low), np.asarray(c.action_high)
        self.buffer = ReplayBuffer(kit.obs_dim, kit.action_dim, config.buffer_size)
        # rlpd and residual: the kit's simulator transitions in half of every batch (prior.py); notes say which data.
        self.prior = load_learner_prior(self.learner, kit, config, self.buffer, self.notes)
        self.updates_per_s = 0.0  # measured: updates per second of update time (moving average)
        self.demos = DemoBuffer(kit.obs_dim, kit.action_dim)  # interventions + given demos (HIL-SERL, demos.py)
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
    def _make_agent(self):
        if self._base is not None:
            c = self.config
            return ResidualAgent(self.agent_config, self.kit.contract, self._base[1], hidden=c.residual_hidden,
                                 scale=c.residual_scale, anchor=c.residual_anchor,
                                 layer_norm=c.residual_critic == "fresh")
        # A kit made from an artifact trains the imported actor itself (its activations, normaliser, transform).
        wrap = None if self.learner == "kit" else functools.partial(learner_class, self.learner)
        return make_kit_agent(self.agent_config, self.kit.contract, self.kit.actor_spec, wrap=wrap)

    def _load_agent(self, state: dict[str, Any], critic: bool = True, agent=None, actor: bool = True) -> None:
        """Load actor (unless ``actor`` is False: the residual learner's is the base's) + critic (unless
        ``critic`` is False: a fresh-critic learner from a kit) into ``agent``."""
        a = self.agent if agent is None else agent
        if actor:
            a.actor.load_state_dict(state["actor"])
        if critic:
            a.critic.load_state_dict(state["critic"])
            if a.critic_target is not None:
                a.critic_target.load_state_dict(state["critic_target"])
        if actor and getattr(a, "actor_target", None) is not None and "actor_target" in state:
            a.actor_target.load_state_dict(state["actor_target"])
        for name in ("actor_masker",) * actor + ("critic_masker",) * critic:
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
        return {k: v for k, v in _clone(self.agent.state_dict()).items() if k in AGENT_KEYS}

    def _resume(self) -> bool:
        learner, versions = self.out_dir / "learner.pt", self.out_dir / "versions.json"
        if not (learner.is_file() and versions.is_file()):
            return False
        state = torch.load(learner, map_location="cpu", weights_only=False)
        if state.get("kit") != self._kit_id():
            raise ValueError(f"{learner} was written for another kit ({state.get('kit')}, this kit: "
                             f"{self._kit_id()}); give this kit (or learner) its own work_dir (or move the old "
                             "one away)")
        self.agent.load_state_dict(state["agent"])
        self._states = state["states"]
        self.updates, self._last_version_updates = state["updates"], state["last_version_updates"]
        self.transitions_seen = state["transitions_seen"]
        self.rng.bit_generator.state = state["rng"]
        self.tracker.load_dict(json.loads(versions.read_text()))
        return True

    def _kit_id(self) -> dict[str, Any]:
        cfg = self.kit.train_config
        kid = {"obs_dim": self.kit.obs_dim, "action_dim": self.kit.action_dim, "algo": cfg.algo,
               "hidden": cfg.hidden, "depth": cfg.depth, "variant": cfg.variant, "env_id": cfg.env_id}
        spec = self.kit.actor_spec
        if spec is not None:  # an imported actor: its shape too (a train kit's id stays as it was)
            kid["actor"] = {k: spec.get(k) for k in ("sizes", "hidden_activation", "output_activation")}
        if self.learner != "kit":  # absent for the kit's own learner: older learner.pt files still resume
            kid["learner"] = self.learner
        if self._base is not None:  # the head is learned on this base, with this width
            kid["residual"] = {"base": base_id(self._base[1]), "hidden": self.config.residual_hidden}
            if self.config.residual_critic != "fresh":  # absent for fresh: learner.pt files from before resume
                kid["residual"]["critic"] = self.config.residual_critic
        return kid

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
        return norm_obs(self.kit.contract, obs)  # the contract's normaliser, its clip included

    def _norm_action(self, action: np.ndarray) -> np.ndarray:
        a = 2.0 * (np.asarray(action, dtype=np.float64) - self._low) / (self._high - self._low) - 1.0
        return np.clip(a, -1.0, 1.0)

    def add(self, obs, action, reward: float, next_obs, terminated: bool, truncated: bool,
            intervention: bool = False) -> bool:
        """Add one recorded transition (robot units); returns False when it is not trained on.

        A truncated transition is kept in the log but not trained on: on a robot its next
        observation is the first one of the new episode, not the state the time limit cut
        (``train_on_truncated`` keeps it, as a cut of the n-step sum).
        """
        self.transitions_seen += 1
        if truncated and not terminated and not self.train_on_truncated:
            return False
        if not (np.all(np.isfinite(obs)) and np.all(np.isfinite(next_obs)) and np.all(np.isfinite(action))
                and math.isfinite(reward)):
            return False
        a = self._norm_action(action)
        self.buffer.add(self._norm_obs(obs), a, float(reward), self._norm_obs(next_obs), bool(terminated),
                        bool(truncated) and self.train_on_truncated, a)
        if intervention:  # HIL-SERL: a person's action goes to the online AND the demo buffer
            self.demos.add(self._norm_obs(obs), a, float(reward), self._norm_obs(next_obs), bool(terminated))
        return True

    def add_demos(self, batch: TransitionBatch) -> int:
        """Seed the demo buffer with recorded transitions (robot units); returns how many were kept."""
        kept = 0
        for i in range(len(batch)):
            obs, action, next_obs = batch.obs[i], batch.action[i], batch.next_obs[i]
            if (batch.truncated[i] and not batch.terminated[i]) or not (
                    np.all(np.isfinite(obs)) and np.all(np.isfinite(next_obs)) and np.all(np.isfinite(action))):
                continue
            self.demos.add(self._norm_obs(obs), self._norm_action(action), float(batch.reward[i]),
                           self._norm_obs(next_obs), bool(batch.terminated[i]))
            kept += 1
        return kept

    def add_batch(self, batch: TransitionBatch) -> int:
        """Add every transition of a log read (resume); returns how many were trained on."""
        used = 0
        for i in range(len(batch)):
            used += self.add(batch.obs[i], batch.action[i], batch.reward[i], batch.next_obs[i],
                             bool(batch.terminated[i]), bool(batch.truncated[i]),
                             batch.intervention is not None and bool(batch.intervention[i]))
        return used

    # -- learning --
    def can_update(self) -> bool:
        """Enough data, and under the update-to-data cap."""
        return (len(self.buffer) >= self.config.min_transitions
                and self.updates < self.utd * self.transitions_seen)

    def update(self, n: int = 1) -> int:
        """Run up to ``n`` updates (fewer when the cap is reached); returns how many ran."""
        done = 0
        started = time.perf_counter()
        while done < n and self.can_update():
            bs, gamma = self.config.batch_size, self.agent_config.gamma
            batch = mixed_batch(self.buffer, self.prior, bs, self.rng, self.nstep, gamma)  # robot rows, then prior
            online = bs - (int(round(PRIOR_RATIO * bs)) if self.prior is not None and len(self.prior) else 0)
            self.agent.update(self.demos.mix(batch, self.rng, gamma, online_rows=online),
                              train_actor=self.updates >= self.critic_warmup, bc_weight=self.config.bc_weight)
            self.updates += 1
            done += 1
        if done:
            rate = done / max(time.perf_counter() - started, 1e-9)
            self.updates_per_s = rate if self.updates_per_s == 0.0 else 0.9 * self.updates_per_s + 0.1 * rate
        return done

    def weights_finite(self) -> bool:
        return all(bool(torch.isfinite(p).all()) for p in self.agent.actor.parameters()) and \
            all(bool(torch.isfinite(p).all()) for p in self.agent.critic.parameters())

    def version_due(self) -> bool:
        """N updates since the last version, and the running version has been judged."""
        since = self.updates - max(self._last_version_updates, self.critic_warmup)
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
        path = self._write_version(self.out_dir / "versions" / f"v{version:06d}.onnx", contract)
        record = VersionRecord(version, parent, str(path), updates=self.updates)
        self.tracker.add(record)
        self._states[version] = self._snapshot()
        self._prune_states()
        self._last_version_updates = self.updates
        self.save()
        return record

    def _write_version(self, path: Path, contract) -> Path:
        """The version's artifact: the learner's actor (an imported one keeps its own activations, only weights
        move), or (residual) the base artifact untouched plus the head."""
        if self._base is not None:
            return save_residual_version(path, self._base[0], self.agent.actor, contract, int8=self.kit.int8)
        spec = self.kit.actor_spec
        weights = actor_weights(self.agent) if spec is None else \
            MlpWeights(self.agent.actor.layers(), spec["hidden_activation"], spec["output_activation"])
        return save_artifact(path, weights, contract, int8=self.kit.int8)

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
