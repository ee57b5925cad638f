"""End-to-end parity: what the robot commands equals what the training framework computes, over 500 ticks.

One simulated robot (joints that follow their targets with a lag, a rocking base, a changing velocity
command) is driven in a closed loop by what lowrl_ros puts out: the imported int8 artifact, the robot
file's observation builder and the last-action feedback the import recorded. At every tick the source
framework's own inference, fed an observation built here independently from the framework's
definitions, must give the same command within the int8 budget. Feeding back the executed action where
the framework feeds back the raw output (lowrl_ros before issue 29), or the raw output where it feeds
back the action, must fail the same comparison.

Sources: an Isaac Lab run directory (its exported ONNX), an rsl_rl checkpoint (rsl_rl's own inference,
with a per-term joint-position history) and that actor's plain ONNX export imported with
``--last-action raw``, and an SB3 PPO zip (``model.predict``, convention "action").
"""
from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

from lowrl_ros.cli import main as lowrl_main
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


# ------------------------------------------------------------------------------------------- rsl_rl
# A legged_gym / Isaac Lab velocity-task observation as rsl_rl's envs build it, with a joint-position history of
# 3 steps stacked per term, oldest first, filled with the first value after a reset (Isaac Lab's CircularBuffer,
# ObservationTermCfg.history_length with flatten_history_dim). The env applies the term scales; the sidecar
# tells `lowrl import` those, the action scale 0.25 and the default pose (target = default + 0.25 y).
HISTORY = 3
RSL_SIDECAR = {
    "observations": [{"name": "base_ang_vel", "size": 3, "scale": 0.25}, {"name": "projected_gravity", "size": 3},
                     {"name": "velocity_commands", "size": 3}, {"name": "joint_pos_rel", "size": 12 * HISTORY},
                     {"name": "joint_vel_rel", "size": 12, "scale": 0.05}, {"name": "last_action", "size": 12}],
    "actions": {"names": JOINTS, "scale": 0.25, "offset": DEFAULT_POS, "low": [-0.8] * 4 + [-9.4] * 8,
                "high": [0.8] * 4 + [9.4] * 8},
    "control_period_s": DT,
}
RSL_OBS = sum(g["size"] for g in RSL_SIDECAR["observations"])
RSL_ROBOT = {
    "joints": JOINTS, "default_pose": DEFAULT_POS,
    "observation": [
        {"term": "imu_angular_velocity", "topic": "imu", "name": "base_ang_vel"},
        {"term": "projected_gravity", "topic": "imu", "quaternion_order": "xyzw"},
        {"term": "velocity_command", "topic": "cmd_vel", "name": "velocity_commands"},
        {"term": "joint_position", "topic": "joint_states", "relative": True, "name": "joint_pos_rel",
         "history": {"length": HISTORY, "order": "oldest_first"}},
        {"term": "joint_velocity", "topic": "joint_states", "name": "joint_vel_rel"},
        {"term": "last_action"},
    ]}


def legged_obs(s: dict, history: list, last: np.ndarray, ang_scale: float = 0.25, vel_scale: float = 0.05):
    """The env's observation from a Robot sample: its term scales applied, joint positions from ``history``."""
    gravity = _rotation(s["quat"]).T @ np.array([0.0, 0.0, -1.0])
    return np.concatenate([ang_scale * s["ang_vel"], gravity, s["cmd"], *history, vel_scale * s["qd"], last])


def rsl_reference(actor, *, limits=RSL_SIDECAR["actions"]):
    """rsl_rl's deterministic inference (MLPModel.forward, stochastic_output=False: what
    OnPolicyRunner.get_inference_policy runs; ActorCritic.act_inference before rsl-rl-lib 3) on the env's
    observation; the env's JointPositionAction target = default + 0.25 y, clipped to the joint limits; the
    next last_action is y itself."""
    import torch
    from tensordict import TensorDict

    default, low, high = np.array(DEFAULT_POS), np.array(limits["low"]), np.array(limits["high"])

    def step(s, state):
        history, last_y = state or ([], np.zeros(12))
        rel = s["q"] - default
        history = [rel] * HISTORY if not history else [*history[1:], rel]  # CircularBuffer: fill on first push
        obs = legged_obs(s, history, last_y)
        with torch.no_grad():
            td = TensorDict({"policy": torch.from_numpy(obs[None].astype(np.float32))}, batch_size=[1])
            y = actor(td)[0].numpy().astype(np.float64)
        return np.clip(default + 0.25 * y, low, high), (history, y)

    return step


