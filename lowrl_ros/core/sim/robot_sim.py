"""A robot's simulator from its robot file's ``sim:`` section: MuJoCo, PD actuation, a reality gap (off-board).

The robot file describes the robot's I/O for the policy node (core/runtime/robot_file.py); its ``sim:``
section (docs/robot_file.md, "Simulator") says how the same robot is simulated: the MJCF (a URDF works
too: MuJoCo's compiler reads both), which MJCF joint and actuator each robot-file joint is, the IMU
site, the base body, the foot geoms, the actuation model (PD on position targets, computed here or run by
MuJoCo's own actuators with the damping integrated implicitly; or direct torque),
the resets, and the prior range of each **gap** parameter. Nothing here is written for one robot: the
names come from the file, and every name is checked against the compiled model at load, so a config
that disagrees with the MJCF or with the robot file is refused with the entry named
(:class:`SimConfigError`), never found out mid-rollout.

:class:`Gap` is one reality gap: how the simulated robot differs from its nominal model (body masses,
foot friction, motor strength, PD gains, actuation latency in physics steps, encoder offsets, IMU
biases, sensor noise). A gap file (``gap: {mass_scale: 0.8, ...}``) gives one; :meth:`Gap.as_dict` is
the full gap in use, every parameter, to print and record. The identification and retraining of
issue 27 work on these same names and ranges.

:class:`RobotSim` is the simulator: ``reset`` puts the robot in its default pose (plus noise),
``step(targets)`` runs one control period of physics steps with the targets (policy joint order,
robot units: rad for position, N m for effort), and the sensor readouts come back as the samples
the policy node's observation builder takes (``joint_state``: names, position, velocity, effort;
``imu``: orientation x, y, z, w, angular velocity, linear acceleration), so the observation is built
by the robot's own code (core/sim/robot_env.py). Never imported by the policy node.
"""
from __future__ import annotations

import importlib.util
import math
from collections import deque
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from lowrl_ros.core.runtime.robot_file import RobotFile

SIM_KEYS = ("mjcf", "remove_bodies", "add_sites", "joints", "actuators", "imu_site", "base_body", "foot_geoms",
            "state_estimate_frame", "control", "reset", "gap_priors")
FRAMES = ("body", "heading")  # the state estimate's frame: the base's own, or yaw only (x forward, y left, z up)
CONTROL_KEYS = ("period_s", "physics_dt", "integrator", "pd", "kp", "kd", "torque_limit", "action_clip")
PD_MODES = ("explicit", "implicit")  # Isaac Lab's IdealPDActuator / ImplicitActuator
PD_PREFIX = "lowrl_pd_"  # the actuators an implicit PD adds, one per robot-file joint: lowrl_pd_<MJCF joint>
INTEGRATORS = ("Euler", "RK4", "implicit", "implicitfast")  # MuJoCo's <option integrator=...> values
RESET_KEYS = ("base_height", "joint_noise", "velocity_noise")
PKG_PREFIX = "pkg://"
PER_JOINT = ("motor_strength", "kp_scale", "kd_scale", "encoder_offset")  # gap parameters given per joint or once


class SimConfigError(ValueError):
    """The ``sim:`` section cannot be used; the message names the file, the entry, and what exists."""


