"""The robot's fallback ladder: which cheaper steps its policy may take, in order (ROS-free).

The budget monitor asks for a compute tier by how bad its signals are (core/budget/monitor.py); which
of those the ROBOT can live with is the robot's decision, declared in its robot file::

    fallback: [lite, hold]                 # a gait policy: a cheaper policy at the same rate, then stop
    fallback: [lite, decimated:2, safe]    # a pendulum or an arm that tolerates half rate

Steps, each at most once and from dear to cheap:

    lite          the bundle's lite tier (a distilled student), at the full rate
    decimated[:k] the lite policy (or the only one) every k-th tick, holding in between
                  (k: the ``tier_decimation`` parameter when not given)
    safe | hold   the last step, and required: the robot file's safe action | hold the measured
                  pose (position interface; without a robot file, the last action)

A requested tier maps onto the ladder (:meth:`FallbackLadder.apply`): full stays full, safe takes
the stop, and anything in between takes the cheapest *policy* step not beyond it, or the ladder's
first step when there is none (``[decimated:2, safe]`` runs lite as decimated, as a one-policy
bundle always did). So a latency limit that asks for "decimated" on ``[lite, hold]`` gets lite, and
only the budget monitor's deepening (still past the limit on lite) takes the robot to hold. A step
the robot does not list is never taken, whatever is requested.

Without a ``fallback`` entry the default is the robot's: a position interface (a legged gait
trained at its rate stumbles at half of it: docs/robot.md) never decimates, ``[lite, safe]``;
anything else keeps the old behaviour, ``[lite, decimated, safe]``. A default leaves out ``lite``
when the bundle has none; a declared ladder naming a tier the bundle lacks is refused.

A new version without a lite tier (a fine-tuned version, streamed or swapped in by path: the fine-tuner
exports one network) keeps the running bundle's lite tier when the contracts still match
(:func:`keep_lite`): the distilled student stays the robot's same-rate fallback, instead of the ladder
losing its lite step and a position robot falling from full straight to hold under load.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Mapping

from lowrl_ros.core.runtime.tiers import ComputeTier

STOPS = ("safe", "hold")
STEP_TIERS = {"lite": ComputeTier.LITE, "decimated": ComputeTier.DECIMATED, "safe": ComputeTier.SAFE,
              "hold": ComputeTier.SAFE}
EXAMPLE = "e.g. fallback: [lite, hold] or [lite, decimated:2, safe]"
# What a lite student must share with its full tier: observation, rate, action limits.
CONTRACT_KEYS = ("obs_names", "obs_offset", "obs_scale", "obs_clip", "control_period_s", "action_names",
                 "action_low", "action_high")


def contract_difference(lite: Any, full: Any) -> str:
    """The first contract field (CONTRACT_KEYS) where ``lite`` differs from ``full``, with both values; "" if none."""
    for key in CONTRACT_KEYS:
        mine, theirs = getattr(lite, key, None), getattr(full, key, None)
        if mine != theirs:
            return f"{key} ({mine!r} vs {theirs!r})"
    return ""


def keep_lite(new: Any, running: Any) -> Any:
    """``new`` with the running bundle's lite tier when ``new`` has one tier and the running lite still fits
    its contract; otherwise ``new`` unchanged. A shallow copy: the loaded policies are shared, not rebuilt.

    Why: a fine-tuned version is one network (the fine-tuner exports its actor); without this, a swap to it
    would drop the lite step from the robot's ladder. The student was distilled from an earlier version,
    but on the same contract, so it remains a same-rate policy that walks (docs/budget.md).
    """
    policies = getattr(new, "policies", {})
    old = getattr(running, "policies", {})
    if len(policies) != 1 or "lite" not in old or len(old) < 2:
        return new
    full = next(iter(policies.values()))
    if contract_difference(old["lite"].contract, full.contract):
        return new
    kept = copy.copy(new)
    kept.policies = {"full": full, "lite": old["lite"]}
    kept.lite_from = int(getattr(running, "lite_from", 0) or getattr(running, "version", 0))
    return kept


class LadderError(ValueError):
    """A fallback ladder that cannot be used; the message names the entry and the fix."""


@dataclass(frozen=True)
class LadderStep:
    """One step below full: its name (``lite``, ``decimated``, ``safe``, ``hold``), tier and decimation
    factor (``decimated:k``; 0: the ``tier_decimation`` parameter)."""

    name: str
    tier: ComputeTier
    decimation: int = 0

    @property
    def label(self) -> str:
        return f"{self.name}:{self.decimation}" if self.decimation else self.name

    @property
    def is_stop(self) -> bool:
        return self.name in STOPS


@dataclass(frozen=True)
class FallbackLadder:
    """The steps below full the robot allows, dear to cheap, the last one a stop.

    Attributes:
        steps: the allowed steps below full.
        declared: True when the robot file declares it (False: the robot's default).
    """

    steps: tuple[LadderStep, ...]
    declared: bool = False

    @classmethod
    def parse(cls, value: Any, where: str = "robot file") -> "FallbackLadder":
        """Parse a ``fallback`` entry (a list of step names). Raises LadderError naming the bad entry."""
        if not isinstance(value, list) or not value:
            raise LadderError(f"{where}: fallback must be a non-empty list of steps ending in safe or hold, "
                              f"{EXAMPLE}; got {value!r}")
        steps: list[LadderStep] = []
        for i, entry in enumerate(value):
            name, _, k = str(entry).strip().partition(":")
            if not isinstance(entry, str) or name not in STEP_TIERS:
                raise LadderError(f"{where}: fallback[{i}] {entry!r} is unknown; use lite, decimated[:k], safe or hold")
            factor = 0
            if k:
                if name != "decimated" or not k.isdigit() or not 2 <= int(k) <= 100:
                    raise LadderError(f"{where}: fallback[{i}] {entry!r}: only decimated takes a factor, an integer "
                                      "2..100 (decimated:2 runs the policy at half rate)")
                factor = int(k)
            step = LadderStep(name, STEP_TIERS[name], factor)
            if steps and step.tier <= steps[-1].tier:
                raise LadderError(f"{where}: fallback[{i}] {entry!r} comes after {steps[-1].label!r}; list each step "
                                  "once, dear to cheap: lite, decimated, then safe or hold")
            steps.append(step)
        if not steps[-1].is_stop:
            raise LadderError(f"{where}: fallback ends in {steps[-1].label!r}; the last step must be a controlled "
                              f"stop, safe or hold ({EXAMPLE})")
        return cls(tuple(steps), declared=True)

    @classmethod
    def default(cls, interface: str | None, has_lite: bool) -> "FallbackLadder":
        """The ladder of a robot that declares none: a position interface never decimates (see module doc)."""
        names = ["lite"] if has_lite else []
        names += ["safe"] if interface == "position" else ["decimated", "safe"]
        return cls(tuple(LadderStep(n, STEP_TIERS[n]) for n in names))

    @classmethod
    def for_robot(cls, raw: Mapping[str, Any] | None, has_lite: bool = True,
                  where: str = "robot file") -> "FallbackLadder":
        """The robot file's declared ladder, or its default (``raw``: the whole file; None: no robot file)."""
        if raw is None:
            return cls.default(None, has_lite)
        if "fallback" in raw:
            ladder = cls.parse(raw["fallback"], where)
            ladder.check_interface(raw.get("interface", "position"), where)
            return ladder
        return cls.default(raw.get("interface", "position"), has_lite)

    # ---- the mapping ------------------------------------------------------------------------
    @property
    def tiers(self) -> tuple[ComputeTier, ...]:
        """Every tier the robot may run, full first."""
        return (ComputeTier.FULL,) + tuple(s.tier for s in self.steps)

    @property
    def stop(self) -> LadderStep:
        return self.steps[-1]

    def step(self, tier: ComputeTier) -> LadderStep | None:
        """The step that runs ``tier`` (None for full or a tier off the ladder)."""
        return next((s for s in self.steps if s.tier == tier), None)

    def apply(self, requested: int | str | ComputeTier) -> ComputeTier:
        """The tier the robot runs when ``requested`` is asked for (see the module docstring)."""
        tier = ComputeTier.parse(requested)
        if tier == ComputeTier.FULL:
            return tier
        if tier == ComputeTier.SAFE:
            return self.stop.tier
        policy_steps = [s.tier for s in self.steps if not s.is_stop and s.tier <= tier]
        return max(policy_steps) if policy_steps else self.steps[0].tier

    def cheaper(self, tier: ComputeTier) -> ComputeTier | None:
        """The next step cheaper than ``tier`` (None below the stop)."""
        return next((t for t in self.tiers if t > tier), None)

    def dearer(self, tier: ComputeTier) -> ComputeTier:
        """The next step dearer than ``tier`` (full at the top): recovery goes one step at a time."""
        return max((t for t in self.tiers if t < tier), default=ComputeTier.FULL)

    def last_policy_step(self, tier: ComputeTier) -> bool:
        """True when the next cheaper step from ``tier`` is the stop: the policy has nowhere cheaper to go."""
        return tier != self.stop.tier and self.cheaper(tier) == self.stop.tier

    def describe(self) -> str:
        return " -> ".join(["full"] + [s.label for s in self.steps])

    # ---- against a bundle --------------------------------------------------------------------
    def check_bundle(self, policies: Mapping[str, Any], where: str = "robot file") -> None:
        """Refuse a ladder the bundle cannot run: ``lite`` without a lite tier, a lite tier whose contract
        is not the full one's (observation, rate, action limits). Raises LadderError naming the entry."""
        if self.step(ComputeTier.LITE) is None:
            return
        if "lite" not in policies or len(policies) < 2:
            raise LadderError(f"{where}: fallback lists 'lite' but the policy bundle has tiers {', '.join(policies)}; "
                              "build one with a lite tier (lowrl compress --lite, docs/budget.md) or drop lite "
                              "from fallback")
        full = policies.get("full", next(iter(policies.values()))).contract
        difference = contract_difference(policies["lite"].contract, full)
        if difference:
            raise LadderError(f"{where}: fallback lists 'lite' but the bundle's lite tier has another {difference} "
                              "than its full tier; a lite student must keep the teacher's contract (same "
                              "observation, rate, action limits)")

    def check_interface(self, interface: str | None, where: str = "robot file") -> None:
        """``hold`` holds joint positions: refused on a velocity or effort interface."""
        if self.stop.name == "hold" and interface not in (None, "position"):
            raise LadderError(f"{where}: fallback ends in 'hold', which commands joint positions, but interface is "
                              f"{interface}; end it in safe (the robot file's safe action)")
