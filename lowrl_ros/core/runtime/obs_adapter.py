"""JointState -> policy observation, from config (ROS-free: plain names and numpy arrays).

A policy's observation is an ordered vector; a robot reports joints in whatever order its driver
likes (and the order may change between drivers or after a URDF edit). So joints are matched by
NAME, never by index, and the observation layout is spelled out entry by entry as
``"<joint>.<field>"`` strings, e.g. Pendulum-v1's ``cos θ, sin θ, θdot``::

    obs_fields: ["pendulum_joint.cos_position", "pendulum_joint.sin_position",
                 "pendulum_joint.velocity"]

Each entry is then scaled: ``obs[i] = (raw[i] - offset[i]) * scale[i]`` (the same convention as
the artifact contract's normalisation), e.g. to turn a driver's degrees into radians. An optional
extra observation (a std_msgs/Float32MultiArray, e.g. a target or an IMU) is appended at the end.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lowrl_ros.core.config import field
from lowrl_ros.core.types import ContractLike

FIELDS: tuple[str, ...] = ("position", "velocity", "effort", "cos_position", "sin_position")


class ObservationError(ValueError):
    """An observation that cannot be used (missing joint, wrong size, non-finite value)."""


@dataclass(frozen=True)
class ObsAdapterConfig:
    """How to build the observation vector: ``obs = (raw - offset) * scale`` per entry."""

    # dynamic=False: ROS types it as a string array (the nodes declare [""], as [] would be untyped).
    obs_fields: tuple[str, ...] = field((), "'<joint>.<field>' per observation entry, in the policy's order",
                                        dynamic=False)
    obs_offset: tuple[float, ...] = field((), "per entry: obs = (raw - offset) * scale (empty: 0)")
    obs_scale: tuple[float, ...] = field((), "per entry: obs = (raw - offset) * scale (empty: 1)")
    extra_obs_dim: int = field(0, "size of the extra Float32MultiArray appended at the end (0: none)",
                               range=(0, 1024))

    def __post_init__(self) -> None:
        object.__setattr__(self, "obs_fields", tuple(str(f) for f in self.obs_fields))
        object.__setattr__(self, "obs_offset", tuple(float(v) for v in self.obs_offset))
        object.__setattr__(self, "obs_scale", tuple(float(v) for v in self.obs_scale))
        for entry in self.obs_fields:
            joint, sep, kind = entry.rpartition(".")
            if not sep or not joint or kind not in FIELDS:
                raise ValueError(
                    f"obs_fields entry {entry!r} is not '<joint>.<field>' with field one of "
                    f"{', '.join(FIELDS)}; write e.g. 'pendulum_joint.velocity'")
        n = len(self.obs_fields)
        for name in ("obs_offset", "obs_scale"):
            values = getattr(self, name)
            if values and len(values) != n:
                raise ValueError(f"{name} has {len(values)} values but obs_fields has {n} entries; "
                                 f"give one value per entry or leave {name} empty")
            if not all(np.isfinite(values)):
                raise ValueError(f"{name} must be finite numbers, got {values}")
        if self.extra_obs_dim < 0:
            raise ValueError(f"extra_obs_dim must be >= 0 (0: no extra observation), got {self.extra_obs_dim}")
        if n + self.extra_obs_dim == 0:
            raise ValueError("the observation is empty: list joint entries in obs_fields "
                             "(e.g. 'pendulum_joint.position') and/or set extra_obs_dim > 0")

    @property
    def obs_dim(self) -> int:
        return len(self.obs_fields) + self.extra_obs_dim

    @property
    def joint_names(self) -> tuple[str, ...]:
        """The joints the observation needs, in first-use order."""
        return tuple(dict.fromkeys(e.rpartition(".")[0] for e in self.obs_fields))


class ObservationAdapter:
    """Turns a JointState's arrays (and an optional extra vector) into the policy observation.

    The name->index lookup is cached per distinct name list, since a driver sends the same list
    every time; the hot path is then a few numpy gathers.
    """

    def __init__(self, config: ObsAdapterConfig) -> None:
        self.config = config
        n = len(config.obs_fields)
        self._offset = np.asarray(config.obs_offset or [0.0] * n, dtype=np.float64)
        self._scale = np.asarray(config.obs_scale or [1.0] * n, dtype=np.float64)
        self._entries = [(e.rpartition(".")[0], e.rpartition(".")[2]) for e in config.obs_fields]
        self._index_cache: dict[tuple[str, ...], list[int]] = {}
        self._extra: np.ndarray | None = None

    @property
    def obs_dim(self) -> int:
        return self.config.obs_dim

    def check_against(self, contract: ContractLike) -> None:
        """Raise ValueError unless this adapter builds the observation ``contract`` reads.

        Checked once at start (policy node, fine-tuner) so a wrong ``obs_fields`` list fails with
        what to fix instead of sending the safe action on every message.
        """
        if self.obs_dim == contract.obs_dim:
            return
        extra = f" (extra_obs_dim={self.config.extra_obs_dim} included)" if self.config.extra_obs_dim else ""
        names = ", ".join(contract.obs_names)
        raise ValueError(f"obs_fields give {self.obs_dim} observation entries{extra} but the policy reads "
                         f"{contract.obs_dim} ({names}); list one '<joint>.<field>' per policy observation")

    def set_extra(self, values) -> None:
        """Store the latest extra observation; raises ObservationError on a wrong size."""
        arr = np.asarray(values, dtype=np.float64).ravel()
        if arr.size != self.config.extra_obs_dim:
            raise ObservationError(
                f"extra observation has {arr.size} values, expected extra_obs_dim="
                f"{self.config.extra_obs_dim}; fix the publisher or the extra_obs_dim parameter")
        self._extra = arr

    def _indices(self, names) -> list[int]:
        key = tuple(names)
        idx = self._index_cache.get(key)
        if idx is None:
            where = {name: i for i, name in enumerate(key)}
            missing = [j for j in self.config.joint_names if j not in where]
            if missing:
                raise ObservationError(
                    f"joint(s) {', '.join(missing)} missing from the JointState (it has: "
                    f"{', '.join(key) or 'no joints'}); check the joint names in obs_fields")
            idx = [where[joint] for joint, _ in self._entries]
            if len(self._index_cache) > 16:  # a driver changing its list every message: do not grow
                self._index_cache.clear()
            self._index_cache[key] = idx
        return idx

    def from_joint_state(self, names, position, velocity, effort) -> np.ndarray:
        """Build the observation from a JointState's name/position/velocity/effort arrays.

        Raises:
            ObservationError: a needed joint is missing, an array is too short for the names,
                a value is NaN/Inf, or the extra observation has not arrived yet.
        """
        idx = self._indices(names)
        arrays = {"position": position, "velocity": velocity, "effort": effort}
        out = np.empty(self.config.obs_dim, dtype=np.float64)
        for k, ((joint, kind), i) in enumerate(zip(self._entries, idx)):
            source = "position" if kind.endswith("_position") else kind
            values = arrays[source]
            if i >= len(values):
                raise ObservationError(
                    f"JointState {source} has {len(values)} values for {len(names)} joint names, so "
                    f"joint {joint!r} has no {source}; the publisher must fill {source} for every joint")
            raw = float(values[i])
            if not math.isfinite(raw):  # named here: cos/sin of it would only say "entry k is nan"
                raise ObservationError(f"joint {joint!r} {source} is {raw} (NaN/Inf); the sensor or its driver "
                                       "sent a non-finite value")
            if kind == "cos_position":
                raw = np.cos(raw)
            elif kind == "sin_position":
                raw = np.sin(raw)
            out[k] = raw
        n = len(self._entries)
        out[:n] = (out[:n] - self._offset) * self._scale
        if self.config.extra_obs_dim:
            if self._extra is None:
                raise ObservationError("no extra observation received yet (extra_obs_dim="
                                       f"{self.config.extra_obs_dim}); publish it or set extra_obs_dim: 0")
            out[n:] = self._extra
        check_finite(out)
        return out

def from_array(values, obs_dim: int) -> np.ndarray:
    """Use a plain observation vector (std_msgs/Float32MultiArray) after checking size and values."""
    arr = np.asarray(values, dtype=np.float64).ravel()
    if arr.size != obs_dim:
        raise ObservationError(f"observation has {arr.size} values, the policy needs {obs_dim}; "
                               "fix the publisher or the observation config")
    check_finite(arr)
    return arr


def check_finite(obs: np.ndarray) -> None:
    """Raise ObservationError naming the first NaN/Inf entry."""
    if not np.isfinite(obs).all():
        bad = int(np.flatnonzero(~np.isfinite(obs))[0])
        raise ObservationError(f"observation entry {bad} is {obs[bad]} (NaN/Inf); the sensor or its driver "
                               "sent a non-finite value")
