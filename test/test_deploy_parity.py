"""End-to-end parity: what the robot commands equals what the training framework computes, over 500 ticks.

One simulated robot (joints that follow their targets with a lag, a rocking base, a changing velocity
command) is driven in a closed loop by what lowrl_ros puts out: the imported int8 artifact, the robot
file's observation builder and the last-action feedback the import recorded. At every tick the source
framework's own inference, fed an observation built here independently from the framework's
definitions, must give the same command within the int8 budget. Feeding back the executed action where
the framework feeds back the raw output (lowrl_ros before issue 29) must fail the same comparison.
"""
from __future__ import annotations

import numpy as np
import pytest

from lowrl_ros.core.importers.registry import ImportOptions, load_source, write_imported
from lowrl_ros.core.runtime.artifact import last_action_convention
from lowrl_ros.core.runtime.bundle import load_bundle
from lowrl_ros.core.runtime.control import ControlConfig, PolicyController
from lowrl_ros.core.runtime.observation import ObservationBuilder, ObservationSpec
from lowrl_ros.core.runtime.robot_file import parse_robot_file
from test_import_onnx import DEFAULT_POS, INT8_MEAN, INT8_WORST, JOINTS, _io_descriptors, make_run, ort_actions

DT = 0.02
TICKS = 500


def _rotation(q_xyzw: np.ndarray) -> np.ndarray:
    """Body-to-world rotation matrix of a unit quaternion (x, y, z, w)."""
    x, y, z, w = q_xyzw / np.linalg.norm(q_xyzw)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


