"""A robot's simulator by config: the robot file's sim: section, the generic env, gaps (core/sim/robot_sim.py,
core/sim/robot_env.py, core/finetune/sim_env.py) on dm_control's quadruped (config/robots/quadruped.yaml)."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from lowrl_ros.core.finetune.sim_env import make_robot_env
from lowrl_ros.core.runtime.observation import ObservationBuilder, ObservationSpec
from lowrl_ros.core.runtime.robot_file import load_robot_file, parse_robot_file
from lowrl_ros.core.sim import sim2sim
from lowrl_ros.core.sim.robot_env import RobotSimEnv
from lowrl_ros.core.sim.robot_sim import Gap, RobotSim, SimConfigError, load_gap_file, parse_sim

ROOT = Path(__file__).resolve().parents[1]
QUAD = ROOT / "config/robots/quadruped.yaml"
GAP = ROOT / "config/gaps/quadruped_example.yaml"
QUIET = {"joint_position_noise": 0.0, "joint_velocity_noise": 0.0, "gyro_noise": 0.0, "orientation_noise": 0.0}


def _raw() -> dict:
    return yaml.safe_load(QUAD.read_text())


def _robot(data: dict, tmp_path: Path):
    return parse_robot_file(data, str(tmp_path / "robot.yaml"))


def test_the_quadruped_loads_and_names_its_simulator():
    robot = load_robot_file(QUAD)  # the on-robot loader tolerates the sim: key
    env = make_robot_env(robot)
    assert env.observation_space.shape == (45,) and env.action_space.shape == (12,)
    assert env.sim.config.substeps == 4 and env.sim.config.actuators == ()  # torques on the joints, MJCF's off
    assert env.gap == Gap().as_dict() and env.gap["mass_scale"] == 1.0 and env.gap["latency_steps"] == 0
    assert env.episode_spec is not None  # reward: and episode: from the file
    assert env.reward_spec.names == ("track_lin_vel_xy", "track_ang_vel_z", "upright", "action_rate")
    env.reset(seed=0, options={"command": [0.0, 0.0, 0.0]})
    _, reward, *_, info = env.step(np.zeros(12))  # the reward inputs come from the simulator's true base velocity
    w_z = env.sim.base_velocity()[1][2]
    assert np.isfinite(reward)
    assert info["reward_terms"]["track_ang_vel_z"] == pytest.approx(0.5 * np.exp(-w_z ** 2 / 0.25))
    simulator = sim2sim.simulator_for(robot)
    assert simulator.env_id == f"robot_sim:{robot.path}" and simulator.launch == "sim2sim.launch.yaml"
    assert simulator.truth_names[:3] == ("imu_angular_velocity[x]", "imu_angular_velocity[y]",
                                         "imu_angular_velocity[z]")
    gap = load_gap_file(GAP)
    assert gap.latency_steps == 2 and gap.as_dict()["gyro_bias"] == [0.02, -0.01, 0.0]
    assert set(env.sim.config.gap_priors) <= set(Gap.keys())


def _rollout(env: RobotSimEnv, seed: int, steps: int = 100) -> np.ndarray:
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for _ in range(steps):
        obs, _, terminated, truncated, _ = env.step(np.zeros(12))
        out.append(obs)
        assert not terminated and not truncated
    return np.array(out)


def test_zero_action_stands_and_is_deterministic_per_seed():
    env = make_robot_env(QUAD, gap_file=GAP)  # noise on: determinism covers the sensor noise stream too
    a, b = _rollout(env, seed=3), _rollout(env, seed=3)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, _rollout(env, seed=4))
    assert env.sim.base_up() > 0.95 and env.sim.data.xpos[env.sim._base][2] > 0.4  # standing after 2 s


def test_a_network_output_that_feeds_itself_past_bound_ends_the_episode_with_finite_numbers():
    """The quadruped's retraining went NaN from this: a raw-convention actor whose output, read back as last_action,
    grew 1.28x a step until the critic's values overflowed. The episode now terminates as a failure."""
    from lowrl_ros.core.sim.robot_env import RUNAWAY

    env = make_robot_env(QUAD)
    env.reset(seed=0)
    clip = env.action_space.high
    raw = np.full(env.action_space.shape, 2.0)
    for step in range(400):
        obs, reward, terminated, truncated, info = env.step(np.clip(raw, -clip, clip), raw)
        assert np.isfinite(obs).all() and np.isfinite(reward)
        if terminated:
            break
        assert not info["runaway"] and np.abs(obs).max() <= RUNAWAY * clip[0]
        raw = raw * 1.28
    assert terminated and info["runaway"] and not truncated
    assert 2.0 * 1.28 ** step > RUNAWAY * clip[0] > 2.0 * 1.28 ** (step - 1)  # not before the bound
    env.reset(seed=0)
    obs, _, terminated, _, info = env.step(np.zeros_like(raw), np.full_like(raw, np.nan))
    assert terminated and info["runaway"] and np.isfinite(obs).all()