@dataclass(frozen=True)
class Gap:
    """One reality gap (identity: the nominal model). Scales multiply the MJCF's values; biases add.

    Attributes:
        mass_scale: every robot body's mass and inertia x this.
        body_mass_scale: per body (MJCF body name -> scale), on top of mass_scale.
        friction: the foot geoms' sliding friction x this.
        motor_strength: the torque limit and every torque x this.
        kp_scale, kd_scale: the PD gains x these.
        latency_steps: physics steps between a target and the motors acting on it.
        encoder_offset: rad added to each measured joint position.
        (motor_strength, kp_scale, kd_scale, encoder_offset: one number, or one per robot-file joint.)
        gyro_bias: rad/s added to the IMU's angular velocity (x, y, z).
        tilt_bias: rad, the IMU mounted rolled/pitched by this (roll, pitch): its orientation reads tilted.
        joint_position_noise, joint_velocity_noise, gyro_noise, orientation_noise: Gaussian std per
            reading (rad, rad/s, rad/s, rad of tilt about a random axis).
    """

    mass_scale: float = 1.0
    body_mass_scale: Mapping[str, float] = field(default_factory=dict)
    friction: float = 1.0
    motor_strength: float | tuple[float, ...] = 1.0
    kp_scale: float | tuple[float, ...] = 1.0
    kd_scale: float | tuple[float, ...] = 1.0
    latency_steps: int = 0
    encoder_offset: float | tuple[float, ...] = 0.0
    gyro_bias: tuple[float, float, float] = (0.0, 0.0, 0.0)
    tilt_bias: tuple[float, float] = (0.0, 0.0)
    joint_position_noise: float = 0.0
    joint_velocity_noise: float = 0.0
    gyro_noise: float = 0.0
    orientation_noise: float = 0.0

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, where: str = "gap") -> Gap:
        """A gap from a mapping (a gap file's ``gap:``); unknown keys and bad values name the key."""
        data = dict(data or {})
        unknown = [k for k in data if k not in cls.keys()]
        if unknown:
            raise SimConfigError(f"{where}: unknown gap key(s) {', '.join(map(str, unknown))}; the gap parameters "
                                 f"are {', '.join(cls.keys())}")
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key == "body_mass_scale":
                if not isinstance(value, Mapping) or not all(_positive(v) for v in value.values()):
                    raise SimConfigError(f"{where}.body_mass_scale must map body names to positive scales, "
                                         f"got {value!r}")
                out[key] = {str(k): float(v) for k, v in value.items()}
            elif key == "latency_steps":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise SimConfigError(f"{where}.latency_steps must be an integer >= 0 (physics steps), "
                                         f"got {value!r}")
                out[key] = value
            elif key in ("gyro_bias", "tilt_bias"):
                n = 3 if key == "gyro_bias" else 2
                out[key] = tuple(_floats(f"{where}.{key}", value, n))
            elif key in PER_JOINT:
                vals = _floats(f"{where}.{key}", value, None)
                if not vals:
                    raise SimConfigError(f"{where}.{key} needs one number or one per robot-file joint, got {value!r}")
                if key != "encoder_offset" and min(vals) <= 0:
                    raise SimConfigError(f"{where}.{key} must be > 0, got {value!r}")
                out[key] = vals[0] if isinstance(value, (int, float)) else tuple(vals)
            else:
                v = _floats(f"{where}.{key}", value, 1)[0]
                if key.endswith("noise") and v < 0 or not key.endswith("noise") and v <= 0:
                    raise SimConfigError(f"{where}.{key} must be {'>= 0' if key.endswith('noise') else '> 0'}, "
                                         f"got {value!r}")
                out[key] = v
        return cls(**out)

    def describe(self, nominal: str = "none") -> str:
        """The parameters that differ from the nominal model, one line (``nominal`` when none does)."""
        base = Gap().as_dict()
        return ", ".join(f"{k}={_rounded(v)}" for k, v in self.as_dict().items() if v != base.get(k)) or nominal

    def check_priors(self, priors: Mapping[str, tuple[float, float]], where: str = "gap") -> None:
        """Refuse a value outside its ``sim.gap_priors`` range (per entry for vectors), naming the field: a gap the
        identification could never find, or a robot no prior covers. Fields without a prior are not checked."""
        for key, (lo, hi) in priors.items():
            values = np.atleast_1d(np.asarray(getattr(self, key), dtype=np.float64))
            bad = values[(values < lo - 1e-12) | (values > hi + 1e-12)]
            if bad.size:
                raise SimConfigError(f"{where}.{key} {getattr(self, key)!r} is outside its prior [{lo:g}, {hi:g}] "
                                     f"(sim.gap_priors.{key}); widen the prior or change the value")

    def as_dict(self) -> dict[str, Any]:
        """Every gap parameter and its value (plain lists and floats: for printing, JSON and YAML)."""
        d = asdict(self)
        return {k: (list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, Mapping) else v)
                for k, v in d.items()}

    def sample(self, priors: Mapping[str, tuple[float, float]], rng: np.random.Generator) -> Gap:
        """This gap with every parameter that has a prior drawn uniformly from it (domain randomization;
        latency_steps drawn as an integer; vector parameters per entry)."""
        drawn: dict[str, Any] = {}
        for key, (lo, hi) in priors.items():
            if key == "latency_steps":
                drawn[key] = int(rng.integers(int(lo), int(hi) + 1))
            elif key in ("gyro_bias", "tilt_bias"):
                drawn[key] = tuple(float(v) for v in rng.uniform(lo, hi, 3 if key == "gyro_bias" else 2))
            elif key in PER_JOINT:  # per joint when this gap gives it per joint
                current = getattr(self, key)
                n = len(current) if isinstance(current, tuple) else 1
                v = rng.uniform(lo, hi, n)
                drawn[key] = float(v[0]) if n == 1 else tuple(map(float, v))
            else:
                drawn[key] = float(rng.uniform(lo, hi))
        return replace(self, **drawn)


def _rounded(v: Any) -> Any:
    """4 decimals, for a line a person reads (a list per entry)."""
    return [round(float(x), 4) for x in v] if isinstance(v, (list, tuple)) else round(float(v), 4)


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _floats(key: str, value: Any, n: int | None) -> list[float]:
    """``value`` as finite floats: one number (broadcast to n), or a list of n (any length when n is None)."""
    vals = [value] if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    if isinstance(vals, (str, bytes, Mapping)) or not isinstance(vals, Sequence) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vals):
        raise SimConfigError(f"{key} must be a finite number or a list of them, got {value!r}")
    if n is not None and len(vals) == 1:
        vals = list(vals) * n
    if n is not None and len(vals) != n:
        raise SimConfigError(f"{key} needs {n} values, got {len(vals)}: {value!r}")
    return [float(v) for v in vals]


def load_gap_file(path: str | Path) -> Gap:
    """A gap file (YAML ``gap: {mass_scale: 0.8, friction: 1.3, ...}``); SimConfigError names the file and key."""
    import yaml

    p = Path(path).expanduser()
    try:
        data = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SimConfigError(f"gap file {p}: cannot be read ({exc})") from exc
    if not isinstance(data, dict) or set(data) != {"gap"} or not isinstance(data["gap"], dict):
        raise SimConfigError(f"gap file {p}: must hold one mapping 'gap:' of gap parameters ({', '.join(Gap.keys())})")
    return Gap.from_dict(data["gap"], f"{p}: gap")


