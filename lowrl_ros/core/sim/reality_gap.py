"""A reality gap as a config: the "real" robot is the simulator with its physics changed (no ROS).

:class:`RealityGapConfig` lists what differs between the simulation a policy was trained in and
the robot it runs on; :class:`RealityGapWrapper` applies it to a gymnasium environment:

- MuJoCo environments (InvertedPendulum-v5, and any other ``MujocoEnv``): the model is edited in
  place through ``env.unwrapped.model``: ``body_mass`` and ``body_inertia`` × ``mass_scale``
  (a heavier body of the same shape: the inertia scales with the mass), ``geom_friction`` and
  ``dof_frictionloss`` × ``friction_scale``, ``dof_frictionloss`` + ``added_friction`` (dry
  joint friction), ``dof_damping`` × ``damping_scale`` + ``added_damping``, and the actuators'
  ``gear`` × ``actuator_gain`` (the same control gives a weaker/stronger force). A model with no
  contacts and no joint friction (InvertedPendulum-v5: every geom has contype 0) has no friction
  to scale: ``friction_scale`` is refused there with the fix (use ``added_friction``).
- Pendulum-v1 (classic control, no MuJoCo model): the mass ``m`` × ``mass_scale``; the commanded
  torque × ``actuator_gain``; ``added_damping`` c as a viscous torque −c·θdot added to the motor's
  torque *before* Pendulum's own ±2 N·m clip (a motor's back-EMF: it takes from the motor's
  authority, and the reward's torque cost sees the applied torque); ``added_friction`` f as a dry
  friction torque −f·sign(θdot), the same way. Pendulum has no friction and no damping to scale,
  so ``friction_scale`` and ``damping_scale`` other than 1 are refused for it.
- ``joint_offset``: an encoder's zero offset, added to every *measured* joint position (rad for
  hinges, m for slides); the physics is untouched. Pendulum-v1: the observed angle is θ + offset
  (its cos and sin); MuJoCo: the observation's leading ``qpos`` entries (checked at reset: refused
  for an env whose observation does not start with the full ``qpos``, e.g. Hopper-v5). A policy
  that has learnt the offset does exactly as well as without it (a gap that fine-tuning can close
  fully, unlike a weaker actuator).
- Every environment: ``action_delay_steps`` (the action applied at step t is the one commanded at
  t − d; zeros before the first), and ``obs_noise_std`` (Gaussian noise on every observation entry,
  from a generator seeded by ``reset(seed=...)``, so a seeded run is reproducible).

- The legged robot (``lowrl/LeggedAnt-v0`` in-process, ``env_id: LeggedAnt`` in the sim robot node):
  :class:`lowrl_ros.core.sim.legged.LeggedRobot` applies the gap itself, in one place used by both
  (:func:`make_gapped_env` passes it as the env's ``gap``): the MuJoCo edits above (mass and inertia,
  foot friction, joint friction/damping, ``actuator_gain`` on every motor's torque), and the
  legged-only fields: ``motor_strength`` (per joint: torque limit x this), ``kp_scale`` / ``kd_scale``
  (per joint: PD gains x this), ``latency_physics_steps`` (targets reach the motors N physics steps
  late), ``encoder_offset`` (per joint, added to the measured positions, on top of ``joint_offset``),
  ``obs_noise_std`` (on measured joint positions and velocities), ``gyro_bias`` (x, y, z rad/s),
  ``tilt_bias`` (roll, pitch rad: the IMU's orientation is off by this rotation) and
  ``imu_noise_std`` (Gaussian noise on the gyro, rad/s, and on the orientation's roll and pitch, rad).
  ``action_delay_steps`` is refused there (its control step is the policy's in-process but the
  physics step in the node; ``latency_physics_steps`` is the same in both).

Per-joint fields are tuples; a single value (or a scalar) applies to every joint. Fields that do not
apply to an environment are refused with the fix when the gap is applied.

The identity config changes nothing: the wrapped env reproduces the unwrapped one exactly (tested).
"""
from __future__ import annotations

import collections
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from lowrl_ros.core.config import field


