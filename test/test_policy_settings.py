"""The policy node's decisions that live in core, without ROS: which robot file it reads (one input path),
how it is timed against the contract, the e-stop latch across a reconfigure, and its extra statuses."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lowrl_ros.core.runtime.control import ControlConfig, ControlTiming, EStopLatch
from lowrl_ros.core.runtime.obs_adapter import ObsAdapterConfig
from lowrl_ros.core.runtime.observation import ObservationSpec
from lowrl_ros.core.runtime.policy_settings import PolicyNodeSettings
from lowrl_ros.core.runtime.realtime import RealtimeResult
from lowrl_ros.core.runtime.robot_file import legacy_robot_file, parse_robot_file, robot_file_yaml
from lowrl_ros.core.runtime.status import INTERVENTION_STATUS, REALTIME_STATUS, robot_io_status
from lowrl_ros.core.types import Level

ROOT = Path(__file__).resolve().parents[1]
PENDULUM = ("pendulum_joint.cos_position", "pendulum_joint.sin_position", "pendulum_joint.velocity")


def test_without_robot_file_the_old_parameters_are_a_robot_file_with_its_yaml():
    robot, text = PolicyNodeSettings("p.onnx").robot(ObsAdapterConfig(obs_fields=PENDULUM), 3, timeout_s=0.1)
    assert robot.joints == ("pendulum_joint",)
    # The logged YAML is a robot file that reads the same observation as the shipped pendulum one.
    again = parse_robot_file(yaml.safe_load(text))
    shipped = parse_robot_file(yaml.safe_load((ROOT / "config/robots/pendulum.yaml").read_text()))
    assert again.observation == robot.observation

    def terms(r):
        return [(t.term, t.joints, t.function, t.topic, t.timeout_s, tuple(t.scale), tuple(t.offset))
                for t in ObservationSpec.from_robot_file(r, 0.05).terms]
    assert terms(robot) == terms(shipped) and len(terms(robot)) == 3


def test_input_observation_and_a_given_robot_file():
    settings = PolicyNodeSettings("p.onnx", input="observation", observation_topic="obs")
    assert not settings.reads_obs_fields
    robot, text = settings.robot(None, 5, timeout_s=0.2)
    assert robot.observation == ({"term": "array", "topic": "obs", "size": 5, "timeout_s": 0.2},) and text
    given = PolicyNodeSettings("p.onnx", robot_file=str(ROOT / "config/robots/pendulum.yaml"))
    robot, text = given.robot(ObsAdapterConfig(obs_fields=PENDULUM[:1]), 3, timeout_s=0.1)
    assert text == "" and robot.path.endswith("pendulum.yaml")  # the file wins; the old parameters are not read


@pytest.mark.parametrize("robot_timing, period, mode, control_period_s, overrides, warns", [
    ("contract", 0.05, "event", 0.01, {"mode": "fixed_rate", "control_period_s": 0.05}, False),
    ("parameters", 0.05, "event", 0.01, {}, True),          # event mode: as fast as the observations come
    ("parameters", 0.05, "fixed_rate", 0.01, {}, True),     # another period
    ("parameters", 0.05, "fixed_rate", 0.05, {}, False),    # the contract's own rate, set by hand
    ("contract", None, "event", 0.01, {}, False),           # the contract names no period: the parameters
])
def test_control_timing_against_the_contract(robot_timing, period, mode, control_period_s, overrides, warns):
    timing = ControlTiming.choose(robot_timing, period, mode, control_period_s)
    assert dict(timing.overrides) == overrides and bool(timing.warning) == warns
    assert timing.status().level == (Level.WARN if warns else Level.OK)
    if warns:
        assert "0.05 s" in timing.warning and "robot_timing: contract" in timing.warning
    with pytest.raises(ValueError, match="robot_timing 'clock' is unknown"):
        ControlTiming.choose("clock", period, mode, control_period_s)


def test_the_estop_latch_survives_a_reconfigure_unless_its_topic_changes():
    latch = EStopLatch.keep(None, "estop", "estop_reset")
    latch.update(True, 1.0)
    kept = EStopLatch.keep(latch, "estop", "reset2")
    assert kept is latch and kept.latched and kept.reset_topic == "reset2"
    fresh = EStopLatch.keep(latch, "other_estop", "reset2")
    assert fresh is not latch and not fresh.latched
    assert EStopLatch.keep(latch, "", "") is None  # no e-stop configured


def test_robot_io_status_only_what_applies():
    assert robot_io_status() == []
    timing = ControlTiming.choose("parameters", 0.05, "event", 0.01)
    entries = robot_io_status(timing=timing, estop=EStopLatch("estop"), teleop_topic="/teleop", override_held=True,
                              interventions=7, realtime=RealtimeResult(((Level.WARN, "SCHED_FIFO refused"),)))
    by_name = {e.name: e for e in entries}
    assert by_name["lowrl/policy/timing"].level == Level.WARN
    assert by_name["lowrl/policy/estop"].level == Level.OK
    assert by_name[INTERVENTION_STATUS].level == Level.WARN
    assert by_name[INTERVENTION_STATUS].values == {"teleop_topic": "/teleop", "intervention_ticks": "7"}
    assert (by_name[REALTIME_STATUS].level, by_name[REALTIME_STATUS].message) == (Level.WARN, "SCHED_FIFO refused")
    # fixed_rate: the phase lock's figures beside the timing's
    lock = ControlConfig(mode="fixed_rate", control_period_s=0.02).phase_lock(lambda t: 0.003)
    lock.shift(1.0, 0.02)
    timing = robot_io_status(timing=ControlTiming.choose("contract", 0.02, "event", 0.01), phase=lock)[0]
    assert timing.values == {"robot_timing": "contract", "tick_after_sensor_ms": "1", "sensor_lag_ms": "3.00",
                             "phase_shifted_ms": "0.00"}
    assert ControlConfig(tick_phase_s=0.0).phase_lock(lambda t: 0.003) is None  # 0: the schedule runs free
    with pytest.raises(ValueError, match="tick_phase_s=0.5 is outside"):
        ControlConfig(tick_phase_s=0.5)


def test_the_legacy_observation_parameters_become_the_shipped_pendulum_robot_file():
    """config/policy_node.yaml's obs_fields and config/robots/pendulum.yaml describe the same observation."""
    params = next(iter(yaml.safe_load((ROOT / "config/policy_node.yaml").read_text()).values()))["ros__parameters"]
    built = legacy_robot_file(tuple(params["obs_fields"]), tuple(params["obs_offset"]), tuple(params["obs_scale"]),
                              params["extra_obs_dim"])
    shipped = yaml.safe_load((ROOT / "config/robots/pendulum.yaml").read_text())
    strip = [{k: v for k, v in t.items() if k not in ("timeout_s", "joints")} for t in shipped["observation"]]
    assert [{k: v for k, v in t.items() if k != "joints"} for t in built["observation"]] == strip
    assert built["joints"] == shipped["joints"]
    again = parse_robot_file(yaml.safe_load(robot_file_yaml(built)))
    assert again.joints == ("pendulum_joint",) and len(again.observation) == 3
    extra = legacy_robot_file(("j.position",), (0.5,), (2.0,), 4, extra_observation_topic="x")
    assert extra["observation"] == [{"term": "joint_position", "joints": ["j"], "topic": "joint_states",
                                     "offset": 0.5, "scale": 2.0}, {"term": "array", "topic": "x", "size": 4}]
    assert legacy_robot_file((), input="observation", obs_dim=5)["observation"][0]["size"] == 5