class Robot:
    """A 12-joint base: joints follow the command with a lag, the base rocks, the command changes."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.q = np.array(DEFAULT_POS) + self.rng.normal(0, 0.05, 12)
        self.qd = np.zeros(12)
        self.t = 0.0

    def sense(self) -> dict:
        t = self.t
        roll, pitch, yaw = 0.15 * np.sin(1.3 * t), 0.1 * np.sin(0.7 * t + 1), 0.4 * t
        cr, sr, cp, sp, cy, sy = (np.cos(roll / 2), np.sin(roll / 2), np.cos(pitch / 2), np.sin(pitch / 2),
                                  np.cos(yaw / 2), np.sin(yaw / 2))
        quat = np.array([sr * cp * cy - cr * sp * sy, cr * sp * cy + sr * cp * sy,
                         cr * cp * sy - sr * sp * cy, cr * cp * cy + sr * sp * sy])  # xyzw
        k = int(t / 2.0)  # a new command every 2 s
        cmd = np.array([[0.5, 0.0, 0.2], [1.0, -0.3, 0.0], [-0.4, 0.2, -0.5], [0.0, 0.0, 1.0], [0.8, 0.4, 0.3]])[k % 5]
        return {"quat": quat, "ang_vel": np.array([0.2 * np.cos(1.3 * t), 0.07 * np.cos(0.7 * t + 1), 0.4]),
                "lin_vel": cmd[[0, 1, 2]] * [1.0, 1.0, 0.0] + 0.05 * np.sin(3 * t), "cmd": cmd,
                "q": self.q.copy(), "qd": self.qd.copy()}

    def apply(self, target: np.ndarray) -> None:
        q = self.q + 0.3 * (target - self.q) + self.rng.normal(0, 0.002, 12)
        self.qd, self.q = (q - self.q) / DT, q
        self.t += DT


def run_lowrl(artifact, robot_file: dict, reference, *, feed: str | None = None):
    """Drive a Robot with the artifact over TICKS; return (ours, the reference's) commands per tick.

    ``feed`` forces the builder's last-action convention (None: the one the import recorded).
    """
    bundle = load_bundle(artifact, engine="ort")
    contract = bundle.contract
    spec = ObservationSpec.from_robot_file(parse_robot_file(robot_file, "robot.yaml"), contract.control_period_s)
    spec.check_against(contract)
    builder = ObservationBuilder(spec, feed or last_action_convention(contract))
    clock = [0.0]
    controller = PolicyController(ControlConfig(soft_start_steps=0), bundle, clock=lambda: clock[0])
    controller.activate()
    robot, ref_state, ours, theirs = Robot(), None, [], []
    for _ in range(TICKS):
        s, now = robot.sense(), robot.t
        clock[0] = now
        builder.update("joint_states", (tuple(JOINTS), s["q"], s["qd"], np.zeros(12)), now)
        builder.update("imu", (s["quat"], s["ang_vel"], np.array([0.0, 0.0, 9.81])), now)
        builder.update("cmd_vel", [*s["cmd"][:2], 0.0, 0.0, 0.0, s["cmd"][2]], now)
        builder.update("base_lin_vel", s["lin_vel"], now)
        controller.observe(builder.build(now))
        result = controller.step(now)
        builder.after_step(result)
        want, ref_state = reference(s, ref_state)
        ours.append(result.action)
        theirs.append(want)
        robot.apply(result.action)
    return np.array(ours), np.array(theirs), contract


def within_int8(ours: np.ndarray, theirs: np.ndarray, contract) -> tuple[float, float]:
    span = np.array(contract.action_high) - np.array(contract.action_low)
    rel = np.abs(ours - theirs) / np.minimum(span, 2.0)  # +-pi joints: the budget of a 2 rad target span
    return float(rel.max()), float(rel.mean())


# ------------------------------------------------------------------------------------------- Isaac Lab

# No term scales here: the import folded Isaac Lab's (0.25, 0.05) into the artifact's obs_scale.
ISAAC_ROBOT = {
    "joints": JOINTS, "default_pose": DEFAULT_POS,
    "observation": [
        {"term": "array", "topic": "base_lin_vel", "size": 3, "name": "base_lin_vel"},
        {"term": "imu_angular_velocity", "topic": "imu", "name": "base_ang_vel"},
        {"term": "projected_gravity", "topic": "imu", "quaternion_order": "xyzw"},
        {"term": "velocity_command", "topic": "cmd_vel", "name": "generated_commands"},
        {"term": "joint_position", "topic": "joint_states", "relative": True, "name": "joint_pos_rel"},
        {"term": "joint_velocity", "topic": "joint_states", "name": "joint_vel_rel"},
        {"term": "last_action"},
    ]}


def isaac_reference(run):
    """Isaac Lab's definitions (isaaclab.envs.mdp): obs = [base_lin_vel, 0.25 base_ang_vel, projected_gravity
    (the world's (0, 0, -1) in the body frame), commands, joint_pos - default, 0.05 joint_vel, last raw action],
    y = exported/policy.onnx(obs), target = default + 0.5 y (JointPositionAction), within the joint limits."""
    limits = np.array(_io_descriptors()["articulations"]["robot"]["default_joint_pos_limits"])
    default = np.array(DEFAULT_POS)

    def step(s, last_y):
        last_y = np.zeros(12) if last_y is None else last_y
        gravity = _rotation(s["quat"]).T @ np.array([0.0, 0.0, -1.0])
        obs = np.concatenate([s["lin_vel"], 0.25 * s["ang_vel"], gravity, s["cmd"], s["q"] - default,
                              0.05 * s["qd"], last_y])
        y = ort_actions(run / "exported" / "policy.onnx", obs[None].astype(np.float32))[0]
        return np.clip(default + 0.5 * y, limits[:, 0], limits[:, 1]), y

    return step


@pytest.fixture(scope="module")
def isaac_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("isaac")
    run = make_run(tmp)  # IO descriptors where train.py --export_io_descriptors writes them
    path = write_imported(load_source(run, None, ImportOptions()), tmp / "policy_int8.onnx", int8=True)
    return run, path


def test_isaaclab_run_closed_loop_parity(isaac_run):
    run, artifact = isaac_run
    ours, theirs, contract = run_lowrl(artifact, ISAAC_ROBOT, isaac_reference(run))
    worst, mean = within_int8(ours, theirs, contract)
    assert worst <= INT8_WORST and mean <= INT8_MEAN, (worst, mean)
    assert np.ptp(theirs, axis=0).max() > 0.2  # the robot really moved: the comparison is not vacuous


def test_isaaclab_feeding_back_the_joint_targets_fails_parity(isaac_run):
    """The behaviour before issue 29 (the executed action as last_action) is caught by the same check."""
    run, artifact = isaac_run
    ours, theirs, contract = run_lowrl(artifact, ISAAC_ROBOT, isaac_reference(run), feed="action")
    worst, mean = within_int8(ours, theirs, contract)
    assert worst > INT8_WORST or mean > INT8_MEAN, (worst, mean)