@dataclass(frozen=True)
class RealityGapConfig:
    """How the robot differs from the simulation (identity by default; sim_robot_node's ``gap.<field>``)."""

    mass_scale: float = field(1.0, "every body's mass (and inertia) x this; 1.3 = 30 % heavier", range=(0.05, 20.0))
    friction_scale: float = field(1.0, "every geom's friction coefficients x this (MuJoCo only)", range=(0.05, 20.0))
    added_friction: float = field(0.0, "dry (Coulomb) friction added to every joint (N m or N); Pendulum-v1: "
                                       "-f sign(thetadot)", range=(0.0, 1e3))
    damping_scale: float = field(1.0, "every joint's damping x this (MuJoCo only)", range=(0.0, 100.0))
    added_damping: float = field(0.0, "viscous damping added to every joint (N m s/rad or N s/m); Pendulum-v1: "
                                      "-c thetadot", range=(0.0, 1e3))
    actuator_gain: float = field(1.0, "commanded force/torque x this; 0.8 = a 20 % weaker actuator",
                                 range=(0.05, 20.0))
    obs_noise_std: float = field(0.0, "standard deviation of Gaussian noise added to every observation entry",
                                 range=(0.0, 100.0))
    joint_offset: float = field(0.0, "zero offset of every joint's position sensor (rad or m), |offset| <= pi",
                                range=(-math.pi, math.pi))
    action_delay_steps: int = field(0, "control steps between a command and its effect (0: none)", range=(0, 100))
    # Legged robot only (lowrl_ros.core.sim.legged): per-joint tuples in the policy's joint order; one value
    # applies to every joint.
    motor_strength: tuple = field((1.0,), "legged: per joint, the motor's torque limit x this (one value: all "
                                          "joints)")
    kp_scale: tuple = field((1.0,), "legged: per joint, the PD loop's kp x this (one value: all joints)")
    kd_scale: tuple = field((1.0,), "legged: per joint, the PD loop's kd x this (one value: all joints)")
    latency_physics_steps: int = field(0, "legged: physics steps before a position target reaches the motors",
                                       range=(0, 100))
    encoder_offset: tuple = field((0.0,), "legged: per joint, zero offset of the joint encoders (rad), added to "
                                          "the measured positions (one value: all joints)")
    gyro_bias: tuple = field((0.0,), "legged: the IMU gyro's bias (x, y, z rad/s; one value: all axes)")
    tilt_bias: tuple = field((0.0,), "legged: the IMU orientation's error (roll, pitch rad; one value: both)")
    imu_noise_std: float = field(0.0, "legged: Gaussian noise on the gyro (rad/s) and the orientation's roll and "
                                      "pitch (rad)", range=(0.0, 10.0))

    def __post_init__(self) -> None:
        # Per-joint / per-axis fields: a scalar or a sequence (YAML, ROS arrays) as a tuple of floats.
        for name, low, high in _TUPLE_RANGES:
            value = getattr(self, name)
            seq = (value,) if isinstance(value, (int, float)) else value
            try:
                vals = tuple(float(v) for v in seq)
            except (TypeError, ValueError):
                raise ValueError(f"RealityGapConfig.{name}={value!r} must be a number or a list of numbers") from None
            if not vals or not all(math.isfinite(v) and low <= v <= high for v in vals):
                raise ValueError(f"RealityGapConfig.{name}={list(vals)} must be one or more finite values in "
                                 f"{low:g}..{high:g}")
            object.__setattr__(self, name, vals)
        if len(self.gyro_bias) not in (1, 3) or len(self.tilt_bias) not in (1, 2):
            raise ValueError(f"RealityGapConfig: gyro_bias takes 1 or 3 values (x, y, z), tilt_bias 1 or 2 (roll, "
                             f"pitch); got {list(self.gyro_bias)} and {list(self.tilt_bias)}")
        if not (math.isfinite(self.imu_noise_std) and 0.0 <= self.imu_noise_std <= 10.0):
            raise ValueError(f"RealityGapConfig.imu_noise_std={self.imu_noise_std} must be finite and in 0..10 "
                             "(0: none)")
        if int(self.latency_physics_steps) != self.latency_physics_steps or not 0 <= self.latency_physics_steps <= 100:
            raise ValueError(f"RealityGapConfig.latency_physics_steps={self.latency_physics_steps} must be a whole "
                             "number of physics steps in 0..100")
        for name in ("mass_scale", "friction_scale", "actuator_gain"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0.05 <= value <= 20.0):
                raise ValueError(f"RealityGapConfig.{name}={value} is outside 0.05..20; it is a factor "
                                 "(1.0 = as in simulation, 1.3 = +30 %)")
        if not (math.isfinite(self.damping_scale) and 0.0 <= self.damping_scale <= 100.0):
            raise ValueError(f"RealityGapConfig.damping_scale={self.damping_scale} is outside 0..100; "
                             "it is a factor on the model's joint damping (1.0 = as in simulation)")
        for name in ("added_friction", "added_damping", "obs_noise_std"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"RealityGapConfig.{name}={value} must be finite and >= 0 (0: none)")
        if not (math.isfinite(self.joint_offset) and abs(self.joint_offset) <= math.pi):
            raise ValueError(f"RealityGapConfig.joint_offset={self.joint_offset} must be finite and within "
                             "-pi..pi (a sensor's zero offset in rad or m; 0: none)")
        if int(self.action_delay_steps) != self.action_delay_steps or not 0 <= self.action_delay_steps <= 100:
            raise ValueError(f"RealityGapConfig.action_delay_steps={self.action_delay_steps} must be a whole "
                             "number of control steps in 0..100")

    @property
    def is_identity(self) -> bool:
        base = RealityGapConfig()
        return not any(_differs(getattr(self, f.name), getattr(base, f.name)) for f in dataclasses.fields(self))

    def legged_only(self) -> list[str]:
        """The legged-only fields set away from their identity value (refused by the other envs)."""
        base = RealityGapConfig()
        return [name for name in LEGGED_ONLY if _differs(getattr(self, name), getattr(base, name))]

    @staticmethod
    def per_joint(values: tuple, n: int, name: str) -> np.ndarray:
        """``values`` for ``n`` joints (or axes): one value broadcast; another length refused with the fix."""
        if len(values) == 1:
            return np.full(n, values[0], dtype=np.float64)
        if len(values) != n:
            raise ValueError(f"RealityGapConfig.{name} has {len(values)} values; give 1 (all) or {n} (one each, "
                             "in the policy's joint order)")
        return np.asarray(values, dtype=np.float64)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """A one-line summary of the fields that differ from the identity, e.g. for logs."""
        base = RealityGapConfig()
        parts = [f"{f.name}={_fmt(getattr(self, f.name))}" for f in dataclasses.fields(self)
                 if _differs(getattr(self, f.name), getattr(base, f.name))]
        return ", ".join(parts) or "none (identity)"


