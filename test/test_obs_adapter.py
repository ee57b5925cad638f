"""JointState -> observation adapter: names not indices, fields, scaling, clear errors (no ROS)."""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pytest

from lowrl_ros.core.runtime.obs_adapter import ObsAdapterConfig, ObservationAdapter, ObservationError, from_array

PENDULUM = ("pendulum_joint.cos_position", "pendulum_joint.sin_position", "pendulum_joint.velocity")


def test_pendulum_fields_match_gymnasium_layout():
    adapter = ObservationAdapter(ObsAdapterConfig(obs_fields=PENDULUM))
    obs = adapter.from_joint_state(["pendulum_joint"], [0.3], [-1.5], [])
    np.testing.assert_allclose(obs, [math.cos(0.3), math.sin(0.3), -1.5])


def test_joints_matched_by_name_whatever_the_order():
    cfg = ObsAdapterConfig(obs_fields=("a.position", "b.position", "a.velocity", "b.effort"))
    adapter = ObservationAdapter(cfg)
    first = adapter.from_joint_state(["a", "b"], [1.0, 2.0], [3.0, 4.0], [5.0, 6.0])
    swapped = adapter.from_joint_state(["b", "x", "a"], [2.0, 9.0, 1.0], [4.0, 9.0, 3.0], [6.0, 9.0, 5.0])
    np.testing.assert_allclose(first, [1.0, 2.0, 3.0, 6.0])
    np.testing.assert_allclose(swapped, first)


def test_scaling_and_offset():
    cfg = ObsAdapterConfig(obs_fields=("j.position", "j.velocity"), obs_offset=(1.0, 0.0), obs_scale=(2.0, 0.5))
    obs = ObservationAdapter(cfg).from_joint_state(["j"], [3.0], [4.0], [])
    np.testing.assert_allclose(obs, [4.0, 2.0])


def test_extra_observation_appended_and_required():
    adapter = ObservationAdapter(ObsAdapterConfig(obs_fields=("j.position",), extra_obs_dim=2))
    with pytest.raises(ObservationError, match="no extra observation"):
        adapter.from_joint_state(["j"], [1.0], [], [])
    with pytest.raises(ObservationError, match="extra observation has 3 values"):
        adapter.set_extra([1.0, 2.0, 3.0])
    adapter.set_extra([7.0, 8.0])
    np.testing.assert_allclose(adapter.from_joint_state(["j"], [1.0], [], []), [1.0, 7.0, 8.0])


def test_missing_joint_is_named():
    adapter = ObservationAdapter(ObsAdapterConfig(obs_fields=("elbow.position", "wrist.position")))
    with pytest.raises(ObservationError, match="wrist") as err:
        adapter.from_joint_state(["elbow", "shoulder"], [0.0, 0.0], [], [])
    assert "elbow" not in str(err.value).split("missing")[0]


def test_short_field_array_is_an_error():
    adapter = ObservationAdapter(ObsAdapterConfig(obs_fields=("a.velocity", "b.velocity")))
    with pytest.raises(ObservationError, match="velocity has 1 values for 2 joint names"):
        adapter.from_joint_state(["a", "b"], [0.0, 0.0], [1.0], [])


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("where", ["position", "velocity"])
def test_non_finite_is_an_error_naming_the_joint(bad, where):
    adapter = ObservationAdapter(ObsAdapterConfig(obs_fields=PENDULUM))
    position, velocity = ([bad], [0.0]) if where == "position" else ([0.0], [bad])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy RuntimeWarning from cos/sin of an Inf on the way
        with pytest.raises(ObservationError, match=f"'pendulum_joint' {where} is .*NaN/Inf"):
            adapter.from_joint_state(["pendulum_joint"], position, velocity, [])


def test_from_array_checks_size_and_values():
    np.testing.assert_allclose(from_array(np.float32([1, 2, 3]), 3), [1, 2, 3])
    with pytest.raises(ObservationError, match="has 2 values, the policy needs 3"):
        from_array([1.0, 2.0], 3)
    with pytest.raises(ObservationError, match="NaN"):
        from_array([1.0, float("nan"), 2.0], 3)


@pytest.mark.parametrize("kwargs, message", [
    (dict(obs_fields=("pendulum_joint",)), "is not '<joint>.<field>'"),
    (dict(obs_fields=("j.torque",)), "field one of"),
    (dict(obs_fields=("j.position",), obs_scale=(1.0, 2.0)), "obs_scale has 2 values"),
    (dict(obs_fields=("j.position",), obs_offset=(float("nan"),)), "must be finite"),
    (dict(obs_fields=("j.position",), extra_obs_dim=-1), "extra_obs_dim must be >= 0"),
    (dict(), "observation is empty"),
])
def test_config_errors_say_how_to_fix(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ObsAdapterConfig(**kwargs)


@dataclass
class _Contract:
    obs_names: tuple
    obs_dim: int = 3


def test_check_against_passes_a_matching_contract_and_says_what_to_fix_otherwise():
    three = ("cos_theta", "sin_theta", "theta_dot")
    adapter = ObservationAdapter(ObsAdapterConfig(obs_fields=("j.cos_position", "j.sin_position")))
    with pytest.raises(ValueError, match=r"obs_fields give 2 observation entries but the policy reads 3 "
                                         r"\(cos_theta, sin_theta, theta_dot\); list one"):
        adapter.check_against(_Contract(three))
    ObservationAdapter(ObsAdapterConfig(obs_fields=("j.cos_position", "j.sin_position"), extra_obs_dim=1)
                       ).check_against(_Contract(three))
    with pytest.raises(ValueError, match=r"give 4 observation entries \(extra_obs_dim=2 included\)"):
        ObservationAdapter(ObsAdapterConfig(obs_fields=("j.position", "j.velocity"), extra_obs_dim=2)
                           ).check_against(_Contract(three))
