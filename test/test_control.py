"""PolicyController: safety, watchdog, soft start, decimation, deadlines and tiers (fake clock, no ROS)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from lowrl_ros.core.runtime.control import (ControlConfig, LatencyWindow, PolicyController,
                                            percentiles_us)
from lowrl_ros.core.runtime.tiers import ComputeTier


class FakeClock:
    """Time moves only when the test says so; each act() call can cost a set time."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


@dataclass
class FakeContract:
    obs_dim: int = 3
    action_dim: int = 1
    action_low: tuple = (-2.0,)
    action_high: tuple = (2.0,)


@dataclass
class FakePolicy:
    """A stand-in for an artifact Policy: returns a fixed action and counts its calls."""

    value: float
    clock: FakeClock | None = None
    cost_s: float = 0.0
    contract: FakeContract = field(default_factory=FakeContract)
    calls: int = 0

    def act(self, obs):
        self.calls += 1
        if self.clock is not None:
            self.clock.advance(self.cost_s)
        return np.array([self.value])


@dataclass
class FakeBundle:
    policies: dict
    version: int = 1

    def smallest(self):
        return list(self.policies.values())[-1]


def make(config=None, policies=None, clock=None):
    clock = clock or FakeClock()
    policies = policies or {"full": FakePolicy(1.0)}
    ctl = PolicyController(config or ControlConfig(soft_start_steps=0), FakeBundle(policies), clock=clock)
    return ctl, clock


OBS = np.zeros(3)


def test_inactive_gives_safe_action_then_policy_after_activation():
    ctl, clock = make()
    assert ctl.step().source == "safe"
    ctl.activate()
    ctl.observe(OBS)
    result = ctl.step()
    assert result.source == "policy" and result.action.tolist() == [1.0]
    assert ctl.deactivate().tolist() == [0.0]
    assert ctl.step().reason == "inactive"


def test_bad_observation_gives_safe_action_with_reason_until_a_good_one():
    ctl, _ = make()
    ctl.activate()
    ctl.observe(None, "observation entry 1 is nan (NaN/Inf)")
    result = ctl.step()  # nothing was commanded yet: a bad first observation commands nothing either
    assert result.source == "none" and "NaN" in result.reason and result.action.size == 0
    assert "NaN" in ctl.last_error
    ctl.observe(OBS)
    assert ctl.step().source == "policy"
    ctl.observe(None, "observation entry 1 is nan (NaN/Inf)")
    result = ctl.step()
    assert result.source == "safe" and "NaN" in result.reason
    ctl.observe(OBS)
    assert ctl.step().source == "policy"


def test_nothing_is_commanded_before_the_first_good_observation():
    ctl, clock = make(ControlConfig(soft_start_steps=0, safe_action="hold"))
    ctl.activate()
    for _ in range(3):
        clock.advance(1.0)  # even long past the watchdog: there is nothing to watch yet
        result = ctl.step()
        assert result.source == "none" and "first observation" in result.reason
    ctl.set_tier(ComputeTier.SAFE)
    assert ctl.step().source == "none"
    ctl.observe(OBS)
    assert ctl.step().source == "safe"  # the safe tier now has something to say
    ctl.set_tier(ComputeTier.FULL)
    assert ctl.step().source == "policy"
    ctl.deactivate()
    ctl.activate()  # a new activation waits for a new observation
    assert ctl.step().source == "none"


def test_watchdog_trips_after_timeout():
    ctl, clock = make(ControlConfig(soft_start_steps=0, watchdog_timeout_s=0.1))
    ctl.activate()
    assert "first observation" in ctl.step().reason
    ctl.observe(OBS)
    clock.advance(0.09)
    assert ctl.step().source == "policy"
    clock.advance(0.02)
    result = ctl.step()
    assert result.source == "safe" and result.reason.startswith("watchdog")
    assert ctl.last_error.startswith("watchdog") and ctl.observation_age() == pytest.approx(0.11)


def test_soft_start_blends_from_safe_action_after_activation_and_swap():
    ctl, _ = make(ControlConfig(soft_start_steps=4))
    ctl.activate()
    ctl.observe(OBS)
    actions = [ctl.step().action[0] for _ in range(6)]
    np.testing.assert_allclose(actions, [0.25, 0.5, 0.75, 1.0, 1.0, 1.0])
    ctl.swap(FakeBundle({"full": FakePolicy(-1.0)}, version=2))
    actions = [ctl.step().action[0] for _ in range(4)]
    np.testing.assert_allclose(actions, [-0.25, -0.5, -0.75, -1.0])