def test_implicit_pd_holds_the_pose_with_the_mjcfs_own_actuators_off(tmp_path):
    """pd: implicit: MuJoCo's own PD actuators (kd integrated implicitly), the quadruped's tendon actuators zeroed;
    it stands like the explicit PD, and the effort reads the PD's clipped torque."""
    data = _raw()
    data["sim"]["control"].update(pd="implicit", integrator="implicitfast")
    env = RobotSimEnv(_robot(data, tmp_path), Gap(**QUIET))
    env.reset(seed=0, options={"command": np.zeros(3)})
    for _ in range(50):
        env.step(np.zeros(12))
    _, q, _, effort = env.sim.joint_state()
    assert np.abs(q - env.sim.default_pose).max() < 0.1 and env.sim.base_up() > 0.95
    assert 0 < np.abs(effort).max() <= 600.0
    assert np.array_equal(env.sim.torque, env.sim.data.actuator_force[env.sim._pd])


def test_the_observation_is_the_policy_nodes_from_the_same_samples():
    env = RobotSimEnv(load_robot_file(QUAD), Gap(encoder_offset=0.01, gyro_bias=(0.1, 0.0, -0.05),
                                                  tilt_bias=(0.05, -0.1)), last_action="raw")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    spec = ObservationSpec.from_robot_file(env.robot, env.sim.config.period_s)
    builder = ObservationBuilder(spec, last_action="raw")
    builder.reset(0.0)
    for _ in range(5):
        action = rng.uniform(-2, 2, 12)  # beyond the action space: "raw" reads it unclipped
        obs, *_ = env.step(action)
        now = env.sim.time
        names, q, v, tau = env.sim.joint_state()
        orientation, gyro, acc = env.sim.imu()
        builder.update("joint_states", (names, q, v, tau), now)
        builder.update("imu", (orientation, gyro, acc), now)
        c = env.command
        builder.update("cmd_vel", (c[0], c[1], 0.0, 0.0, 0.0, c[2]), now)
        builder.set_last_action(np.clip(action, -1, 1), raw=action)
        np.testing.assert_array_equal(obs, builder.build(now).astype(np.float32))
    # The conventions, from the simulator's state directly: gyro in the IMU frame x 0.25 with the bias,
    # projected gravity = R^T (0, 0, -1) with R the site's rotation then the IMU's mounting tilt (roll about x,
    # then pitch about the new y), joint positions relative to default_pose with the encoder offset.
    sim, site = env.sim, env.sim._site
    np.testing.assert_allclose(obs[0:3], 0.25 * (_site_gyro(sim) + [0.1, 0.0, -0.05]), atol=1e-5)
    (cr, sr), (cp, sp) = (np.cos(0.05), np.sin(0.05)), (np.cos(-0.1), np.sin(-0.1))
    tilt = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]]) @ np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rotation = sim.data.site_xmat[site].reshape(3, 3) @ tilt
    np.testing.assert_allclose(obs[3:6], rotation.T @ [0.0, 0.0, -1.0], atol=1e-5)
    np.testing.assert_allclose(obs[9:21], sim.data.qpos[sim._qadr] + 0.01 - sim.default_pose, atol=1e-5)
    np.testing.assert_allclose(obs[33:45], action, atol=1e-5)


def _site_gyro(sim: RobotSim) -> np.ndarray:
    import mujoco

    vel = np.empty(6)
    mujoco.mj_objectVelocity(sim.model, sim.data, mujoco.mjtObj.mjOBJ_SITE, sim._site, vel, 1)
    return vel[:3]


def _settle(gap: Gap, periods: int = 100) -> RobotSim:
    sim = RobotSim(load_robot_file(QUAD), gap)
    sim.reset(seed=0)
    for _ in range(periods):
        sim.step(sim.default_pose)
    return sim


