"""The robot's fallback ladder (core/runtime/ladder.py): parsing, the tier mapping, the bundle checks, and
the policy controller and budget monitor following it, on injected clocks (no ROS)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from lowrl_ros.core.budget.monitor import BudgetConfig, BudgetMonitor, budget_status
from lowrl_ros.core.runtime.control import ControlConfig, PolicyController
from lowrl_ros.core.runtime.ladder import FallbackLadder, LadderError
from lowrl_ros.core.runtime.policy_settings import PolicyNodeSettings, PolicySetup
from lowrl_ros.core.runtime.status import TierView
from lowrl_ros.core.runtime.tiers import ComputeTier as T
from lowrl_ros.core.types import Level

GAIT = ["lite", "hold"]


# --- parsing and defaults ---------------------------------------------------------------------
def test_a_declared_ladder_parses_in_order():
    ladder = FallbackLadder.parse(["lite", "decimated:2", "safe"])
    assert ladder.tiers == (T.FULL, T.LITE, T.DECIMATED, T.SAFE) and ladder.declared
    assert ladder.step(T.DECIMATED).decimation == 2 and ladder.describe() == "full -> lite -> decimated:2 -> safe"


@pytest.mark.parametrize("bad, words", [
    ([], "non-empty list"),
    ("lite", "non-empty list"),
    (["lite", "walk", "safe"], "fallback[1] 'walk' is unknown"),
    (["lite", "decimated:1", "safe"], "fallback[1] 'decimated:1'"),
    (["lite:2", "safe"], "only decimated takes a factor"),
    (["decimated", "lite", "safe"], "fallback[1] 'lite' comes after 'decimated'"),
    (["lite", "safe", "hold"], "fallback[2] 'hold' comes after 'safe'"),
    (["lite", "decimated"], "the last step must be a controlled stop"),
])
def test_a_bad_ladder_names_the_entry(bad, words):
    with pytest.raises(LadderError, match=None) as exc:
        FallbackLadder.parse(bad, "legged.yaml: fallback")
    assert words in str(exc.value) and "legged.yaml" in str(exc.value)


def test_the_default_never_decimates_a_position_robot():
    assert FallbackLadder.default("position", has_lite=True).describe() == "full -> lite -> safe"
    assert FallbackLadder.default("position", has_lite=False).describe() == "full -> safe"
    # Elsewhere (no robot file, velocity, effort) the old behaviour: lite, decimated, safe.
    assert FallbackLadder.default(None, has_lite=False).describe() == "full -> decimated -> safe"
    assert FallbackLadder.default("effort", has_lite=True).describe() == "full -> lite -> decimated -> safe"
    assert FallbackLadder.for_robot({"interface": "position"}, has_lite=True).describe() == "full -> lite -> safe"


def test_hold_is_refused_on_an_effort_interface():
    with pytest.raises(LadderError, match="interface is effort"):
        FallbackLadder.for_robot({"interface": "effort", "fallback": GAIT})


# --- the mapping --------------------------------------------------------------------------------
def test_requests_map_onto_the_ladder_and_a_forbidden_step_is_never_taken():
    gait = FallbackLadder.parse(GAIT)
    assert [gait.apply(t) for t in T] == [T.FULL, T.LITE, T.LITE, T.SAFE]  # decimated: never
    old = FallbackLadder.parse(["decimated:2", "safe"])
    assert [old.apply(t) for t in T] == [T.FULL, T.DECIMATED, T.DECIMATED, T.SAFE]  # lite runs as decimated
    stop = FallbackLadder.parse(["safe"])
    assert [stop.apply(t) for t in T] == [T.FULL, T.SAFE, T.SAFE, T.SAFE]
    assert gait.cheaper(T.LITE) == T.SAFE and gait.cheaper(T.SAFE) is None
    assert gait.dearer(T.SAFE) == T.LITE and gait.dearer(T.LITE) == T.FULL
    assert gait.last_policy_step(T.LITE) and not gait.last_policy_step(T.FULL)


# --- against the bundle -------------------------------------------------------------------------
@dataclass
class Contract:
    obs_names: tuple = ("a", "b", "c")
    action_names: tuple = ("u",)
    action_low: tuple = (-2.0,)
    action_high: tuple = (2.0,)
    control_period_s: float = 0.04
    action_scale: tuple | None = None
    action_offset: tuple | None = None

    @property
    def obs_dim(self):
        return len(self.obs_names)

    @property
    def action_dim(self):
        return len(self.action_names)


@dataclass
class Policy:
    value: float
    contract: Contract = field(default_factory=Contract)
    calls: int = 0
    macs: int = 0

    def act(self, obs):
        self.calls += 1
        return np.array([self.value])


@dataclass
class Bundle:
    policies: dict
    version: int = 1
    path: str = ""

    def smallest(self):
        return self.policies.get("lite") or next(iter(self.policies.values()))


class Clock:
    def __init__(self):
        self.t = 10.0

    def __call__(self):
        return self.t


def controller(policies, ladder=None, **config):
    clock = Clock()
    cfg = ControlConfig(soft_start_steps=0, mode="fixed_rate", control_period_s=0.04, **config)
    ctl = PolicyController(cfg, Bundle(policies), clock=clock, ladder=ladder)
    ctl.activate()
    ctl.observe(np.zeros(3))
    return ctl, clock


def test_a_ladder_naming_lite_is_refused_without_a_lite_tier():
    with pytest.raises(LadderError, match="fallback lists 'lite' but the policy bundle has tiers full"):
        controller({"full": Policy(1.0)}, FallbackLadder.parse(GAIT))


def test_a_lite_student_at_another_rate_is_refused():
    lite = Policy(0.5, Contract(control_period_s=0.02))
    with pytest.raises(LadderError, match="another control_period_s"):
        controller({"full": Policy(1.0), "lite": lite}, FallbackLadder.parse(GAIT))


def test_a_swap_to_a_bundle_without_lite_is_refused_while_the_ladder_names_it():
    ctl, _ = controller({"full": Policy(1.0), "lite": Policy(0.5)}, FallbackLadder.parse(GAIT))
    with pytest.raises(LadderError, match="fallback lists 'lite'"):
        ctl.swap(Bundle({"full": Policy(2.0)}))


def test_a_fine_tuned_one_tier_version_keeps_the_running_lite_tier_and_a_misfit_does_not():
    """The fine-tuner exports one network: swapping to it keeps the bundle's lite student (same contract), so
    the gait ladder still steps to lite at full rate under load; a version on another contract loses it."""
    from lowrl_ros.core.runtime.swap import PolicySwapper, SwapState

    student = Policy(0.5)
    ctl, _ = controller({"full": Policy(1.0), "lite": student})  # the robot's default ladder
    files = {"v2.onnx": Bundle({"full": Policy(2.0)}, 2, "v2.onnx"),
             "v3.onnx": Bundle({"full": Policy(3.0, Contract(control_period_s=0.02))}, 3, "v3.onnx")}
    swapper = PolicySwapper(ctl, files.__getitem__, active_path="v1.lowrl")
    swapper.request_path("v2.onnx")
    assert swapper.wait(5.0) and swapper.take() is not None
    assert ctl.bundle.policies["lite"] is student and ctl.bundle.version == 2
    assert "lite" not in files["v2.onnx"].policies  # the loaded file is not changed
    assert swapper.status().state == SwapState.SWAPPED and "lite tier kept from v1" in swapper.status().message
    assert ctl.ladder.describe() == "full -> lite -> decimated -> safe"
    ctl.set_tier(T.LITE)
    assert ctl.tier == T.LITE and ctl.step().action[0] == 0.5  # the student, at full rate
    swapper.request_path("v3.onnx")  # another rate: the student no longer fits, the ladder loses lite
    assert swapper.wait(5.0) and swapper.take() is not None
    assert set(ctl.bundle.policies) == {"full"} and ctl.tier == T.DECIMATED


# --- the controller follows it ------------------------------------------------------------------
def test_the_gait_ladder_runs_lite_at_full_rate_then_holds():
    full, lite = Policy(1.0), Policy(0.5)
    ctl, clock = controller({"full": full, "lite": lite}, FallbackLadder.parse(GAIT), safe_action="zero")
    line = ctl.set_tier(T.DECIMATED)  # what a latency limit asks for
    assert ctl.tier == T.LITE and "ladder is full -> lite -> hold" in line
    assert ctl.output_period_s() == pytest.approx(0.04)  # the full rate: no decimation
    for _ in range(4):
        clock.t += 0.04
        ctl.observe(np.zeros(3))
        assert ctl.step().source == "policy"
    assert lite.calls == 4 and full.calls == 0
    ctl.set_tier(T.SAFE)
    clock.t += 0.04
    ctl.observe(np.zeros(3))
    out = ctl.step()
    # hold (the last action sent), not the configured zero
    assert out.source == "safe" and "hold" in out.reason and out.action[0] == pytest.approx(0.5)
    assert ctl.set_tier(T.FULL) is not None and ctl.tier == T.FULL


def test_decimated_k_sets_the_rate():
    ctl, _ = controller({"full": Policy(1.0), "lite": Policy(0.5)}, FallbackLadder.parse(["decimated:2", "safe"]),
                        tier_decimation=4)
    ctl.set_tier(T.LITE)
    assert ctl.tier == T.DECIMATED and ctl.output_period_s() == pytest.approx(0.08)


def test_the_policy_settings_read_the_robot_files_ladder(tmp_path):
    robot = tmp_path / "robot.yaml"
    robot.write_text("joints: [j]\ninterface: effort\nobservation:\n  - {term: joint_position, topic: js}\n"
                     "fallback: [lite, decimated:3, safe]\n")
    contract = Contract(obs_names=("j.pos",))
    setup = PolicySetup.plan(PolicyNodeSettings(robot_file=str(robot)), contract, legacy=None, mode="event",
                             control_period_s=0.04, watchdog_timeout_s=0.1, estop=None)
    assert setup.ladder.describe() == "full -> lite -> decimated:3 -> safe"
    robot.write_text(robot.read_text().replace("decimated:3, safe", "hold"))
    with pytest.raises(LadderError, match=r"robot.yaml: fallback ends in 'hold'.*interface is effort"):
        PolicySetup.plan(PolicyNodeSettings(robot_file=str(robot)), contract, legacy=None, mode="event",
                         control_period_s=0.04, watchdog_timeout_s=0.1, estop=None)


def test_the_tier_status_names_the_step_and_warns_before_the_stop():
    gait = FallbackLadder.parse(GAIT)
    entry = TierView(T.LITE, T.DECIMATED, gait).entry()
    assert entry.level == Level.WARN and entry.values["step"] == "lite" and entry.values["ladder"] == gait.describe()
    assert "the next step is hold" in entry.message
    assert "next step" not in TierView(T.LITE, T.LITE, gait).entry().message
    assert TierView(T.FULL, T.FULL, gait).entry().level == Level.OK


# --- the budget monitor follows it --------------------------------------------------------------
def stats(p99_us, ticks, tier):
    return [50.0, p99_us, 0.0, ticks, 10_000.0, 40_000.0, float(tier), 0.0]


def gait_monitor(tmp_path, **config):
    robot = tmp_path / "legged.yaml"
    robot.write_text("joints: [j]\ninterface: position\nobservation:\n  - {term: joint_position, topic: js}\n"
                     "fallback: [lite, hold]\n")
    return BudgetMonitor(BudgetConfig(escalate_after=2, recover_dwell_s=1.0, miss_window_s=1.0, miss_rate_limit=1.0,
                                      cpu_load_limit_pct=0.0, robot_file=str(robot), **config))


def test_the_monitor_refuses_a_bad_robot_file_ladder(tmp_path):
    robot = tmp_path / "bad.yaml"
    robot.write_text("joints: [j]\nobservation:\n  - {term: joint_position, topic: js}\nfallback: [lite]\n")
    with pytest.raises(LadderError, match="bad.yaml: fallback ends in 'lite'"):
        BudgetConfig(robot_file=str(robot))


def test_the_monitor_steps_to_lite_says_there_is_no_cheaper_step_then_holds_and_recovers(tmp_path):
    m = gait_monitor(tmp_path)
    tiers, notes = [], []
    for i in range(80):  # 8 s at 10 Hz; the policy applies each tier one stats message later
        now = i / 10
        applied = tiers[-1] if tiers else T.FULL
        slow = i < 40 and applied != T.SAFE  # even lite misses its deadline for 4 s, then the load goes
        m.on_policy_stats(now, stats(60_000.0 if slow else 5_000.0, 25 * i, applied))
        a = m.step(now, {})
        tiers.append(a.tier)
        notes.append(a.note)
    assert T.DECIMATED not in tiers  # the robot forbids it
    assert tiers[1] == T.LITE  # a hard latency limit asks for decimated: the ladder gives lite
    first_hold = tiers.index(T.SAFE)
    said = [i for i, n in enumerate(notes) if "no cheaper policy step than lite" in n]
    assert said and said[0] < first_hold  # said before the last step is taken
    assert "the next step is hold" in notes[said[0]]
    assert tiers[-1] == T.FULL and T.LITE in tiers[first_hold:]  # back up step by step: hold -> lite -> full
    entries = budget_status(m.step(8.0, {}), m.decider.tier, m.policy, "x", ladder=m.ladder)
    assert entries[-1].values["ladder"] == "full -> lite -> hold"


def test_without_a_robot_file_the_monitor_keeps_every_tier():
    m = BudgetMonitor(BudgetConfig(escalate_after=2, cpu_load_limit_pct=0.0))
    for i in range(3):
        m.on_policy_stats(i / 10, stats(60_000.0, 25 * i, T.FULL))
        a = m.step(i / 10, {})
    assert a.tier == T.DECIMATED and m.ladder.describe() == "full -> lite -> decimated -> safe"


def test_the_shipped_legged_bundle_has_a_lite_student_on_the_teachers_contract():
    """models/legged_ant.lowrl (config/compress_legged_ant.yaml): the imported gait as full, a distilled lite."""
    from pathlib import Path

    from lowrl_ros.core.runtime.bundle import load_bundle
    from lowrl_ros.core.runtime.robot_file import load_robot_file

    root = Path(__file__).resolve().parents[1]
    path = root / "models" / "legged_ant.lowrl"
    assert path.stat().st_size < 100_000
    bundle = load_bundle(path, engine="numpy")
    assert set(bundle.policies) == {"full", "lite"}
    full, lite = bundle.policies["full"], bundle.policies["lite"]
    assert lite.macs < full.macs / 3 and lite.contract.control_period_s == full.contract.control_period_s == 0.04
    FallbackLadder.parse(GAIT).check_bundle(bundle.policies)  # the same contract: a gait ladder accepts it
    raw = load_robot_file(root / "config" / "robots" / "legged_ant.yaml").raw
    assert FallbackLadder.for_robot(raw, has_lite=True).describe() == "full -> lite -> safe"  # never decimated