def edit_mujoco_model(model: Any, g: RealityGapConfig) -> None:
    """The gap's physics edits of a MuJoCo model, in place (the wrapper's and the legged robot's one copy)."""
    has_friction = bool((model.geom_contype != 0).any() or (model.dof_frictionloss != 0).any())
    if g.friction_scale != 1.0 and not has_friction:
        raise ValueError("this MuJoCo model has no contacts and no joint friction, so friction_scale changes "
                         "nothing; leave it at 1.0 and use added_friction (dry joint friction) instead")
    # Multiplying by exactly 1.0 leaves every value bit-identical: the identity changes nothing.
    model.body_mass[:] = model.body_mass * g.mass_scale
    model.body_inertia[:] = model.body_inertia * g.mass_scale
    model.geom_friction[:] = model.geom_friction * g.friction_scale
    model.dof_frictionloss[:] = model.dof_frictionloss * g.friction_scale + g.added_friction
    model.dof_damping[:] = model.dof_damping * g.damping_scale + g.added_damping
    model.actuator_gear[:, 0] = model.actuator_gear[:, 0] * g.actuator_gain


# Per-joint / per-axis fields and the range of each value.
_TUPLE_RANGES = (("motor_strength", 0.05, 20.0), ("kp_scale", 0.05, 20.0), ("kd_scale", 0.0, 20.0),
                 ("encoder_offset", -math.pi, math.pi), ("gyro_bias", -10.0, 10.0), ("tilt_bias", -0.5, 0.5))
LEGGED_ONLY = ("motor_strength", "kp_scale", "kd_scale", "latency_physics_steps", "encoder_offset", "gyro_bias",
               "tilt_bias", "imu_noise_std")