@pytest.mark.parametrize("robot_file", [QUAD, ROOT / "config/robots/legged_ant.yaml"])
@pytest.mark.parametrize("latency", [0, 2, 11])
def test_a_control_period_is_the_same_physics_as_its_physics_steps_one_at_a_time(robot_file, latency):
    """step() runs a period's physics steps in as few MuJoCo calls as the latency queue allows: bit for bit what
    one physics step per call gives (the quadruped's PD in Python, the legged robot's in MuJoCo; a latency
    longer than a period too)."""
    robot = load_robot_file(robot_file)
    batched, single = RobotSim(robot), RobotSim(robot)
    rng = np.random.default_rng(0)
    for sim in (batched, single):
        sim.set_gap(Gap(latency_steps=latency))
        sim.reset(seed=1)
    for _ in range(30):
        targets = batched.default_pose + rng.uniform(-0.3, 0.3, len(batched.names))
        batched.step(targets)
        for _ in range(single.config.substeps):
            single.step(targets, physics_steps=1)
        np.testing.assert_array_equal(batched.data.qpos, single.data.qpos)
        np.testing.assert_array_equal(batched.data.qvel, single.data.qvel)
        np.testing.assert_array_equal(batched.torque, single.torque)
    assert batched.time == pytest.approx(single.time)


def test_a_gap_changes_mass_friction_and_latency():
    nominal, heavy = _settle(Gap()), _settle(Gap(mass_scale=1.5))
    torso = nominal._base
    assert heavy.model.body_mass[torso] == pytest.approx(1.5 * nominal.model.body_mass[torso])
    assert heavy.data.xpos[torso][2] < nominal.data.xpos[torso][2] - 0.01  # sags under the same PD
    slippery = RobotSim(load_robot_file(QUAD), Gap(friction=0.5))
    feet = slippery._feet  # the toes and the floor (quadruped.yaml lists both: MuJoCo takes the larger friction)
    np.testing.assert_allclose(slippery.model.geom_friction[feet, 0], 0.5 * nominal.model.geom_friction[feet, 0])
    other = next(i for i in range(slippery.model.ngeom) if i not in set(np.atleast_1d(feet).tolist()))
    assert slippery.model.geom_friction[other, 0] == nominal.model.geom_friction[other, 0]
    # Latency: a new target reaches the motors latency_steps physics steps late (4 steps per period here).
    moved = []
    for latency in (0, 4):
        sim = _settle(Gap(latency_steps=latency), periods=50)
        target = sim.default_pose.copy()
        target[0] += 0.3
        before = sim.joint_state()[1][0]
        sim.step(target)
        moved.append(sim.joint_state()[1][0] - before)
    assert moved[0] > 0.01 and abs(moved[1]) < 0.2 * moved[0]
    with pytest.raises(SimConfigError, match="gap.body_mass_scale names body 'tail'.*torso"):
        nominal.set_gap(Gap(body_mass_scale={"tail": 2.0}))


def test_per_joint_gains_priors_and_the_mjcf_joint_limits():
    robot = load_robot_file(QUAD)
    sim = RobotSim(robot, Gap(kp_scale=tuple([0.5] * 6 + [2.0] * 6), motor_strength=0.8))
    np.testing.assert_allclose(sim._kp, [750.0] * 6 + [3000.0] * 6)
    np.testing.assert_allclose(sim._limit, 480.0)
    with pytest.raises(SimConfigError, match=r"gap.kd_scale has 3 values; give one or 12 .*yaw_front_left"):
        sim.set_gap(Gap(kd_scale=(1.0, 1.0, 1.0)))
    priors = sim.config.gap_priors
    drawn = [Gap(encoder_offset=(0.0,) * 12).sample(priors, np.random.default_rng(seed)) for seed in range(20)]
    assert drawn[0] == Gap(encoder_offset=(0.0,) * 12).sample(priors, np.random.default_rng(0))  # per seed
    for gap in drawn:
        d = gap.as_dict()
        for key, (lo, hi) in priors.items():
            assert all(lo <= v <= hi for v in np.ravel(d[key])), (key, d[key])
        assert len(d["encoder_offset"]) == 12 and isinstance(d["latency_steps"], int)
    assert len({g.mass_scale for g in drawn}) == 20
    # The robot file's action limits are the MJCF's joint ranges (config/robots/quadruped.yaml says so).
    limits = sim.model.jnt_range[[sim.model.joint(j).id for j in sim.config.joints]]
    action = robot.raw["action"]["limits"]
    np.testing.assert_allclose(np.array([action["lower"], action["upper"]]).T, limits, atol=1e-4)


