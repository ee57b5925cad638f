"""Identifying the legged robot's gap from its recorded steps (core/sim/sysid.py) and folding sensor biases.

Short recordings of a gapped LeggedAnt (real MuJoCo, the shipped int8 policy on the numpy engine);
each test takes a few seconds. The full method is `lowrl bench sim2real --envs LeggedAnt --methods sysid`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lowrl_ros.core.runtime.engines import load_artifact
from lowrl_ros.core.sim import legged, sysid
from lowrl_ros.core.sim.reality_gap import RealityGapConfig, make_gapped_env

ARTIFACT = Path(__file__).resolve().parents[1] / "models" / "legged_ant_int8.onnx"
SENSORS = dict(encoder_offset=(0.1, -0.1, 0.05, 0.1, -0.08, 0.1, 0.0, -0.1), gyro_bias=(0.2, -0.2, 0.1),
               tilt_bias=(0.1, -0.08))
PHYSICS = dict(mass_scale=1.4, friction_scale=0.6, kp_scale=(0.6,), latency_physics_steps=6)


def _record(gap: RealityGapConfig, episodes: int, steps: int) -> sysid.Recording:
    policy = load_artifact(ARTIFACT, engine="numpy")
    env = make_gapped_env("LeggedAnt", gap, max_episode_steps=steps)
    try:
        return sysid.record(lambda o: policy.act(np.asarray(o, dtype=np.float32)), env, episodes * steps, seed=3)
    finally:
        env.close()


def test_sensor_biases_and_noise_come_out_of_the_episode_starts():
    gap = RealityGapConfig(**SENSORS, **PHYSICS, imu_noise_std=0.02, obs_noise_std=0.01)
    rec = _record(gap, episodes=40, steps=2)
    assert len(rec.observations) == 40 and rec.steps == 80
    found = sysid.identify_sensors(rec)
    # The reset spreads each joint uniformly by +-0.05 rad: the mean of 40 starts is within ~3 standard errors.
    assert np.allclose(found["encoder_offset"], SENSORS["encoder_offset"], atol=0.015)
    assert np.allclose(found["gyro_bias"], SENSORS["gyro_bias"], atol=0.015)
    assert np.allclose(found["tilt_bias"], SENSORS["tilt_bias"], atol=0.01)
    assert found["imu_noise_std"] == pytest.approx(0.02, rel=0.25)
    assert found["obs_noise_std"] == pytest.approx(0.01, rel=0.25)
    # The sim itself: no bias found.
    plain = sysid.identify_sensors(_record(RealityGapConfig(), episodes=4, steps=2))
    assert np.allclose(plain["gyro_bias"], 0.0) and np.allclose(plain["tilt_bias"], 0.0, atol=1e-9)


def test_the_replay_reproduces_a_noise_free_robot_exactly_at_its_true_gap_and_not_elsewhere():
    gap = RealityGapConfig(**SENSORS, **PHYSICS)
    rec = _record(gap, episodes=3, steps=20)
    obj = sysid.ReplayObjective(rec, sysid.identify_sensors(rec) | dict(SENSORS), window=20, episodes=3)
    truth = {k: getattr(gap, k) for k in sysid.PHYSICS_RANGES}
    assert obj(truth) < 1e-9  # same robot, same actions, same start: the same observations
    for name, wrong in (("kp_scale", (1.0,)), ("latency_physics_steps", 0), ("mass_scale", 1.0)):
        assert obj({**truth, name: wrong}) > 1e-3, name


def test_identification_finds_stiffness_and_latency_of_a_noise_free_robot():
    gap = RealityGapConfig(**SENSORS, **PHYSICS)
    rec = _record(gap, episodes=4, steps=25)
    found = sysid.identify(rec, window=25, episodes=4, iterations=6, population=16, seed=0)
    assert found.robot_steps == 100
    assert found.physics["kp_scale"][0] == pytest.approx(0.6, abs=0.1)
    assert abs(found.physics["latency_physics_steps"] - 6) <= 2
    sim = {"mass_scale": 1.0, "friction_scale": 1.0, "motor_strength": (1.0,), "kp_scale": (1.0,),
           "latency_physics_steps": 0}
    obj = sysid.ReplayObjective(rec, found.sensors, window=25, episodes=4)
    assert found.objective < 0.2 * obj(sim)  # far closer to the robot than the simulation was
    assert found.gap(biases=False).gyro_bias == (0.0,) and found.gap().kp_scale == found.physics["kp_scale"]


def test_folded_offsets_make_the_robot_read_what_the_sim_reads(tmp_path):
    out = sysid.fold_sensor_offsets(ARTIFACT, tmp_path / "folded.onnx", SENSORS)
    base, folded = load_artifact(ARTIFACT, engine="numpy"), load_artifact(out, engine="numpy")
    assert folded.contract.provenance["sensor_offsets_folded"]
    env = legged.LeggedAnt()
    sim_obs, _ = env.reset(seed=1)
    robot_obs = sim_obs + sysid.sensor_obs_offset(SENSORS).astype(np.float32)  # biased readings, as the robot's
    assert np.allclose(folded.act(robot_obs), base.act(sim_obs), atol=1e-5)
    assert not np.allclose(base.act(robot_obs), base.act(sim_obs), atol=1e-3)
    # The upright robot's gravity reading with the tilt is exactly the folded offset's.
    tilted = legged.LeggedAnt(gap=RealityGapConfig(tilt_bias=SENSORS["tilt_bias"]))
    obs, _ = tilted.reset(seed=1)
    assert np.allclose(obs[sysid.GRAVITY], sim_obs[sysid.GRAVITY] + sysid.sensor_obs_offset(SENSORS)[sysid.GRAVITY],
                       atol=1e-6)
    with pytest.raises(ValueError, match="legged robot file"):
        sysid.fold_sensor_offsets(Path(__file__).resolve().parents[1] / "models" / "pendulum_sac_int8.onnx",
                                  tmp_path / "x.onnx", SENSORS)


def test_a_bad_recording_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="no episodes"):
        sysid.identify_sensors(sysid.Recording())
    bad = sysid.Recording([np.zeros((3, legged.OBS_DIM))], [np.zeros((3, 8))])
    with pytest.raises(ValueError, match="observation after every action"):
        bad.check()
    with pytest.raises(ValueError, match="at least 2 episode starts"):
        sysid.identify_sensors(sysid.Recording([np.zeros((2, legged.OBS_DIM))], [np.zeros((1, 8))]))


def test_the_bench_refuses_sysid_off_the_legged_robot(capsys):
    import argparse

    from lowrl_ros.bench.sim2real import add_arguments, run

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert run(parser.parse_args(["--envs", "Pendulum-v1", "--methods", "sysid", "--out", "/tmp/none"])) == 2
    assert "--envs LeggedAnt" in capsys.readouterr().out


def test_a_recording_comes_out_of_transitions_as_the_fine_tuner_logs_them():
    rec = _record(RealityGapConfig(**SENSORS), episodes=3, steps=4)
    obs = np.concatenate([o[:-1] for o in rec.observations])
    nxt = np.concatenate([o[1:] for o in rec.observations])
    act = np.concatenate(rec.actions)
    done = np.zeros(len(act), dtype=bool)
    done[3::4] = True
    back = sysid.Recording.from_transitions(obs, act, nxt, done)
    assert len(back.observations) == 3 and back.steps == 12
    assert all(np.array_equal(a, b) for a, b in zip(back.observations, rec.observations))
    late = sysid.Recording.from_transitions(obs, act, nxt, done, first_is_start=False)
    assert late.steps == 8 and np.array_equal(late.observations[0], rec.observations[1])
    with pytest.raises(ValueError, match="different lengths"):
        sysid.Recording.from_transitions(obs, act[:-1], nxt, done)


def _train_legged_script():
    """scripts/train_legged.py as a module (scripts/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_legged", Path(__file__).resolve().parents[1] / "scripts"
                                                  / "train_legged.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_train_legged_sysid_identifies_from_a_transition_log_and_folds(tmp_path):
    """The user's path: finetune_node's transition log -> identified gap (sim robot parameters) -> folded artifact."""
    import yaml

    from lowrl_ros.core.finetune.transition_log import Transition, TransitionLogWriter

    rec = _record(RealityGapConfig(**SENSORS), episodes=3, steps=6)
    writer = TransitionLogWriter(tmp_path / "log")
    for o, a in zip(rec.observations, rec.actions):
        for t in range(len(a)):
            writer.append(Transition(o[t], a[t], 0.0, o[t + 1], False, t == len(a) - 1, 1, float(t)))
    writer.close()
    script = _train_legged_script()
    out, gap_file = tmp_path / "folded.onnx", tmp_path / "gap.yaml"
    assert script.main(["sysid", str(tmp_path / "log"), "--gap-out", str(gap_file), "-o", str(out),
                        "--window", "5", "--episodes", "2", "--iterations", "1"]) == 0
    params = yaml.safe_load(gap_file.read_text())["/**/sim_robot"]["ros__parameters"]
    assert np.allclose(params["gap.gyro_bias"], SENSORS["gyro_bias"], atol=0.02)
    assert params["env_id"] == "LeggedAnt"
    RealityGapConfig(**{k[len("gap."):]: tuple(v) if isinstance(v, list) else v for k, v in params.items()
                        if k.startswith("gap.")})
    assert load_artifact(out, engine="numpy").contract.provenance["sensor_offsets_folded"]


def test_train_legged_command_ranges_reach_the_training_envs():
    """`train --command-ranges` (e.g. a wider yaw-rate range) sets the range each training env draws from;
    a malformed one is refused with the format."""
    import pytest

    script = _train_legged_script()
    ranges = script.parse_ranges("0,0.6,-0.1,0.1,-0.8,0.8")
    assert ranges == ((0.0, 0.6), (-0.1, 0.1), (-0.8, 0.8)) and script.parse_ranges(None) is None
    env = script.make_vec_env(2, 0, ranges)
    try:
        assert all(np.allclose(r, ranges) for r in env.get_attr("command_ranges"))
        env.reset()
        assert all(abs(c[2]) <= 0.8 for c in env.get_attr("command"))
    finally:
        env.close()
    default = script.make_vec_env(1, 0)
    assert np.allclose(default.get_attr("command_ranges")[0], ((0.0, 0.6), (-0.1, 0.1), (-0.2, 0.2)))
    default.close()
    for bad in ("0,0.6", "0,0.6,-0.1,0.1,0.8,-0.8", "0,0.6,-0.1,0.1,-0.8,fast"):
        with pytest.raises(SystemExit, match="vx_lo,vx_hi"):
            script.parse_ranges(bad)