@dataclass(frozen=True)
class SimConfig:
    """The ``sim:`` section, parsed and checked against the robot file and the compiled MJCF.

    Names are MJCF names; ``joints``, ``actuators``, ``kp``, ``kd``, ``torque_limit`` are in the robot
    file's joint order. ``actuators`` is empty when torques go straight to the joints' degrees of freedom
    (``actuators: joint``: the MJCF's own actuators are switched off).
    """

    mjcf: Path
    remove_bodies: tuple[str, ...]
    add_sites: Mapping[str, tuple[str, tuple[float, float, float]]]
    joints: tuple[str, ...]
    actuators: tuple[str, ...]
    imu_site: str
    base_body: str
    foot_geoms: tuple[str, ...]
    state_estimate_frame: str
    interface: str
    period_s: float
    physics_dt: float
    integrator: str | None
    pd: str
    kp: np.ndarray
    kd: np.ndarray
    torque_limit: np.ndarray
    action_clip: float
    base_height: float | None
    joint_noise: float
    velocity_noise: float
    gap_priors: Mapping[str, tuple[float, float]]

    @property
    def substeps(self) -> int:
        return round(self.period_s / self.physics_dt)


def resolve_mjcf(value: str, robot_path: str) -> Path:
    """``pkg://<package>/<path>`` inside an installed Python package, else a path relative to the robot file."""
    if value.startswith(PKG_PREFIX):
        package, _, rel = value[len(PKG_PREFIX):].partition("/")
        spec = importlib.util.find_spec(package) if package else None
        if spec is None or not spec.submodule_search_locations:
            raise SimConfigError(f"sim.mjcf {value!r}: Python package {package!r} is not installed")
        return Path(list(spec.submodule_search_locations)[0]) / rel
    p = Path(value).expanduser()
    return p if p.is_absolute() else (Path(robot_path).parent if robot_path else Path.cwd()) / p


def _mapping_or_same(section: Any, key: str, joints: tuple[str, ...], where: str) -> tuple[str, ...]:
    """A robot-joint -> MJCF-name mapping (default: the same name); every robot joint mapped, no unknown key."""
    section = {} if section is None else section
    if not isinstance(section, Mapping):
        raise SimConfigError(f"{where}: sim.{key} must map robot-file joints to MJCF names, got {section!r}")
    unknown = [j for j in section if j not in joints]
    if unknown:
        raise SimConfigError(f"{where}: sim.{key} maps {unknown[0]!r}, which is not a robot-file joint (joints: "
                             f"{', '.join(joints)})")
    return tuple(str(section.get(j, j)) for j in joints)


def _key(section: str, joint: str, sim: Mapping[str, Any]) -> str:
    """``sim.<section>.<joint>``, saying so when the entry is unset and the robot-file name stood in."""
    given = isinstance(sim.get(section), Mapping) and joint in sim[section]
    return f"sim.{section}.{joint}" + ("" if given else f" (unset: the robot-file joint's own name; map it in "
                                                         f"sim.{section})")


def _per_joint(key: str, value: Any, n: int, where: str, positive: bool = True) -> np.ndarray:
    try:
        vals = np.asarray(_floats(f"sim.control.{key}", value, n))
    except SimConfigError as exc:
        raise SimConfigError(f"{where}: {exc}") from exc
    if positive and (vals <= 0).any() or (vals < 0).any():
        raise SimConfigError(f"{where}: sim.control.{key} must be {'> 0' if positive else '>= 0'}, got {value!r}")
    return vals


def _section(data: Any, name: str, keys: Sequence[str], where: str) -> Mapping[str, Any]:
    data = {} if data is None else data
    if not isinstance(data, Mapping):
        raise SimConfigError(f"{where}: {name} must be a mapping with keys {', '.join(keys)}, got {data!r}")
    unknown = [k for k in data if k not in keys]
    if unknown:
        raise SimConfigError(f"{where}: unknown key {name}.{unknown[0]}; known: {', '.join(keys)}")
    return data


def _names(model: Any, obj: Any, count: int) -> list[str]:
    import mujoco

    return [mujoco.mj_id2name(model, obj, i) or "" for i in range(count)]


def _need(model: Any, obj: Any, count: int, name: str, key: str, what: str, where: str) -> int:
    """The id of MJCF element ``name``; SimConfigError naming the key and listing what the model has."""
    import mujoco

    i = mujoco.mj_name2id(model, obj, name)
    if i < 0:
        have = [n for n in _names(model, obj, count) if n]
        plural = "bodies" if what == "body" else what + "s"
        raise SimConfigError(f"{where}: {key} names {what} {name!r}, which the MJCF does not have; its {plural}: "
                             f"{', '.join(have) or '(none)'}")
    return i