def test_clamps_always():
    ctl, _ = make(policies={"full": FakePolicy(50.0)})
    ctl.activate()
    ctl.observe(OBS)
    assert ctl.step().action.tolist() == [2.0]


def test_non_finite_policy_output_never_reaches_actuators():
    ctl, _ = make(policies={"full": FakePolicy(float("nan"))})
    ctl.activate()
    ctl.observe(OBS)
    result = ctl.step()
    assert result.source == "safe" and "invalid action" in result.reason


def test_fixed_rate_decimation_holds_between_policy_ticks():
    full = FakePolicy(1.0)
    ctl, _ = make(ControlConfig(mode="fixed_rate", decimation=3, soft_start_steps=0), {"full": full})
    ctl.activate()
    ctl.observe(OBS)
    sources = [ctl.step().source for _ in range(7)]
    assert sources == ["policy", "hold", "hold"] * 2 + ["policy"]
    assert full.calls == 3


def test_deadline_misses_counted_against_reference_time():
    clock = FakeClock()
    slow = FakePolicy(1.0, clock=clock, cost_s=0.004)
    ctl, _ = make(ControlConfig(control_period_s=0.01, soft_start_steps=0), {"full": slow}, clock)
    ctl.activate()
    ctl.observe(OBS)
    ctl.step(reference_time=clock())  # 4 ms: in time
    assert ctl.deadline_misses == 0
    ctl.step(reference_time=clock() - 0.008)  # tick started 8 ms late + 4 ms compute
    assert ctl.deadline_misses == 1
    p50, p99 = ctl.latency.percentiles_us()
    assert p50 == pytest.approx(4000.0) and p99 == pytest.approx(4000.0)
    assert ctl.stats()["deadline_misses"] == 1.0 and ctl.stats()["ticks"] == 2.0


def test_tiers_full_lite_decimated_safe_with_two_policies():
    full, lite = FakePolicy(1.0), FakePolicy(0.5)
    ctl, _ = make(ControlConfig(soft_start_steps=0, tier_decimation=2), {"full": full, "lite": lite})
    ctl.activate()
    ctl.observe(OBS)
    assert ctl.step().action.tolist() == [1.0]
    assert ctl.set_tier(ComputeTier.LITE) == "compute tier full -> lite"
    assert ctl.set_tier("lite") is None  # no switch, nothing to report
    assert ctl.step().action.tolist() == [0.5]
    assert "decimated" in ctl.set_tier(2)
    sources = [ctl.step().source for _ in range(4)]
    assert sources.count("policy") == 2 and sources.count("hold") == 2
    assert lite.calls == 3 and full.calls == 1
    ctl.set_tier(ComputeTier.SAFE)
    result = ctl.step()
    assert result.source == "safe" and result.action.tolist() == [0.0]
    ctl.set_tier(ComputeTier.FULL)
    assert ctl.step().action.tolist() == [1.0]


def test_fixed_rate_output_period_grows_below_lite():
    full, lite = FakePolicy(1.0), FakePolicy(0.5)
    ctl, _ = make(ControlConfig(mode="fixed_rate", control_period_s=0.01, tier_decimation=4, soft_start_steps=0),
                  {"full": full, "lite": lite})
    ctl.activate()
    ctl.observe(OBS)
    periods = {}
    for tier in ComputeTier:
        ctl.set_tier(tier)
        periods[tier] = ctl.output_period_s()
        assert ctl.step().source == ("safe" if tier == ComputeTier.SAFE else "policy")  # every output acts
    assert periods == {ComputeTier.FULL: 0.01, ComputeTier.LITE: 0.01,
                       ComputeTier.DECIMATED: 0.04, ComputeTier.SAFE: 0.1}  # safe: the keep-alive period
    no_keepalive, _ = make(ControlConfig(mode="fixed_rate", control_period_s=0.01, tier_decimation=4,
                                         safe_period_s=0.0))
    no_keepalive.set_tier(ComputeTier.SAFE)
    assert no_keepalive.output_period_s() == pytest.approx(0.04)
    with pytest.raises(ValueError, match="safe_period_s"):
        ControlConfig(safe_period_s=-1.0)


def test_lite_with_one_policy_goes_straight_to_decimated():
    ctl, _ = make()
    line = ctl.set_tier(ComputeTier.LITE)
    assert ctl.tier == ComputeTier.DECIMATED and "ladder is full -> decimated -> safe" in line
    assert ctl.requested_tier == ComputeTier.LITE