def _refused(tmp_path: Path, edit, match: str) -> None:
    data = _raw()
    edit(data)
    with pytest.raises(SimConfigError, match=match):
        RobotSimEnv(_robot(data, tmp_path))


# dm_control's own actuators, one per robot-file joint: yaw on the yaw joints, lift and extend on tendons.
ACTS = {f"{j}_{leg}": f"{a}_{leg}" for leg in ("front_left", "front_right", "back_right", "back_left")
        for j, a in (("yaw", "yaw"), ("pitch", "lift"), ("knee", "extend"))}

REFUSED = {
    "joint": (lambda d: d["sim"].update(joints={"yaw_front_left": "hip_yaw_fl"}),
              r"sim.joints.yaw_front_left names joint 'hip_yaw_fl', which the MJCF does not have; its joints: root, "
              r"yaw_front_left"),
    "actuator of the wrong kind": (lambda d: d["sim"].update(actuators=ACTS),
                                   r"sim.actuators.yaw_front_left: MJCF actuator 'yaw_front_left' is not a torque "
                                   r"motor on joint 'yaw_front_left'"),
    "actuator": (lambda d: d["sim"].update(actuators={**ACTS, "knee_back_left": "knee_motor"}),
                 r"sim.actuators.knee_back_left names actuator 'knee_motor'.*its actuators: yaw_front_left"),
    "site": (lambda d: d["sim"].update(imu_site="imu"), r"sim.imu_site names site 'imu'.*its sites: .*torso"),
    "body": (lambda d: d["sim"].update(base_body="base"), r"sim.base_body names body 'base'.*its bodies: world, torso"),
    "geom": (lambda d: d["sim"]["foot_geoms"].append("foot_fl"),
             r"sim.foot_geoms names geom 'foot_fl'.*toe_front_left"),
    "removed body": (lambda d: d["sim"].update(remove_bodies=["balloon"]),
                     r"sim.remove_bodies names body 'balloon'.*ball"),
    "unmapped robot joint": (lambda d: d["sim"].update(joints={"tail_joint": "yaw_front_left"}),
                             r"sim.joints maps 'tail_joint', which is not a robot-file joint \(joints: yaw_front_left"),
    "robot joint the MJCF lacks": (lambda d: d.update(joints=["tail"] + d["joints"][1:]),
                                   r"sim.joints.tail \(unset: the robot-file joint's own name; map it in sim.joints\) "
                                   r"names joint 'tail', which the MJCF does not have"),
    "period": (lambda d: d["sim"]["control"].update(period_s=0.012),
               r"sim.control.period_s 0.012 is not a whole number of physics steps \(physics_dt 0.005"),
    "unknown key": (lambda d: d["sim"].update(imu="torso"), r"unknown key sim.imu; known: mjcf, "),
    "mjcf": (lambda d: d["sim"].update(mjcf="quadruped.xml"), r"sim.mjcf '.*quadruped.xml' does not exist"),
    "prior": (lambda d: d["sim"]["gap_priors"].update(mass=[0.5, 1.5]), r"sim.gap_priors.mass is not a gap parameter"),
    "added site's body": (lambda d: d["sim"].update(add_sites={"imu": {"body": "base"}}),
                          r"sim.add_sites.imu names body 'base'.*its bodies: world, torso"),
    "added site's key": (lambda d: d["sim"].update(add_sites={"imu": {"body": "torso", "quat": [1, 0, 0, 0]}}),
                         r"unknown key sim.add_sites.imu.quat; known: body, pos"),
    "integrator": (lambda d: d["sim"]["control"].update(integrator="rk4"),
                   r"sim.control.integrator 'rk4' is not MuJoCo's; one of Euler, RK4, implicit, implicitfast"),
    "pd": (lambda d: d["sim"]["control"].update(pd="ideal"), r"sim.control.pd 'ideal': one of explicit, implicit"),
    "implicit pd on torques": (lambda d: (d.update(interface="effort"), d["sim"]["control"].update(pd="implicit")),
                               r"sim.control.pd implicit needs interface position and sim.actuators: joint"),
    "frame": (lambda d: d["sim"].update(state_estimate_frame="world"),
              r"sim.state_estimate_frame 'world': one of body, heading"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_config_that_disagrees_is_refused_naming_the_entry(case, tmp_path):
    edit, match = REFUSED[case]
    _refused(tmp_path, edit, match)


def test_a_robot_file_side_mismatch_and_a_bad_gap_file_are_refused(tmp_path):
    data = _raw()
    data["observation"].append({"term": "array", "topic": "height_scan", "size": 4})
    with pytest.raises(SimConfigError, match=r"observation term 6 'array' \(topic height_scan\) has no simulated"):
        RobotSimEnv(_robot(data, tmp_path))
    no_sim = copy.deepcopy(_raw())
    del no_sim["sim"]
    with pytest.raises(SimConfigError, match="has no sim: section"):
        parse_sim(_robot(no_sim, tmp_path))
    bad = tmp_path / "gap.yaml"
    bad.write_text("gap: {mass_scale: 0.8, latency: 3}\n")
    with pytest.raises(SimConfigError, match=r"gap: unknown gap key\(s\) latency; the gap parameters are mass_scale"):
        load_gap_file(bad)
    bad.write_text("gap: {latency_steps: 1.5}\n")
    with pytest.raises(SimConfigError, match="latency_steps must be an integer"):
        load_gap_file(bad)


def test_the_robot_files_reward_section_drives_the_reward(tmp_path):
    data = _raw()
    data["reward"] = {"terms": [{"term": "upright", "weight": 2.0}, {"term": "alive", "weight": 1.0}]}
    env = make_robot_env(_robot(data, tmp_path), Gap(**QUIET))
    env.reset(seed=0)
    _, reward, *_, info = env.step(np.zeros(12))
    assert set(info["reward_terms"]) == {"upright", "alive"}
    assert reward == pytest.approx(sum(info["reward_terms"].values())) and 0.9 < reward <= 1.0


PENDULUM_MJCF = """<mujoco><option timestep="0.01"/><worldbody><body name="arm">
<joint name="hinge" type="hinge" axis="0 1 0"/><geom name="rod" type="capsule" fromto="0 0 0 0 0 -0.5" size="0.03"/>
</body></worldbody><actuator><motor name="hinge_motor" joint="hinge" gear="2"/></actuator></mujoco>"""
PENDULUM_URDF = """<robot name="pendulum"><link name="base"/><link name="arm"><inertial><mass value="1"/>
<origin xyz="0 0 -0.25"/><inertia ixx="0.02" iyy="0.02" izz="0.001" ixy="0" ixz="0" iyz="0"/></inertial></link>
<joint name="hinge" type="revolute"><parent link="base"/><child link="arm"/><axis xyz="0 1 0"/>
<limit lower="-3" upper="3" effort="10" velocity="10"/></joint></robot>"""


def _pendulum(tmp_path: Path, model: str, text: str, interface: str, sim: dict):
    (tmp_path / model).write_text(text)
    data = {"joints": ["hinge"], "default_pose": [0.0], "interface": interface,
            "observation": [{"term": "joint_position", "topic": "joint_states"},
                            {"term": "joint_velocity", "topic": "joint_states"}],
            "sim": {"mjcf": model, **sim}}
    return _robot(data, tmp_path)


def test_effort_through_a_motor_actuator_and_a_urdf_through_mujocos_compiler(tmp_path):
    # Effort: the target is the torque; the motor's gear is accounted (ctrl = torque / gear).
    robot = _pendulum(tmp_path, "pendulum.xml", PENDULUM_MJCF, "effort",
                      {"actuators": {"hinge": "hinge_motor"}, "control": {"period_s": 0.02, "torque_limit": 5.0}})
    sim = RobotSim(robot, Gap(motor_strength=0.5))
    sim.reset(seed=0)
    sim.step(np.array([4.0]))
    assert sim.data.ctrl[0] == pytest.approx(4.0 * 0.5 / 2.0) and sim.data.qfrc_actuator[0] == pytest.approx(2.0)
    assert sim.joint_state()[3][0] == pytest.approx(2.0)  # effort: the torque at the joint
    # A URDF (MuJoCo compiles it) with PD torques applied to the joint, relative to the robot file.
    robot = _pendulum(tmp_path, "pendulum.urdf", PENDULUM_URDF, "position",
                      {"actuators": "joint", "control": {"period_s": 0.02, "kp": 50.0, "kd": 2.0,
                                                         "torque_limit": 10.0}})
    sim = RobotSim(robot)
    for _ in range(100):
        sim.step(np.array([0.5]))
    assert sim.joint_state()[1][0] == pytest.approx(0.5, abs=0.1)  # PD holds it near the target against gravity