def compile_model(mjcf: Path, remove_bodies: Sequence[str], where: str,
                  add_sites: Mapping[str, tuple[str, tuple[float, float, float]]] | None = None,
                  pd_joints: Sequence[str] = ()) -> Any:
    """The MjModel of ``mjcf`` (MJCF or URDF) through MjSpec, with ``remove_bodies`` deleted (a scene's props),
    ``add_sites`` added (site name -> (body, position in the body frame): an IMU the model does not mark) and an
    affine actuator ``PD_PREFIX + joint`` on each of ``pd_joints`` (an implicit PD's; RobotSim sets its gains)."""
    import mujoco

    if not mjcf.is_file():
        raise SimConfigError(f"{where}: sim.mjcf {str(mjcf)!r} does not exist")
    try:
        if not remove_bodies and not add_sites and not pd_joints:
            return mujoco.MjModel.from_xml_path(str(mjcf))
        spec = mujoco.MjSpec.from_file(str(mjcf))
        have = [b.name for b in spec.bodies if b.name]
        for name in remove_bodies:
            body = spec.body(name)
            if body is None:
                raise SimConfigError(f"{where}: sim.remove_bodies names body {name!r}, which the MJCF does not have; "
                                     f"its bodies: {', '.join(have)}")
            spec.delete(body)
        for site, (body_name, pos) in (add_sites or {}).items():
            body = spec.body(body_name)
            if body is None:
                raise SimConfigError(f"{where}: sim.add_sites.{site} names body {body_name!r}, which the MJCF does "
                                     f"not have; its bodies: {', '.join(have)}")
            body.add_site(name=site, pos=list(pos))
        for joint in pd_joints:  # every field the MJCF's defaults could set; gains and force range: RobotSim
            spec.add_actuator(name=PD_PREFIX + joint, target=joint, trntype=mujoco.mjtTrn.mjTRN_JOINT,
                              gear=[1.0, 0, 0, 0, 0, 0], dyntype=mujoco.mjtDyn.mjDYN_NONE,
                              gaintype=mujoco.mjtGain.mjGAIN_FIXED, biastype=mujoco.mjtBias.mjBIAS_AFFINE,
                              ctrllimited=mujoco.mjtLimited.mjLIMITED_FALSE,
                              forcelimited=mujoco.mjtLimited.mjLIMITED_FALSE,
                              actlimited=mujoco.mjtLimited.mjLIMITED_FALSE)
        return spec.compile()
    except (ValueError, mujoco.FatalError) as exc:
        if isinstance(exc, SimConfigError):
            raise
        raise SimConfigError(f"{where}: sim.mjcf {mjcf} does not compile: {' '.join(str(exc).split())}") from exc


def _add_sites(data: Any, where: str) -> dict[str, tuple[str, tuple[float, float, float]]]:
    """``sim.add_sites``: ``{site: {body: B, pos: [x, y, z]}}`` (pos default the body's origin)."""
    data = {} if data is None else data
    if not isinstance(data, Mapping):
        raise SimConfigError(f"{where}: sim.add_sites must map new site names to {{body: B, pos: [x, y, z]}}, "
                             f"got {data!r}")
    out = {}
    for site, entry in data.items():
        entry = _section(entry, f"sim.add_sites.{site}", ("body", "pos"), where)
        if not isinstance(entry.get("body"), str):
            raise SimConfigError(f"{where}: sim.add_sites.{site}.body is required: the MJCF body the site is fixed to")
        try:
            pos = _floats(f"sim.add_sites.{site}.pos", entry.get("pos", [0.0, 0.0, 0.0]), 3)
        except SimConfigError as exc:
            raise SimConfigError(f"{where}: {exc}") from exc
        out[str(site)] = (entry["body"], (pos[0], pos[1], pos[2]))
    return out