@pytest.fixture(scope="module")
def rsl_policy(tmp_path_factory):
    """(rsl_rl actor, its run dir with model_0.pt and params/agent.yaml): a real rsl-rl-lib 5.5.1 MLPModel with
    its empirical normaliser fitted, saved as PPO.save lays out a checkpoint (no training: parity, not skill)."""
    import torch
    import yaml
    from rsl_rl.models import MLPModel
    from rsl_vecenv import train_cfg
    from tensordict import TensorDict

    run = tmp_path_factory.mktemp("rsl") / "anymal_flat"
    run.mkdir()
    torch.manual_seed(7)
    # Statistics as training would gather them: joint positions stay within ~0.1 rad of the default pose, so the
    # normaliser magnifies their history (a history stacked in the wrong order is then well outside int8's budget).
    std = torch.full((RSL_OBS,), 0.6)
    std[9:9 + 12 * HISTORY] = 0.1
    sample = torch.randn(256, RSL_OBS) * std + torch.linspace(-0.3, 0.3, RSL_OBS)
    obs = TensorDict({"policy": sample}, batch_size=[256])
    cfg = train_cfg("elu", hidden=(64, 32))
    actor = MLPModel(obs, cfg["obs_groups"], "actor", 12, hidden_dims=[64, 32], activation="elu",
                     obs_normalization=True, distribution_cfg={"class_name": "GaussianDistribution"})
    actor.train()
    actor.update_normalization(obs)
    actor.eval()
    with torch.no_grad():  # a trained policy's outputs span about +-2; a fresh init's far less
        actor.mlp[-1].weight.mul_(6.0)
    torch.save({"actor_state_dict": actor.state_dict(), "critic_state_dict": {}, "optimizer_state_dict": {},
                "iter": 0, "infos": None}, run / "model_0.pt")
    (run / "params").mkdir()
    (run / "params" / "agent.yaml").write_text(yaml.safe_dump(cfg))
    (run / "contract.yaml").write_text(yaml.safe_dump(RSL_SIDECAR))
    return actor, run


def test_rsl_rl_checkpoint_closed_loop_parity(rsl_policy, tmp_path):
    """`lowrl import model_0.pt --sidecar --int8` on the robot vs rsl_rl's own inference, history term included."""
    actor, run = rsl_policy
    out = tmp_path / "rsl_int8.onnx"
    assert lowrl_main(["import", str(run / "model_0.pt"), "--sidecar", str(run / "contract.yaml"), "-o", str(out),
                       "--int8"]) == 0
    ours, theirs, contract = run_lowrl(out, RSL_ROBOT, rsl_reference(actor))
    assert last_action_convention(contract) == "raw"  # recorded by the rsl_rl importer
    worst, mean = within_int8(ours, theirs, contract)
    assert worst <= INT8_WORST and mean <= INT8_MEAN, (worst, mean)
    assert np.ptp(theirs, axis=0).max() > 0.2
    # The wrong convention (the executed targets fed back) fails the same comparison.
    ours, theirs, _ = run_lowrl(out, RSL_ROBOT, rsl_reference(actor), feed="action")
    worst, mean = within_int8(ours, theirs, contract)
    assert worst > INT8_WORST or mean > INT8_MEAN, (worst, mean)
    # So does the history stacked newest first where the env stacks it oldest first.
    robot = copy.deepcopy(RSL_ROBOT)
    robot["observation"][3]["history"]["order"] = "newest_first"
    worst, mean = within_int8(*run_lowrl(out, robot, rsl_reference(actor)))
    assert worst > INT8_WORST or mean > INT8_MEAN, (worst, mean)


def test_plain_onnx_with_last_action_raw(rsl_policy, tmp_path, capsys):
    """rsl_rl's own ONNX export (MLPModel.as_onnx, as OnPolicyRunner.export_policy_to_onnx writes it) is a
    plain ONNX: `lowrl import --sidecar --last-action raw` gives parity; without the flag the import records
    "action" (a plain network's default, with a note saying to pass it) and the same loop fails parity."""
    import torch

    actor, run = rsl_policy
    onnx_model = actor.as_onnx(verbose=False).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(onnx_model, onnx_model.get_dummy_inputs(), str(tmp_path / "policy.onnx"), opset_version=11,
                          input_names=onnx_model.input_names, output_names=onnx_model.output_names, dynamo=False)
    sidecar = str(run / "contract.yaml")
    raw, plain = tmp_path / "raw_int8.onnx", tmp_path / "plain_int8.onnx"
    assert lowrl_main(["import", str(tmp_path / "policy.onnx"), "--sidecar", sidecar, "-o", str(raw), "--int8",
                       "--last-action", "raw"]) == 0
    assert lowrl_main(["import", str(tmp_path / "policy.onnx"), "--sidecar", sidecar, "-o", str(plain),
                       "--int8"]) == 0
    assert "--last-action raw" in capsys.readouterr().out  # the note on the plain import
    ours, theirs, contract = run_lowrl(raw, RSL_ROBOT, rsl_reference(actor))
    assert last_action_convention(contract) == "raw"
    worst, mean = within_int8(ours, theirs, contract)
    assert worst <= INT8_WORST and mean <= INT8_MEAN, (worst, mean)
    ours, theirs, contract = run_lowrl(plain, RSL_ROBOT, rsl_reference(actor))
    assert last_action_convention(contract) == "action"
    worst, mean = within_int8(ours, theirs, contract)
    assert worst > INT8_WORST or mean > INT8_MEAN, (worst, mean)