@pytest.mark.parametrize("mode, expected", [("zero", 0.0), ("hold", 1.0), ("default_pose", -0.5)])
def test_safe_action_modes(mode, expected):
    cfg = ControlConfig(soft_start_steps=0, safe_action=mode, default_pose=(-0.5,) if mode == "default_pose" else ())
    ctl, _ = make(cfg)
    ctl.activate()
    ctl.observe(OBS)
    ctl.step()  # policy: 1.0
    ctl.set_tier(ComputeTier.SAFE)
    assert ctl.step().action.tolist() == [expected]


def test_swap_rejects_a_different_io_contract():
    ctl, _ = make()
    other = FakePolicy(1.0, contract=FakeContract(obs_dim=5))
    with pytest.raises(ValueError, match="must keep the I/O contract"):
        ctl.swap(FakeBundle({"full": other}))


def test_default_pose_size_checked():
    with pytest.raises(ValueError, match="default_pose has 2 values"):
        make(ControlConfig(safe_action="default_pose", default_pose=(0.0, 0.0)))


@pytest.mark.parametrize("kwargs, message", [
    (dict(mode="sometimes"), "mode 'sometimes' is unknown"),
    (dict(control_period_s=0.0), "control_period_s"),
    (dict(decimation=0), "decimation must be"),
    (dict(watchdog_timeout_s=0.0), "watchdog_timeout_s"),
    (dict(soft_start_steps=-1), "soft_start_steps"),
    (dict(safe_action="brake"), "safe_action 'brake'"),
    (dict(safe_action="default_pose"), "default_pose is empty"),
    (dict(deadline_s=-1.0), "deadline_s"),
])
def test_config_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ControlConfig(**kwargs)


def test_latency_window_keeps_recent_values():
    window = LatencyWindow(3)
    assert np.isnan(window.percentiles_us()[0])
    for v in (1.0, 0.001, 0.001, 0.001):
        window.add(v)
    assert len(window) == 3 and window.percentiles_us()[1] == pytest.approx(1000.0)


@pytest.mark.parametrize("size, added", [(1, 1), (2, 5), (7, 7), (100, 250), (1000, 1000), (1000, 2345)])
def test_latency_window_percentiles_match_numpy_over_the_newest_values(size, added):
    rng = np.random.default_rng(size + added)
    values = rng.lognormal(-8, 1, added)
    window = LatencyWindow(size)
    for v in values:
        window.add(float(v))
    newest = values[-size:]
    assert len(window) == min(size, added)
    assert sorted(window.snapshot()) == sorted(newest)
    want = np.percentile(newest, [50, 99]) * 1e6
    assert window.percentiles_us() == pytest.approx(tuple(want), rel=1e-12)
    assert np.isnan(percentiles_us(np.zeros(0))).all()


def test_check_config_refuses_a_default_pose_of_the_wrong_size_before_it_is_applied():
    """A live change is checked against the running policy (the node's on-set callback calls this)."""
    c, _ = make()
    c.check_config(ControlConfig(safe_action="default_pose", default_pose=(0.3,)))  # one action: fits
    bad = ControlConfig(safe_action="default_pose", default_pose=(0.3, 0.3))
    with pytest.raises(ValueError, match="default_pose has 2 values but the policy has 1 actions"):
        c.check_config(bad)
    assert c.config.safe_action == "zero"  # checking changed nothing


def test_fake_policy_satisfies_the_policy_protocol():
    from lowrl_ros.core.types import Policy

    assert isinstance(FakePolicy(0.5), Policy)


def test_explore_std_adds_noise_at_the_full_tier_only_within_the_limits_and_never_to_a_teleop_action():
    policies = {"full": FakePolicy(0.0), "lite": FakePolicy(-1.0)}
    clock = FakeClock()
    ctl = PolicyController(ControlConfig(soft_start_steps=0, explore_std=0.6), FakeBundle(policies), clock=clock,
                           rng=np.random.default_rng(0))
    ctl.activate()
    ctl.observe(OBS)
    full = [ctl.step() for _ in range(400)]
    got = np.array([r.action[0] for r in full])
    assert all(r.own_action.tolist() == [0.0] for r in full)  # the policy's own action, without the noise
    assert got.max() == 2.0 and got.min() == -2.0  # 0.6 x the half range 2: the limits clip it
    assert 0.9 < np.std(got) < 1.2  # ~1.2 before the clip
    ctl.set_tier(ComputeTier.LITE)
    assert {ctl.step().action[0] for _ in range(20)} == {-1.0}  # the fallback tier runs as it is: no noise
    ctl.set_tier(ComputeTier.FULL)
    ctl.set_override(np.array([0.25]), clock())
    result = ctl.step()
    assert result.intervention and result.action.tolist() == [0.25]
    with pytest.raises(ValueError, match="explore_std"):
        ControlConfig(explore_std=-0.1)