def _differs(a: Any, b: Any) -> bool:
    """A field away from its identity value; a tuple of one value equals itself repeated (broadcast)."""
    if isinstance(a, tuple) and isinstance(b, tuple) and len(b) == 1:
        return any(v != b[0] for v in a)
    return a != b


def _fmt(value: Any) -> str:
    return ",".join(f"{v:g}" for v in value) if isinstance(value, tuple) else f"{value:g}"


class RealityGapWrapper(gym.Wrapper):
    """Applies a :class:`RealityGapConfig` to a Pendulum-v1 or MuJoCo gymnasium environment.

    Args:
        env: the environment as ``gym.make`` returns it (the wrapper edits ``env.unwrapped``).
        gap: the gap to apply.
        noise_seed: seed of the observation noise until the first ``reset(seed=...)``.
    """

    def __init__(self, env: gym.Env, gap: RealityGapConfig, noise_seed: int = 0) -> None:
        super().__init__(env)
        self.gap = gap
        self._rng = np.random.default_rng(noise_seed)
        self._queue: collections.deque = collections.deque()
        u = env.unwrapped
        if hasattr(u, "robot") and hasattr(u.robot, "apply_gap"):
            raise ValueError("the legged robot applies the gap itself: make it with make_gapped_env(env_id, gap) "
                             "or gym.make(env_id, gap=gap), not RealityGapWrapper")
        if gap.legged_only():
            raise ValueError(f"{', '.join(gap.legged_only())}: legged robot only (LeggedAnt); leave them at their "
                             "defaults for this env")
        self._pendulum = hasattr(u, "max_torque") and hasattr(u, "m") and not hasattr(u, "model")
        if self._pendulum:
            if gap.friction_scale != 1.0 or gap.damping_scale != 1.0:
                raise ValueError("Pendulum-v1 has no friction or joint damping to scale; leave friction_scale and "
                                 "damping_scale at 1.0 and use added_friction / added_damping")
            u.m = float(u.m) * gap.mass_scale
        elif hasattr(u, "model"):
            self._edit_mujoco_model(u.model)
        else:
            raise ValueError(f"{env.spec.id if env.spec else env}: the reality gap supports Pendulum-v1 and MuJoCo "
                             "environments only")
        self._reset_delay()

    def _edit_mujoco_model(self, model: Any) -> None:
        edit_mujoco_model(model, self.gap)

    def _reset_delay(self) -> None:
        zero = np.zeros(self.action_space.shape, dtype=self.action_space.dtype)
        self._queue = collections.deque(zero.copy() for _ in range(self.gap.action_delay_steps))

    def _measured(self, obs: np.ndarray) -> np.ndarray:
        """The observation as the robot's sensors report it: zero offset, then noise."""
        if self.gap.joint_offset != 0.0:
            obs = np.array(obs, copy=True)
            u = self.env.unwrapped
            if self._pendulum:
                theta = math.atan2(float(obs[1]), float(obs[0])) + self.gap.joint_offset
                obs[0], obs[1] = math.cos(theta), math.sin(theta)
            else:
                obs[:u.model.nq] += self.gap.joint_offset
        return self._noisy(obs)

    def _noisy(self, obs: np.ndarray) -> np.ndarray:
        if self.gap.obs_noise_std == 0.0:
            return obs  # no draw: the identity consumes no random numbers
        return (obs + self._rng.normal(0.0, self.gap.obs_noise_std, np.shape(obs))).astype(np.asarray(obs).dtype)

    def noise(self, shape: tuple[int, ...]) -> np.ndarray:
        """Observation noise of ``shape`` from the wrapper's generator (the sim robot adds it to joints)."""
        if self.gap.obs_noise_std == 0.0:
            return np.zeros(shape)
        return self._rng.normal(0.0, self.gap.obs_noise_std, shape)

    def delayed(self, action: np.ndarray) -> np.ndarray:
        """The action that takes effect now, given the one commanded now (the delay line)."""
        if not self._queue:
            return action
        self._queue.append(np.array(action, copy=True))
        return self._queue.popleft()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._rng = np.random.default_rng(seed + 7919)  # a stream apart from the env's own
        self._reset_delay()
        obs, info = self.env.reset(seed=seed, options=options)
        if self.gap.joint_offset != 0.0 and not self._pendulum:  # once per episode, not per step
            u = self.env.unwrapped
            if obs.shape[0] < u.model.nq or not np.allclose(obs[:u.model.nq], u.data.qpos):
                raise ValueError(f"{self.env.spec.id if self.env.spec else self.env}: joint_offset needs an "
                                 "observation that starts with the full qpos (InvertedPendulum-v5 does; this "
                                 "env's does not); leave joint_offset at 0")
        return self._measured(obs), info

    def step(self, action):
        act = self.delayed(np.asarray(action, dtype=self.action_space.dtype))
        if self._pendulum:
            g = self.gap
            if g.actuator_gain != 1.0 or g.added_damping != 0.0 or g.added_friction != 0.0:
                theta_dot = float(self.env.unwrapped.state[1])
                resist = g.added_damping * theta_dot + g.added_friction * float(np.sign(theta_dot))
                act = (act * g.actuator_gain - resist).astype(self.action_space.dtype)
        obs, reward, terminated, truncated, info = self.env.step(act)
        info = dict(info, applied_action=act)
        return self._measured(obs), reward, terminated, truncated, info


