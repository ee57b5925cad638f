"""The fine-tuner's gate and diagnostics as pure functions over plain state (no torch, no ROS).

``learn_gate`` says whether the learner may run now and, if not, why (the ``state`` the
``lowrl/finetune/learner`` diagnostic shows); ``finetune_status`` turns the fine-tuner's state into
its three diagnostic statuses (name, level, message, values). The node only fills the inputs and
maps the levels to ROS (docs/finetune_reference.md, "Learning": the gates, in order).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from lowrl_ros.core.runtime.tiers import ComputeTier
from lowrl_ros.core.types import Level, Silence, StatusEntry

OK, WARN, ERROR, STALE = Level.OK, Level.WARN, Level.ERROR, Level.STALE

# The learner's states, in the order learn_gate checks them.
DISABLED = "disabled"
PAUSED_SAFETY = "paused_safety"
WAITING_FOR_FULL_TIER = "waiting_for_full_tier"
PAUSED_MEMORY = "paused_memory"
WAITING_FOR_DATA = "waiting_for_data"
LEARNING = "learning"

ROWS_TIMEOUT_S = 2.0  # step rows come at the control rate: none for this long and the input is STALE


@dataclass(frozen=True)
class LearnGate:
    """What the caller knows about the machine when the learner asks to run.

    Attributes:
        enabled: the operator's switch (recording never stops).
        tier: the budget monitor's compute tier (None: not heard yet, so no learning).
        rss_mb: the process's resident memory now.
        memory_cap_mb: learning pauses above this much resident memory.
    """

    enabled: bool = True
    tier: ComputeTier | None = ComputeTier.FULL
    rss_mb: float = 0.0
    memory_cap_mb: float = math.inf


def learn_gate(gate: LearnGate, paused_reason: str, can_update: bool) -> str:
    """The learner's state: ``LEARNING`` when it may update now, else the first reason it may not.

    Args:
        gate: the machine's side (switch, tier, memory).
        paused_reason: non-empty while a safety trip (or a learner error) holds learning.
        can_update: the learner has enough data and is under its update-to-data cap.
    """
    if not gate.enabled:
        return DISABLED
    if paused_reason:
        return PAUSED_SAFETY
    if gate.tier != ComputeTier.FULL:
        return WAITING_FOR_FULL_TIER
    if gate.rss_mb > gate.memory_cap_mb:
        return PAUSED_MEMORY
    if not can_update:
        return WAITING_FOR_DATA
    return LEARNING


@dataclass
class FineTuneFacts:
    """The fine-tuner's state as the diagnostics see it (plain values, filled by the node).

    ``offboard`` nodes record and stream only: the learner fields are then unused.
    """

    # recording
    recorded: int = 0
    resumed: int = 0
    rebuilt_from_wal: int = 0
    incomplete_steps: int = 0
    bad_inputs: int = 0
    callback_errors: int = 0
    dropped_segments: int = 0
    log_dir: str = ""
    received: dict[str, int] = field(default_factory=dict)  # messages per input
    # learning
    offboard: bool = False
    streamed: int = 0
    transitions_topic: str = ""
    state: str = ""
    paused_reason: str = ""
    updates: int = 0
    buffer: int = 0
    transitions_seen: int = 0
    backlog: int = 0
    rss_mb: float = 0.0
    memory_cap_mb: float = 0.0
    tier: str = "unknown"
    learner: str = ""  # FineTuner.learner (kit, crossq, rlpd, residual)
    updates_per_s: float = 0.0  # measured over the update time (FineTuner.updates_per_s)
    prior: int = 0  # prior transitions held (rlpd, residual)
    notes: str = ""  # FineTuner.notes: what the learner was seeded with (residual: which data), "; "-joined
    # versions
    running_version: int = 0
    last_decision: str = "none"
    current: int | None = None
    best: int | None = None
    next_version: int = 1
    # reward and interventions
    reward_terms: tuple[str, ...] = ()  # the robot file's reward terms (empty: a reward topic)
    interventions: int = 0
    resets_requested: int = 0
    rows_before_ready: int = 0  # policy rows between an end and the robot's ready, not recorded
    demo_buffer: int = 0  # demo rows held (learning here)
    demo_rows_sampled: int = 0
    last_terms: dict[str, float] = field(default_factory=dict)  # the last computed episode's term sums
    # counters (FineTuneSession, EpisodeRecorder): read by the monitor as keys, never from the decision text
    swaps: int = 0  # the running version changed in the step rows
    rejections: int = 0  # versions the robot refused
    rollbacks: int = 0  # rollback decisions
    rows_silence: Silence | None = None  # the step rows not heard within ROWS_TIMEOUT_S: since when
    rows_age_s: float | None = None  # seconds since the newest step row (None: none yet)

    def read(self, session: Any, recorder: Any, now: float, wall_now: float) -> None:
        """Fill what the session (a FineTuneSession; None off-board) and the EpisodeRecorder know, at ``now``
        (monotonic, the recorder's clock) and ``wall_now`` (the wall clock, for the time of day rows went stale)."""
        r = recorder
        self.running_version, self.incomplete_steps, self.interventions = r.running_version, r.incomplete, \
            r.interventions
        self.last_terms, self.swaps, self.rows_before_ready = r.last_terms, r.swaps, r.before_ready
        self.rows_silence = r.rows_silence(ROWS_TIMEOUT_S, now, wall_now)
        self.rows_age_s = None if r.last_row_at is None else now - r.last_row_at
        if session is None:
            return
        t = session.tuner
        self.state, self.paused_reason, self.last_decision = session.state, session.paused_reason, \
            session.last_decision
        self.rejections, self.rollbacks = session.rejections, session.rollbacks
        self.updates, self.buffer, self.transitions_seen = t.updates, len(t.buffer), t.transitions_seen
        self.learner, self.updates_per_s = t.learner, t.updates_per_s
        self.prior = len(t.prior) if t.prior is not None else 0
        self.notes = "; ".join(t.notes)
        self.current, self.best, self.next_version = t.tracker.current, t.tracker.best, t.tracker.next_version
        self.demo_buffer, self.demo_rows_sampled = len(t.demos), t.demos.sampled


def finetune_status(facts: FineTuneFacts, prefix: str = "lowrl/finetune") -> list[StatusEntry]:
    """The fine-tuner's diagnostics: ``<prefix>/log``, ``<prefix>/learner``, (learning here) ``<prefix>/versions``,
    ``<prefix>/reward`` (where the reward comes from, interventions, resets, the demo buffer) and ``<prefix>/input``
    (the step rows).

    Levels: the log WARNs while steps are incomplete or segments were dropped; the learner is
    ERROR under a safety pause (or a learner error), WARN while memory holds it, else OK;
    versions are OK (what was decided is the message; the ``swaps``, ``rejections`` and ``rollbacks``
    keys count them); the input is STALE, saying since when, while no step row came for ``ROWS_TIMEOUT_S``.
    """
    f = facts
    quiet = f.rows_silence
    rows = StatusEntry(f"{prefix}/input", STALE if quiet else OK, quiet.message() if quiet else "step rows heard",
                       {"steps_received": f.received.get("step", 0), "timeout_s": ROWS_TIMEOUT_S, "stale_since": "",
                        "silent_s": "" if f.rows_age_s is None else round(f.rows_age_s, 3),
                        **(quiet.values() if quiet else {})})
    log = StatusEntry(
        f"{prefix}/log", WARN if f.incomplete_steps or f.dropped_segments else OK, f"{f.recorded} transitions recorded",
        {"recorded": f.recorded, "resumed": f.resumed, "rebuilt_from_wal": f.rebuilt_from_wal,
         "incomplete_steps": f.incomplete_steps, "bad_inputs": f.bad_inputs, "callback_errors": f.callback_errors,
         "dropped_segments": f.dropped_segments, "dir": f.log_dir,
         **{f"received_{k}": v for k, v in sorted(f.received.items())}})
    reward = StatusEntry(
        f"{prefix}/reward", OK, "reward from " + ("terms " + ", ".join(f.reward_terms) if f.reward_terms else "topic"),
        {"interventions": f.interventions, "resets_requested": f.resets_requested,
         "rows_before_ready": f.rows_before_ready,
         "demo_buffer": "offboard" if f.offboard else f.demo_buffer, "demo_rows_sampled": f.demo_rows_sampled,
         **{f"last_episode.{k}": f"{v:.4g}" for k, v in f.last_terms.items()}})
    if f.offboard:  # off-board learning: this node records and streams
        return [log, StatusEntry(f"{prefix}/learner", OK, f"off-board: {f.streamed} transitions streamed",
                                 {"state": f.state, "streamed": f.streamed, "topic": f.transitions_topic,
                                  "running_version": f.running_version}), reward, rows]
    level = {PAUSED_SAFETY: ERROR, PAUSED_MEMORY: WARN}.get(f.state, OK)
    return [
        log,
        StatusEntry(f"{prefix}/learner", level, f.paused_reason or f.state,
                    {"state": f.state, "updates": f.updates, "buffer": f.buffer,
                     "transitions_seen": f.transitions_seen, "backlog": f.backlog, "rss_mb": round(f.rss_mb, 1),
                     "memory_cap_mb": f.memory_cap_mb, "tier": f.tier, "learner": f.learner,
                     "updates_per_s": round(f.updates_per_s, 1), "prior": f.prior,
                     "notes": f.notes}),
        StatusEntry(f"{prefix}/versions", OK, f.last_decision,
                    {"running": f.running_version, "current": f.current, "best": f.best, "next": f.next_version,
                     "swaps": f.swaps, "rejections": f.rejections, "rollbacks": f.rollbacks}),
        reward,
        rows,
    ]
