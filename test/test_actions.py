"""The robot file's action, output and safety sections (core/runtime/actions.py) and the controller's
robot-file path: scale/offset/clamp/rate limit, mapping by name, the applied-twice refusal, the safe
action per interface, hold = measured pose, timed soft start, the e-stop latch. No ROS; a fake clock.

The policies here are small stand-ins whose output a test sets per step (the controller only calls
``act``); their contracts are real PolicyContracts, so the contract checks are the real ones.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from lowrl_ros.core.runtime.actions import (ActionConfig, ActionProcessor, OutputConfig, SafetyConfig,
                                            measured_positions)
from lowrl_ros.core.runtime.artifact import PolicyContract
from lowrl_ros.core.runtime.control import RESET, ControlConfig, EStopLatch, PolicyController
from lowrl_ros.core.runtime.tiers import ComputeTier
from lowrl_ros.core.types import Level

JOINTS = ("hip", "knee", "ankle")
POSE = [0.0, 0.8, -1.5]


def contract(**kw) -> PolicyContract:
    base = dict(obs_names=("a", "b"), action_names=("a0", "a1", "a2"), action_low=(-10.0,) * 3,
                action_high=(10.0,) * 3)
    return PolicyContract(**{**base, **kw})


def robot(action=None, output=None, safety=None, interface="position", joints=JOINTS, pose=POSE, **kw):
    data = {"joints": list(joints), "default_pose": pose, "interface": interface, "action": action,
            "output": output, "safety": safety}
    return ActionProcessor.from_robot_dict(data, kw.get("contract", contract()))


# ---- parsing ---------------------------------------------------------------------------------

def test_sections_parse_with_safe_defaults_per_interface():
    assert SafetyConfig.from_dict(None, "position").safe_action == "hold"
    assert SafetyConfig.from_dict({}, "velocity").safe_action == "zero"
    assert SafetyConfig.from_dict(None, "effort").safe_action == "zero"
    s = SafetyConfig.from_dict({"estop_topic": "stop", "reset_topic": "go", "soft_start_s": 2}, "position")
    assert (s.estop_topic, s.reset_topic, s.soft_start_s) == ("stop", "go", 2.0)
    o = OutputConfig.from_dict({"type": "joint_trajectory", "joints": ["knee", "hip", "ankle"]}, "position")
    assert o.topic == "joint_trajectory_controller/joint_trajectory" and o.joints == ("knee", "hip", "ankle")
    a = ActionConfig.from_dict({"scale": 0.5, "offset": "default_pose", "rate_limit": [1, 2, 3],
                                "limits": {"lower": [-1, -1, -2], "upper": [1, 2, 0]}})
    assert a.scale == 0.5 and a.offset == "default_pose" and a.rate_limit == (1.0, 2.0, 3.0)


@pytest.mark.parametrize("interface", ["position"])
def test_zero_is_refused_on_a_position_interface(interface):
    with pytest.raises(ValueError, match="safe_action 'zero' is refused for interface position.*0 rad.*hold"):
        SafetyConfig.from_dict({"safe_action": "zero"}, interface)


@pytest.mark.parametrize("interface", ["velocity", "effort"])
def test_zero_is_allowed_on_velocity_and_effort_but_hold_is_not(interface):
    assert SafetyConfig.from_dict({"safe_action": "zero"}, interface).safe_action == "zero"
    with pytest.raises(ValueError, match=f"'hold' is refused for interface {interface}"):
        SafetyConfig.from_dict({"safe_action": "hold"}, interface)


@pytest.mark.parametrize("make, message", [
    (lambda: ActionConfig.from_dict({"scael": 1}), "unknown key action.scael; known keys of 'action': scale"),
    (lambda: ActionConfig.from_dict({"scale": [1, 0, 1]}), "action.scale contains 0"),
    (lambda: ActionConfig.from_dict({"offset": "home"}), "action.offset 'home' is unknown"),
    (lambda: ActionConfig.from_dict({"rate_limit": -1}), "action.rate_limit must be >= 0"),
    (lambda: ActionConfig.from_dict({"limits": {"lower": [0, 0, 0]}}), "needs both lower and upper"),
    (lambda: ActionConfig.from_dict({"limits": {"lower": [0, 1, 0], "upper": [1, 1, 1]}}), "joint 1 has lower"),
    (lambda: ActionConfig.from_dict({"scale": [1, "x", 1]}), "action.scale must hold numbers only"),
    (lambda: OutputConfig.from_dict({}, "torque"), "interface 'torque' is unknown; use one of position"),
    (lambda: OutputConfig.from_dict({"type": "twist"}), "output.type 'twist' is unknown"),
    (lambda: OutputConfig.from_dict({"type": "joint_trajectory"}, "effort"), "joint_trajectory carries joint "
                                                                               "positions, but interface is effort"),
    (lambda: OutputConfig.from_dict({"joints": ["a", "a"]}), "names 'a' twice"),
    (lambda: SafetyConfig.from_dict({"soft_start_s": -1}), "soft_start_s must be 0..60"),
    (lambda: SafetyConfig.from_dict({"reset_topic": ""}), "reset_topic is empty"),
    (lambda: SafetyConfig.from_dict({"estop": "x"}), "unknown key safety.estop"),
])
def test_bad_sections_give_one_line_errors_naming_the_key(make, message):
    with pytest.raises(ValueError, match=message) as info:
        make()
    assert "\n" not in str(info.value)


# ---- the processor ---------------------------------------------------------------------------

def test_scale_offset_to_default_pose_and_clamp_to_joint_limits():
    p = robot({"scale": 0.5, "offset": "default_pose", "limits": {"lower": [-1, -1, -2], "upper": [1, 1, 0]}})
    np.testing.assert_allclose(p.transform([0.0, 0.0, 0.0]), [0.0, 0.8, -1.5])  # y = 0 -> the default pose
    np.testing.assert_allclose(p.transform([1.0, 0.2, -2.0]), [0.5, 0.9, -2.0])  # ankle clamped at -2
    np.testing.assert_allclose(p.transform([4.0, 1.0, 4.0]), [1.0, 1.0, 0.0])  # all three clamped high
    p = robot({"scale": [1, 2, 3], "offset": [1, 1, 1]})
    np.testing.assert_allclose(p.transform([1.0, 1.0, 1.0]), [2.0, 3.0, 4.0])


def test_rate_limit_is_per_joint_times_the_elapsed_period():
    p = robot({"rate_limit": [1.0, 10.0, 0.0]})  # rad/s; 0 = none
    prev = np.zeros(3)
    np.testing.assert_allclose(p.limit_rate(np.array([5.0, 5.0, 5.0]), prev, 0.02), [0.02, 0.2, 5.0])
    np.testing.assert_allclose(p.limit_rate(np.array([-5.0, 0.1, 5.0]), prev, 0.1), [-0.1, 0.1, 5.0])
    np.testing.assert_allclose(p.limit_rate(np.array([5.0, 5.0, 5.0]), None, 0.02), [5.0, 5.0, 5.0])


def test_mapping_to_the_controller_order_is_by_name():
    p = robot(output={"joints": ["ankle", "hip", "knee"]})
    np.testing.assert_array_equal(p.to_controller(np.array([1.0, 2.0, 3.0])), [3.0, 1.0, 2.0])
    assert p.controller_joints == ("ankle", "hip", "knee")
    np.testing.assert_array_equal(robot().to_controller(np.array([1.0, 2.0, 3.0])), [1.0, 2.0, 3.0])


def test_a_joint_missing_on_either_side_is_a_configure_time_error():
    with pytest.raises(ValueError, match="output.joints names 'toe', which is not in joints"):
        robot(output={"joints": ["hip", "knee", "toe"]})
    with pytest.raises(ValueError, match="joint 'ankle' of the policy is missing in output.joints"):
        robot(output={"joints": ["hip", "knee"]})
    with pytest.raises(ValueError, match="joints lists 2 joints but the policy has 3 actions"):
        robot(joints=("hip", "knee"), pose=[0, 0])
    with pytest.raises(ValueError, match="list joints in the policy's order"):
        robot(contract=contract(action_names=("knee", "hip", "ankle")))


def test_scale_and_offset_in_both_the_artifact_and_the_robot_file_are_refused():
    isaac = contract(action_scale=(0.5,) * 3, action_offset=tuple(POSE))
    with pytest.raises(ValueError, match="applied twice.*remove scale and offset from the robot file"):
        robot({"scale": 0.5, "offset": "default_pose"}, contract=isaac)
    with pytest.raises(ValueError, match="applied twice"):
        robot({"offset": [0.1, 0.1, 0.1]}, contract=contract(action_scale=(2.0,) * 3))
    # One side only: whichever is set applies; identity values on the other side are not "set".
    assert robot({"rate_limit": 1.0}, contract=isaac).scale.tolist() == [1, 1, 1]
    assert robot({"scale": 0.5}, contract=contract(action_scale=(1.0,) * 3)).scale.tolist() == [0.5] * 3
    # A hot-swap is held to the same rule (the controller asks the processor).
    p = robot({"scale": 0.5})
    with pytest.raises(ValueError, match="applied twice"):
        p.check_contract(isaac)


def test_measured_positions_by_name_or_none():
    np.testing.assert_array_equal(measured_positions(["knee", "hip", "ankle", "x"], [2.0, 1.0, 3.0, 9.0], JOINTS),
                                  [1.0, 2.0, 3.0])
    assert measured_positions(["knee", "hip"], [2.0, 1.0], JOINTS) is None  # ankle missing
    assert measured_positions(["hip", "knee", "ankle"], [1.0, 2.0], JOINTS) is None  # short positions
    assert measured_positions(["hip", "knee", "ankle"], [1.0, float("nan"), 3.0], JOINTS) is None


# ---- the controller with a robot file --------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


@dataclass
class Policy:
    """Acts ``value`` (set by the test); the contract is a real one."""

    value: np.ndarray
    contract: PolicyContract

    def act(self, obs):
        return self.value.copy()


@dataclass
class Bundle:
    policies: dict
    version: int = 1

    def smallest(self):
        return list(self.policies.values())[-1]


def controller(action=None, safety=None, interface="position", **config):
    clock = Clock()
    policy = Policy(np.zeros(3), contract())
    estop = EStopLatch()
    proc = robot(action, safety=safety, interface=interface)
    config = {"watchdog_timeout_s": 5.0, **config}
    ctl = PolicyController(ControlConfig(**config), Bundle({"full": policy}), clock=clock, actions=proc, estop=estop)
    return ctl, clock, policy, estop


OBS = np.zeros(2)


def running(action=None, safety=None, **config):
    """controller(), activated, the pose measured at POSE, observed, and the policy run once."""
    ctl, clock, policy, estop = controller(action, safety, **config)
    ctl.activate()
    ctl.set_measured(np.array(POSE))
    ctl.observe(OBS)
    assert ctl.step().source == "policy"
    return ctl, clock, policy, estop


def test_position_nothing_before_observation_and_measured_pose_then_soft_start_from_the_measured_pose():
    ctl, clock, policy, _ = controller({"offset": "default_pose"}, {"soft_start_s": 1.0})
    ctl.activate()
    assert ctl.step().source == "none"
    ctl.observe(OBS)
    result = ctl.step()  # observed but the pose is unknown: still nothing (no "hold" of a guess)
    assert result.source == "none" and "measured" in result.reason
    measured = np.array([0.3, 0.2, -0.4])
    ctl.set_measured(measured)
    first = ctl.step()
    assert first.source == "policy"
    np.testing.assert_allclose(first.action, measured)  # the blend starts exactly at the measured pose
    clock.advance(0.5)
    np.testing.assert_allclose(ctl.step().action, measured + 0.5 * (np.array(POSE) - measured))
    clock.advance(0.6)
    np.testing.assert_allclose(ctl.step().action, POSE)


def test_hold_holds_the_measured_pose_not_the_last_command_or_zero():
    ctl, clock, policy, _ = controller({"scale": 1.0, "offset": "default_pose"}, {"soft_start_s": 0},
                                       watchdog_timeout_s=0.1)
    ctl.activate()
    ctl.set_measured(np.array([0.1, 0.7, -1.4]))
    ctl.observe(OBS)
    policy.value = np.array([0.5, 0.5, 0.5])
    np.testing.assert_allclose(ctl.step().action, [0.5, 1.3, -1.0])
    ctl.set_measured(np.array([0.2, 0.9, -1.2]))  # the robot moved (tracking lag)
    ctl.set_measured(None)  # a message without these joints keeps the last known pose
    clock.advance(0.2)  # watchdog
    result = ctl.step()
    assert result.source == "safe" and result.reason.startswith("watchdog")
    np.testing.assert_allclose(result.action, [0.2, 0.9, -1.2])
    np.testing.assert_allclose(ctl.deactivate(), [0.2, 0.9, -1.2])  # deactivate holds it too


def test_hold_keeps_the_pose_measured_when_the_safe_period_began_even_as_the_joint_sags():
    """A position loop under load sags below its command: holding each tick's measurement would let the
    command follow the sag down (a folding leg). The pose is measured once per safe period."""
    ctl, clock, policy, estop = running({"offset": "default_pose"}, {"soft_start_s": 0})
    estop.update(True, clock())
    entry = np.array([0.1, 0.5, -1.0])
    ctl.set_measured(entry)
    for k in range(1, 20):
        result = ctl.step()
        assert result.source == "safe"
        np.testing.assert_allclose(result.action, entry)  # not the sagging measurement below
        ctl.set_measured(entry - 0.01 * k)
    np.testing.assert_allclose(ctl.deactivate(), entry)  # deactivate in the same safe period holds it too
    # A new safe period measures afresh: released, the policy runs, then the watchdog trips.
    ctl.activate()
    estop.update(False, clock())
    estop.reset()
    ctl.observe(OBS)
    assert ctl.step().source == "policy"
    ctl.set_measured(np.array([0.3, 0.3, -0.3]))
    clock.advance(6.0)  # the watchdog (5 s)
    result = ctl.step()
    assert result.source == "safe" and result.reason.startswith("watchdog")
    np.testing.assert_allclose(result.action, [0.3, 0.3, -0.3])


def test_nothing_goes_out_to_a_position_robot_while_its_reset_is_under_way():
    """The reset owns the joints: a hold would fight it, and one at the pose from before the request, arriving once
    the robot was put back, pulled the quadruped's joints toward the old pose (its episodes began moving at
    3 rad/s). The soft start after the ready begins at a pose measured after the request."""
    ctl, clock, policy, estop = running({"offset": "default_pose"}, {"soft_start_s": 0.2})
    ctl.set_measured(np.array([0.5, -0.5, 0.5]))  # where the last episode left the robot
    ctl.hold_until_ready("reset requested")
    for pose in ([0.1, 0.2, 0.3], [0.0, 0.8, -1.5]):  # the reset moves the robot to its start pose
        result = ctl.step()
        assert result.source == RESET and result.action.size == 0 and result.reason == "reset requested"
        ctl.set_measured(np.array(pose))
    ctl.release_hold()
    ctl.observe(OBS)
    first = ctl.step()
    assert first.source == "policy"
    np.testing.assert_allclose(first.action, [0.0, 0.8, -1.5])  # the soft start's first output: that pose
    ctl.hold_until_ready("reset requested")
    estop.update(True, clock())  # an e-stop during a reset: the pose measured since is held
    ctl.set_measured(np.array([0.2, 0.2, 0.2]))
    for pose in ([0.3, 0.3, 0.3], [0.4, 0.4, 0.4]):
        result = ctl.step()
        assert "e-stop" in result.reason
        np.testing.assert_allclose(result.action, [0.2, 0.2, 0.2])
        ctl.set_measured(np.array(pose))


def test_a_velocity_robot_is_sent_zero_while_its_reset_is_under_way():
    ctl, clock, policy, _ = controller({}, {"soft_start_s": 0}, interface="velocity")
    ctl.activate()
    ctl.observe(OBS)
    ctl.hold_until_ready("reset requested")
    result = ctl.step()
    assert result.source == "safe"
    np.testing.assert_allclose(result.action, 0.0)  # left alone, the controller would keep the last command


def test_rate_limit_applies_to_what_goes_out_by_the_elapsed_time():
    ctl, clock, policy, _ = controller({"rate_limit": 1.0}, {"soft_start_s": 0}, interface="velocity")
    ctl.activate()
    ctl.observe(OBS)
    policy.value = np.array([1.0, -1.0, 0.0])
    first = ctl.step().action  # velocity: the first output after activation has nothing to limit from
    np.testing.assert_allclose(first, [1.0, -1.0, 0.0])
    policy.value = np.array([-1.0, 1.0, 0.0])
    clock.advance(0.02)
    np.testing.assert_allclose(ctl.step().action, [0.98, -0.98, 0.0])
    clock.advance(0.1)  # a longer period allows a larger step
    np.testing.assert_allclose(ctl.step().action, [0.88, -0.88, 0.0])


def test_position_without_soft_start_the_first_command_is_rate_limited_from_the_measured_pose():
    ctl, clock, policy, _ = controller({"rate_limit": 2.0}, {"soft_start_s": 0}, control_period_s=0.02)
    ctl.activate()
    ctl.set_measured(np.array([0.5, 0.5, 0.5]))
    ctl.observe(OBS)
    policy.value = np.array([1.0, -1.0, 0.5])
    np.testing.assert_allclose(ctl.step().action, [0.54, 0.46, 0.5])  # 2 rad/s x one 20 ms period


def test_estop_latches_the_safe_action_until_a_reset_across_swaps_and_tiers():
    ctl, clock, policy, estop = running({"offset": "default_pose"}, {"soft_start_s": 0.5})
    assert estop.status().level == Level.OK
    assert estop.update(True, clock())
    ctl.set_measured(np.array([0.1, 0.1, 0.1]))
    result = ctl.step()
    assert result.source == "safe" and "e-stop" in result.reason
    np.testing.assert_allclose(result.action, [0.1, 0.1, 0.1])
    status = estop.status()
    assert status.level == Level.ERROR and "estop" in status.message and "release the e-stop" in status.message
    ok, line = estop.reset()
    assert not ok and "still reads true" in line and estop.latched
    estop.update(False, clock())
    assert ctl.step().source == "safe"  # releasing the button is not a reset
    ctl.swap(Bundle({"full": Policy(np.zeros(3), contract(version=2))}, version=2))
    ctl.set_tier(ComputeTier.SAFE)
    ctl.set_tier(ComputeTier.FULL)
    ctl.deactivate()
    ctl.activate()
    ctl.observe(OBS)
    assert ctl.step().source == "safe" and estop.status().level == Level.ERROR
    ok, _ = estop.reset()
    assert ok and estop.status().level == Level.OK
    result = ctl.step()  # back to the policy, blended from the last command (the held pose)
    assert result.source == "policy"
    np.testing.assert_allclose(result.action, [0.1, 0.1, 0.1])
    clock.advance(0.5)
    np.testing.assert_allclose(ctl.step().action, POSE)


def test_velocity_interface_safe_action_is_zero_and_soft_start_blends_from_zero():
    ctl, clock, policy, _ = controller(None, {"soft_start_s": 1.0}, interface="velocity")
    ctl.activate()
    ctl.observe(OBS)  # no measured pose needed on a velocity interface
    policy.value = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(ctl.step().action, [0, 0, 0])
    clock.advance(0.25)
    np.testing.assert_allclose(ctl.step().action, [0.25, 0.5, 0.75])
    np.testing.assert_allclose(ctl.deactivate(), [0, 0, 0])


def test_a_swapped_policy_with_its_own_scale_is_refused_when_the_robot_file_scales():
    ctl, *_ = controller({"scale": 0.5})
    scaled = Bundle({"full": Policy(np.zeros(3), contract(version=2, action_scale=(0.5,) * 3))}, version=2)
    with pytest.raises(ValueError, match="applied twice"):
        ctl.swap(scaled)


def test_the_shipped_legged_example_builds_with_the_safe_defaults():
    from pathlib import Path

    import yaml

    data = yaml.safe_load((Path(__file__).parents[1] / "config/robots/legged_example.yaml").read_text())
    joints = tuple(data["joints"])
    twelve = PolicyContract(obs_names=("o",), action_names=tuple(f"a{i}" for i in range(12)),
                            action_low=(-100.0,) * 12, action_high=(100.0,) * 12)
    p = ActionProcessor.from_robot_dict(data, twelve)
    assert p.interface == "position" and p.safety.safe_action == "hold" and p.safety.soft_start_s > 0
    np.testing.assert_allclose(p.transform(np.zeros(12)), data["default_pose"])  # y = 0: stand in the default pose
    by_name = dict(zip(p.controller_joints, p.to_controller(np.arange(12.0))))
    assert all(by_name[j] == i for i, j in enumerate(joints))  # every joint lands under its own name
    assert p.controller_joints[:3] == ("FL_hip_joint", "FL_thigh_joint", "FL_calf_joint")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_robot_file_policy_output_not_finite_is_the_safe_action_huge_finite_is_clamped(bad):
    ctl, clock, policy, _ = controller({"limits": {"lower": [-1.0] * 3, "upper": [1.0] * 3}}, {"soft_start_s": 0})
    ctl.activate()
    ctl.set_measured(np.array([0.1, 0.2, 0.3]))
    ctl.observe(OBS)
    policy.value = np.array([0.0, bad, 0.0])
    result = ctl.step()
    assert result.source == "safe" and "invalid action" in result.reason
    np.testing.assert_array_equal(result.action, [0.1, 0.2, 0.3])  # hold: the measured pose
    policy.value = np.array([1e200, -1e200, 0.0])  # finite: its square overflows, it is still an action
    clock.advance(0.02)
    ctl.observe(OBS)
    result = ctl.step()
    assert result.source == "policy"
    np.testing.assert_array_equal(result.action, [1.0, -1.0, 0.0])