def parse_gap_items(items: list[str]) -> dict[str, Any]:
    """``["FIELD=VALUE", ...]`` (command-line gap changes) as RealityGapConfig fields, each checked.

    Raises ValueError naming the item and the fix: an unknown field, a missing value, or a value
    that RealityGapConfig refuses.
    """
    fields = RealityGapConfig.__dataclass_fields__
    out: dict[str, Any] = {}
    for item in items:
        name, _, value = item.partition("=")
        if name not in fields or not value:
            raise ValueError(f"--gap {item!r}: use FIELD=VALUE with a RealityGapConfig field ({', '.join(fields)})")
        try:
            if name in dict((n, 0) for n, _, _ in _TUPLE_RANGES):
                out[name] = tuple(float(v) for v in value.split(","))
            else:
                out[name] = int(value) if name in ("action_delay_steps", "latency_physics_steps") else float(value)
        except ValueError:
            raise ValueError(f"--gap {item!r}: {value!r} is not a number") from None
    RealityGapConfig(**out)  # each field's own range check
    return out


def gap_file_fields(path: str | Path) -> dict[str, Any]:
    """The ``gap.<field>`` entries of a sim robot node params file (a preset in config/gaps/, or the gap the
    off-board identifier wrote) as RealityGapConfig fields; ValueError naming the file and the entry at fault."""
    import yaml

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read the gap file ({exc})") from None
    out: dict[str, Any] = {}
    for node in doc.values() if isinstance(doc, dict) else ():
        params = (node or {}).get("ros__parameters", {}) if isinstance(node, dict) else {}
        out.update({k[len("gap."):]: v for k, v in params.items() if k.startswith("gap.")})
    if not out:
        raise ValueError(f"{path}: no gap.<field> parameters under <node>: ros__parameters:")
    bad = [k for k in out if k not in RealityGapConfig.__dataclass_fields__]
    if bad:
        raise ValueError(f"{path}: unknown gap field(s) {', '.join(bad)}; RealityGapConfig has "
                         f"{', '.join(RealityGapConfig.__dataclass_fields__)}")
    try:
        RealityGapConfig(**out)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    return out


LEGGED_IDS = ("lowrl/LeggedAnt-v0", "LeggedAnt")


def make_gapped_env(env_id: str, gap: RealityGapConfig, **kwargs: Any) -> gym.Env:
    """``gym.make(env_id, **kwargs)`` wrapped in a :class:`RealityGapWrapper` applying ``gap``.

    The legged robot (``lowrl/LeggedAnt-v0`` or ``LeggedAnt``) takes the gap as its own ``gap`` argument
    instead: LeggedRobot applies it, as it does for the sim robot node.
    """
    if env_id in LEGGED_IDS:
        # gymnasium's "module:id" form imports the module that registers the id (legged imports this module,
        # so it is not imported here: no cycle).
        return gym.make(f"lowrl_ros.core.sim.legged:{LEGGED_IDS[0]}", gap=gap, **kwargs)
    env = gym.make(env_id, **kwargs)
    return RealityGapWrapper(env, gap)