def parse_sim(robot: RobotFile) -> tuple[SimConfig, Any]:
    """The robot file's ``sim:`` section checked against the robot file and the MJCF; (config, MjModel).

    Raises:
        SimConfigError: naming the key and what exists, for a missing section, an unknown key, a name the
            MJCF lacks, an actuator that is not a plain motor on its joint, an unmapped robot joint, or a
            control period that is not a whole number of physics steps.
    """
    import mujoco

    where = robot.where("sim")
    data = robot.raw.get("sim")
    if data is None:
        raise SimConfigError(f"{where}: the robot file has no sim: section (docs/robot_file.md, 'Simulator')")
    d = _section(data, "sim", SIM_KEYS, where)
    if not isinstance(d.get("mjcf"), str) or not d["mjcf"]:
        raise SimConfigError(f"{where}: sim.mjcf is required: the MJCF (or URDF) path, relative to the robot file, "
                             "or pkg://<python package>/<path>")
    joints = robot.joints
    if not joints:
        raise SimConfigError(f"{where}: the robot file lists no joints; sim maps each of them to an MJCF joint")
    remove = d.get("remove_bodies", [])
    if not isinstance(remove, list) or not all(isinstance(b, str) for b in remove):
        raise SimConfigError(f"{where}: sim.remove_bodies must be a list of MJCF body names, got {remove!r}")
    mjcf = resolve_mjcf(d["mjcf"], robot.path)
    sites = _add_sites(d.get("add_sites"), where)
    model = compile_model(mjcf, remove, where, sites)

    mj_joints = _mapping_or_same(d.get("joints"), "joints", joints, where)
    for rj, mj in zip(joints, mj_joints):
        jid = _need(model, mujoco.mjtObj.mjOBJ_JOINT, model.njnt, mj, _key("joints", rj, d), "joint", where)
        if int(model.jnt_type[jid]) not in (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)):
            raise SimConfigError(f"{where}: sim.joints.{rj} maps to MJCF joint {mj!r}, which is not a hinge or "
                                 "slide joint (a robot-file joint is one degree of freedom)")
    interface = robot.raw.get("interface", "position")
    if interface not in ("position", "effort"):
        raise SimConfigError(f"{where}: interface {interface!r} is not simulated; sim supports position (PD on "
                             "position targets) and effort (direct torque)")
    acts = d.get("actuators")
    if acts == "joint":
        actuators: tuple[str, ...] = ()
    else:
        actuators = _mapping_or_same(acts, "actuators", joints, where)
        ids = [_need(model, mujoco.mjtObj.mjOBJ_ACTUATOR, model.nu, an, _key("actuators", rj, d), "actuator", where)
               for rj, an in zip(joints, actuators)]  # every name first: a missing one is the clearer error
        for rj, mj, an, aid in zip(joints, mj_joints, actuators, ids):
            jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, mj)
            motor = (int(model.actuator_trntype[aid]) == int(mujoco.mjtTrn.mjTRN_JOINT)
                     and int(model.actuator_trnid[aid, 0]) == jid
                     and int(model.actuator_dyntype[aid]) == int(mujoco.mjtDyn.mjDYN_NONE)
                     and int(model.actuator_gaintype[aid]) == int(mujoco.mjtGain.mjGAIN_FIXED)
                     and int(model.actuator_biastype[aid]) == int(mujoco.mjtBias.mjBIAS_NONE))
            if not motor:
                raise SimConfigError(f"{where}: sim.actuators.{rj}: MJCF actuator {an!r} is not a torque motor on "
                                     f"joint {mj!r} (sim computes the torque itself: it needs <motor "
                                     f"joint=\"{mj}\"/>, no bias, no dynamics); use another actuator or "
                                     "actuators: joint (torques applied to the joints directly, the MJCF's "
                                     "actuators off)")

    imu_site = d.get("imu_site")
    needs_imu = any(t.get("term") in ("imu_angular_velocity", "imu_linear_acceleration", "projected_gravity")
                    for t in robot.observation)
    if imu_site is None and needs_imu:
        raise SimConfigError(f"{where}: sim.imu_site is required: the observation has IMU terms; name the MJCF site "
                             "the IMU sits at")
    if imu_site is not None:
        _need(model, mujoco.mjtObj.mjOBJ_SITE, model.nsite, str(imu_site), "sim.imu_site", "site", where)
    base = d.get("base_body")
    if base is not None:
        _need(model, mujoco.mjtObj.mjOBJ_BODY, model.nbody, str(base), "sim.base_body", "body", where)
    feet = d.get("foot_geoms", [])
    if not isinstance(feet, list):
        raise SimConfigError(f"{where}: sim.foot_geoms must be a list of MJCF geom names, got {feet!r}")
    for g in feet:
        _need(model, mujoco.mjtObj.mjOBJ_GEOM, model.ngeom, str(g), "sim.foot_geoms", "geom", where)

    frame = d.get("state_estimate_frame", "body")
    if frame not in FRAMES:
        raise SimConfigError(f"{where}: sim.state_estimate_frame {frame!r}: one of {', '.join(FRAMES)}")
    ctl = _section(d.get("control"), "sim.control", CONTROL_KEYS, where)
    physics_dt = float(ctl.get("physics_dt", model.opt.timestep))
    integrator = ctl.get("integrator")
    if integrator is not None and integrator not in INTEGRATORS:
        raise SimConfigError(f"{where}: sim.control.integrator {integrator!r} is not MuJoCo's; one of "
                             f"{', '.join(INTEGRATORS)} (default: the MJCF's <option integrator>)")
    period = ctl.get("period_s")
    if not _positive(period) or not physics_dt > 0:
        raise SimConfigError(f"{where}: sim.control.period_s (the policy's control period, s) is required and > 0, "
                             f"got {period!r}")
    n = period / physics_dt
    if abs(n - round(n)) > 1e-6 * max(1.0, n) or round(n) < 1:
        raise SimConfigError(f"{where}: sim.control.period_s {period:g} is not a whole number of physics steps "
                             f"(physics_dt {physics_dt:g}: {n:.3f}); make it a multiple")
    nj = len(joints)
    if interface == "position":
        for key in ("kp", "kd"):
            if key not in ctl:
                raise SimConfigError(f"{where}: sim.control.{key} is required for interface position (PD gains, one "
                                     "number or one per joint)")
    pd = ctl.get("pd", "explicit")
    if pd not in PD_MODES:
        raise SimConfigError(f"{where}: sim.control.pd {pd!r}: one of {', '.join(PD_MODES)}")
    if pd == "implicit" and (interface != "position" or actuators):
        raise SimConfigError(f"{where}: sim.control.pd implicit needs interface position and sim.actuators: joint "
                             "(the simulator adds its own PD actuator per joint; the MJCF's are switched off)")
    kp = _per_joint("kp", ctl.get("kp", 0.0), nj, where, positive=False)
    kd = _per_joint("kd", ctl.get("kd", 0.0), nj, where, positive=False)
    if "torque_limit" not in ctl:
        raise SimConfigError(f"{where}: sim.control.torque_limit is required (N m, one number or one per joint)")
    limit = _per_joint("torque_limit", ctl["torque_limit"], nj, where)
    clip = ctl.get("action_clip", 1.0)
    if not _positive(clip):
        raise SimConfigError(f"{where}: sim.control.action_clip must be > 0, got {clip!r}")

    rst = _section(d.get("reset"), "sim.reset", RESET_KEYS, where)
    height = rst.get("base_height")
    if height is not None and not _positive(height):
        raise SimConfigError(f"{where}: sim.reset.base_height must be > 0 m, got {height!r}")
    noise = {k: float(rst.get(k, 0.0)) for k in ("joint_noise", "velocity_noise")}
    if any(not math.isfinite(v) or v < 0 for v in noise.values()):
        raise SimConfigError(f"{where}: sim.reset noises must be >= 0, got {dict(rst)!r}")
    if not robot.default_pose:
        raise SimConfigError(f"{where}: the robot file needs default_pose: the simulator resets to it")

    priors_raw = d.get("gap_priors") or {}
    if not isinstance(priors_raw, Mapping):
        raise SimConfigError(f"{where}: sim.gap_priors must map gap parameters to [lo, hi], got {priors_raw!r}")
    priors: dict[str, tuple[float, float]] = {}
    for key, rng in priors_raw.items():
        if key not in Gap.keys() or key == "body_mass_scale":
            raise SimConfigError(f"{where}: sim.gap_priors.{key} is not a gap parameter with a range; known: "
                                 f"{', '.join(k for k in Gap.keys() if k != 'body_mass_scale')}")
        lo_hi = _floats(f"sim.gap_priors.{key}", rng, 2)
        if lo_hi[0] > lo_hi[1]:
            raise SimConfigError(f"{where}: sim.gap_priors.{key} {rng!r} has lo > hi")
        priors[key] = (lo_hi[0], lo_hi[1])
    if pd == "implicit":  # every name is checked: now add the PD actuators
        model = compile_model(mjcf, remove, where, sites, pd_joints=mj_joints)
    cfg = SimConfig(mjcf=mjcf, remove_bodies=tuple(remove), add_sites=sites, joints=mj_joints, actuators=actuators,
                    imu_site=str(imu_site or ""), base_body=str(base or ""), foot_geoms=tuple(map(str, feet)),
                    state_estimate_frame=frame,
                    interface=interface, period_s=float(period), physics_dt=physics_dt, integrator=integrator,
                    pd=pd, kp=kp, kd=kd, torque_limit=limit, action_clip=float(clip),
                    base_height=None if height is None else float(height), gap_priors=priors, **noise)
    return cfg, model