# ------------------------------------------------------------------------------------------- SB3
# A gymnasium legged env for SB3: the action is the joint target itself, in a Box of +-0.5 rad around the default
# pose (predict() clips PPO's Gaussian mean to it); the env applies the term scales and feeds back the action it
# was given (convention "action"). SB3 names no observations, so the robot file's term scales are the env's.
SB3_LOW, SB3_HIGH = np.array(DEFAULT_POS) - 0.5, np.array(DEFAULT_POS) + 0.5
SB3_ROBOT = {
    "joints": JOINTS, "default_pose": DEFAULT_POS,
    "observation": [
        {"term": "imu_angular_velocity", "topic": "imu", "scale": 0.25},
        {"term": "projected_gravity", "topic": "imu", "quaternion_order": "xyzw"},
        {"term": "velocity_command", "topic": "cmd_vel"},
        {"term": "joint_position", "topic": "joint_states", "relative": True},
        {"term": "joint_velocity", "topic": "joint_states", "scale": 0.05},
        {"term": "last_action"},
    ]}


def sb3_reference(model):
    """SB3's ``model.predict(obs, deterministic=True)`` (the Gaussian mean clipped to the Box) on the env's
    observation; the env commands that action and feeds it back as the next last_action."""
    def step(s, last):
        last = np.zeros(12) if last is None else last
        obs = legged_obs(s, [s["q"] - np.array(DEFAULT_POS)], last)
        action, _ = model.predict(obs.astype(np.float32), deterministic=True)
        return action.astype(np.float64), action.astype(np.float64)

    return step


@pytest.fixture(scope="module")
def sb3_ppo(tmp_path_factory):
    """(SB3 PPO model, its int8 artifact made with `lowrl import model.zip --int8`)."""
    import gymnasium as gym
    from test_import_sb3 import _model

    class LeggedEnv(gym.Env):
        observation_space = gym.spaces.Box(-np.inf, np.inf, (45,), np.float32)
        action_space = gym.spaces.Box(SB3_LOW.astype(np.float32), SB3_HIGH.astype(np.float32))

        def reset(self, *, seed=None, options=None):
            return np.zeros(45, np.float32), {}

        def step(self, action):
            return np.zeros(45, np.float32), 0.0, False, False, {}

    tmp = tmp_path_factory.mktemp("sb3")
    model = _model("ppo", env=LeggedEnv(), widen=(1.5, 60.0))  # actions both inside the Box and clipped
    model.save(tmp / "ppo_legged.zip")
    out = tmp / "ppo_int8.onnx"
    assert lowrl_main(["import", str(tmp / "ppo_legged.zip"), "-o", str(out), "--int8"]) == 0
    return model, out


def test_sb3_ppo_closed_loop_parity(sb3_ppo):
    model, artifact = sb3_ppo
    ours, theirs, contract = run_lowrl(artifact, SB3_ROBOT, sb3_reference(model))
    assert last_action_convention(contract) == "action"
    worst, mean = within_int8(ours, theirs, contract)
    assert worst <= INT8_WORST and mean <= INT8_MEAN, (worst, mean)
    assert np.ptp(theirs, axis=0).max() > 0.2
    clipped = np.isclose(theirs, SB3_LOW) | np.isclose(theirs, SB3_HIGH)
    assert 0.05 < clipped.mean() < 0.95, clipped.mean()  # the clip matters, so raw and action differ


def test_sb3_feeding_back_the_raw_output_fails_parity(sb3_ppo):
    model, artifact = sb3_ppo
    ours, theirs, contract = run_lowrl(artifact, SB3_ROBOT, sb3_reference(model), feed="raw")
    worst, mean = within_int8(ours, theirs, contract)
    assert worst > INT8_WORST or mean > INT8_MEAN, (worst, mean)