class RobotSim:
    """The robot's MuJoCo simulator with a gap applied (see the module docstring). One thread only."""

    def __init__(self, robot: RobotFile, gap: Gap | None = None) -> None:
        import mujoco

        self.robot = robot
        self.config, self.model = parse_sim(robot)
        cfg, m = self.config, self.model
        m.opt.timestep = cfg.physics_dt
        if cfg.integrator is not None:
            m.opt.integrator = getattr(mujoco.mjtIntegrator, f"mjINT_{cfg.integrator.upper()}")
        self.data = mujoco.MjData(m)
        jid = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, j) for j in cfg.joints]
        self._qadr = np.array([m.jnt_qposadr[j] for j in jid])
        self._dadr = np.array([m.jnt_dofadr[j] for j in jid])
        self._act = np.array([mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, a) for a in cfg.actuators], dtype=int)
        self._pd = np.array([mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, PD_PREFIX + j) for j in cfg.joints]
                            if cfg.pd == "implicit" else [], dtype=int)
        if self._pd.size:  # MuJoCo runs the PD loop: its own actuators off, ours affine: kp ctrl - kp q - kd qdot
            own = np.setdiff1d(np.arange(m.nu), self._pd)
            m.actuator_gainprm[own] = 0.0
            m.actuator_biasprm[own] = 0.0
            m.actuator_forcelimited[self._pd] = 1  # the range is the torque limit (set_gap)
        elif not cfg.actuators:
            m.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_ACTUATION)
        else:
            self._ctrl_per_torque = 1.0 / (m.actuator_gainprm[self._act, 0] * m.actuator_gear[self._act, 0])
        self._site = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, cfg.imu_site) if cfg.imu_site else -1
        self._base = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, cfg.base_body) if cfg.base_body else -1
        free = [j for j in range(m.njnt)
                if int(m.jnt_type[j]) == int(mujoco.mjtJoint.mjJNT_FREE) and m.jnt_bodyid[j] == self._base]
        self._free_q = int(m.jnt_qposadr[free[0]]) if free else -1
        self._free_v = int(m.jnt_dofadr[free[0]]) if free else -1
        if cfg.state_estimate_frame == "heading" and self._free_q < 0:
            raise SimConfigError(f"{robot.where('sim')}: sim.state_estimate_frame heading needs sim.base_body with a "
                                 "free joint (a floating base); use body")
        self._feet = np.array([mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, g) for g in cfg.foot_geoms], dtype=int)
        self._mass0, self._inertia0 = m.body_mass.copy(), m.body_inertia.copy()
        self._friction0 = m.geom_friction.copy()
        self.default_pose = np.asarray(robot.default_pose, dtype=np.float64)
        self.names = list(robot.joints)
        self.rng = np.random.default_rng()
        self.set_gap(gap or Gap())
        self.reset()

    # ---- the gap ---------------------------------------------------------------------------------
    def set_gap(self, gap: Gap) -> None:
        """Apply ``gap`` to the model and the actuation (takes effect now; reset for a clean start)."""
        import mujoco

        m, cfg = self.model, self.config
        unknown = [b for b in gap.body_mass_scale if mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, b) < 0]
        if unknown:
            raise SimConfigError(f"gap.body_mass_scale names body {unknown[0]!r}, which the MJCF does not have; its "
                                 f"bodies: {', '.join(n for n in _names(m, mujoco.mjtObj.mjOBJ_BODY, m.nbody) if n)}")
        if gap.friction != 1.0 and not cfg.foot_geoms:
            raise SimConfigError(f"{self.robot.where('sim')}: a friction gap needs sim.foot_geoms (the geoms it "
                                 "scales)")
        per: dict[str, np.ndarray] = {}
        for key in PER_JOINT:
            value = np.asarray(getattr(gap, key), dtype=np.float64).ravel()
            if value.size not in (1, len(self.names)):
                raise SimConfigError(f"gap.{key} has {value.size} values; give one or {len(self.names)} (one per "
                                     f"robot-file joint: {', '.join(self.names)})")
            per[key] = np.broadcast_to(value, (len(self.names),)).copy()
        scale = np.full(m.nbody, gap.mass_scale)
        scale[0] = 1.0  # the world
        for b, s in gap.body_mass_scale.items():
            scale[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, b)] *= s
        m.body_mass[:] = self._mass0 * scale
        m.body_inertia[:] = self._inertia0 * scale[:, None]
        m.geom_friction[:] = self._friction0
        if self._feet.size:
            m.geom_friction[self._feet, 0] *= gap.friction
        self.gap = gap
        self._kp, self._kd = cfg.kp * per["kp_scale"], cfg.kd * per["kd_scale"]
        self._strength = per["motor_strength"]
        self._limit = cfg.torque_limit * self._strength
        self._offset = per["encoder_offset"]
        self._tilt = _quat_from_roll_pitch(*gap.tilt_bias)
        if self._pd.size:
            m.actuator_gainprm[self._pd, 0] = self._kp
            m.actuator_biasprm[self._pd, :3] = np.stack([np.zeros_like(self._kp), -self._kp, -self._kd], axis=1)
            m.actuator_forcerange[self._pd] = np.stack([-self._limit, self._limit], axis=1)

    # ---- stepping ------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> None:
        """The default pose (plus the configured noise), at rest; the latency queue filled with it."""
        import mujoco

        if seed is not None:
            self.rng = np.random.default_rng(seed)
        m, d, cfg = self.model, self.data, self.config
        mujoco.mj_resetData(m, d)
        if self._free_q >= 0 and cfg.base_height is not None:
            d.qpos[self._free_q + 2] = cfg.base_height
        # A noise of 0 draws nothing: the stream then goes on to the command as LeggedAnt's does (same seed, same
        # start and command: the parity check in docs/sim_to_real.md).
        n = len(self.names)
        d.qpos[self._qadr] = self.default_pose + (self.rng.uniform(-cfg.joint_noise, cfg.joint_noise, n)
                                                  if cfg.joint_noise else 0.0)
        if cfg.velocity_noise:
            d.qvel[self._dadr] = self.rng.uniform(-cfg.velocity_noise, cfg.velocity_noise, n)
        hold = self.default_pose if cfg.interface == "position" else np.zeros(len(self.names))
        if self._pd.size:  # an implicit PD holds the pose from the start (mj_resetData zeroed ctrl)
            d.ctrl[self._pd] = hold
        mujoco.mj_forward(m, d)
        self._queue: deque[np.ndarray] = deque([hold.copy()] * (self.gap.latency_steps + 1),
                                               maxlen=self.gap.latency_steps + 1)
        self.torque = np.zeros(len(self.names))
        self.time = 0.0

    def set_joints(self, position: np.ndarray | None, velocity: np.ndarray | None = None) -> None:
        """Put the joints at ``position`` (rad; None: unchanged) moving at ``velocity`` (None: at rest), robot-file
        order, after a reset: a replay starts from a recorded episode's first observation."""
        import mujoco

        if position is not None:
            self.data.qpos[self._qadr] = position
        self.data.qvel[self._dadr] = 0.0 if velocity is None else velocity
        mujoco.mj_forward(self.model, self.data)

    def step(self, targets: np.ndarray, physics_steps: int | None = None) -> None:
        """One control period (or ``physics_steps`` physics steps: a real-time sim robot catching up the wall
        clock, core/sim/robot_file_sim.py): ``targets`` (robot-file joint order; rad for position, N m for effort)
        reach the motors ``latency_steps`` physics steps late, then PD (position) or pass through (effort), clipped
        to the torque limit, every physics step."""
        import mujoco

        m, d = self.model, self.data
        targets = np.array(targets, dtype=np.float64)
        n = self.config.substeps if physics_steps is None else int(physics_steps)
        if self._pd.size:  # MuJoCo's PD (implicit damping), clipped to the torque limit by its force range
            # The latency queue holds each period's target once per physics step (the same array), so the targets
            # applied this period are a few runs of one array each: one mj_step call per run (the same physics).
            runs: list[list] = []
            for _ in range(n):
                self._queue.append(targets)
                if runs and runs[-1][0] is self._queue[0]:
                    runs[-1][1] += 1
                else:
                    runs.append([self._queue[0], 1])
            for applied, steps in runs:
                d.ctrl[self._pd] = applied
                mujoco.mj_step(m, d, steps)
            if runs:
                self.torque = d.actuator_force[self._pd].copy()
            self.time += self.config.period_s if physics_steps is None else n * self.config.physics_dt
            return
        for _ in range(n):
            self._queue.append(targets)
            applied = self._queue[0]
            if self.config.interface == "position":
                tau = self._kp * (applied - d.qpos[self._qadr]) - self._kd * d.qvel[self._dadr]
            else:
                tau = applied * self._strength
            tau = np.clip(tau, -self._limit, self._limit)
            if self._act.size:
                d.ctrl[self._act] = tau * self._ctrl_per_torque
            else:
                d.qfrc_applied[self._dadr] = tau
            self.torque = tau
            mujoco.mj_step(m, d)
        self.time += self.config.period_s if physics_steps is None else n * self.config.physics_dt

    # ---- sensors (the samples the policy node's observation builder takes) ------------------------
    def joint_state(self, noisy: bool = True) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """(names, position, velocity, effort), robot-file order; with the gap's encoder offsets and noise."""
        q = self.data.qpos[self._qadr] + self._offset
        v = self.data.qvel[self._dadr].copy()
        if noisy and self.gap.joint_position_noise:
            q = q + self.rng.normal(0.0, self.gap.joint_position_noise, q.size)
        if noisy and self.gap.joint_velocity_noise:
            v = v + self.rng.normal(0.0, self.gap.joint_velocity_noise, v.size)
        return self.names, q, v, self.torque.copy()

    def imu(self, noisy: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(orientation x, y, z, w: the IMU frame to the world; angular velocity, rad/s; linear acceleration,
        m/s^2, gravity included as an accelerometer reads it), in the IMU site's frame, with the gap's biases."""
        import mujoco

        if self._site < 0:
            raise SimConfigError(f"{self.robot.where('sim')}: no sim.imu_site: this robot has no simulated IMU")
        m, d = self.model, self.data
        quat = np.empty(4)
        mujoco.mju_mat2Quat(quat, d.site_xmat[self._site])
        tilted = np.empty(4)
        mujoco.mju_mulQuat(tilted, quat, self._tilt)
        if noisy and self.gap.orientation_noise:
            axis = self.rng.normal(size=3)
            tilted = _mul(tilted, _axis_angle(axis, self.rng.normal(0.0, self.gap.orientation_noise)))
        vel, acc = np.empty(6), np.empty(6)
        mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_SITE, self._site, vel, 1)
        mujoco.mj_rnePostConstraint(m, d)
        mujoco.mj_objectAcceleration(m, d, mujoco.mjtObj.mjOBJ_SITE, self._site, acc, 1)
        gyro = vel[:3] + np.asarray(self.gap.gyro_bias)
        if noisy and self.gap.gyro_noise:
            gyro = gyro + self.rng.normal(0.0, self.gap.gyro_noise, 3)
        w, x, y, z = tilted
        return np.array([x, y, z, w]), gyro, acc[3:].copy()

    def base_velocity(self) -> tuple[np.ndarray, np.ndarray]:
        """The true base body's (linear, angular) velocity in its own frame (rewards; never observed)."""
        import mujoco

        if self._base < 0:
            raise SimConfigError(f"{self.robot.where('sim')}: sim.base_body is needed for the base velocity")
        vel = np.empty(6)
        mujoco.mj_objectVelocity(self.model, self.data, mujoco.mjtObj.mjOBJ_BODY, self._base, vel, 1)
        return vel[3:].copy(), vel[:3].copy()

    def state_estimate(self) -> tuple[np.ndarray, np.ndarray]:
        """The base's true (linear, angular) velocity as the robot's state estimator reports it, in
        ``sim.state_estimate_frame``: ``body`` (:meth:`base_velocity`), or ``heading``: the world velocity turned by
        the base's yaw only (x forward, y left in the horizontal plane, z up: angular z is the yaw rate), as
        legged odometry and the legged example's reward (core/sim/legged.py) give it. Feeds the reward's twist
        inputs (RobotSimEnv) and the sim robot node's state estimate topic."""
        import mujoco

        if self.config.state_estimate_frame == "body":
            return self.base_velocity()
        # From the free joint's state after the step (qvel: world linear, body angular velocity), as LeggedAnt
        # reads it; the body velocities MuJoCo computes (cvel) are the step's start, one physics step behind.
        d = self.data
        quat, rot = d.qpos[self._free_q + 3:self._free_q + 7], np.empty(9)
        mujoco.mju_quat2Mat(rot, quat)
        yaw = math.atan2(rot[3], rot[0])
        c, s = math.cos(yaw), math.sin(yaw)
        turn = np.array([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]])
        v = d.qvel[self._free_v:self._free_v + 6]
        return turn @ v[:3], turn @ (rot.reshape(3, 3) @ v[3:])

    def base_up(self) -> float:
        """The z component of the base body's up axis in the world (1 upright, 0 on its side, -1 upside down)."""
        return float(self.data.xmat[max(self._base, 0)][8])


def _axis_angle(axis: np.ndarray, angle: float) -> np.ndarray:
    axis = axis / (np.linalg.norm(axis) or 1.0)
    return np.concatenate([[math.cos(angle / 2)], math.sin(angle / 2) * axis])


def _mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    import mujoco

    out = np.empty(4)
    mujoco.mju_mulQuat(out, a, b)
    return out


def _quat_from_roll_pitch(roll: float, pitch: float) -> np.ndarray:
    """w, x, y, z of a rotation by ``roll`` about x, then ``pitch`` about the rotated y (the IMU's mounting tilt;
    the legged example's convention, core/sim/legged.py ``_rpy_quat``)."""
    return _mul(_axis_angle(np.array([1.0, 0.0, 0.0]), roll), _axis_angle(np.array([0.0, 1.0, 0.0]), pitch))
