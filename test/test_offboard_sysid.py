"""Off-board real-to-sim (core/finetune/offboard_sysid.py): streamed transitions of the gapped legged robot
in, the base artifact with the identified sensor biases folded released as the next version, judged.

The transitions are real: the shipped int8 policy walking a gapped LeggedAnt in MuJoCo (short episodes).
The judging tests then feed the new version's episodes with returns chosen by the test: what the robot
would report, to check both outcomes.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lowrl_ros.core.finetune.offboard_sysid import OffboardSysid, SysidSettings
from lowrl_ros.core.finetune.transition_log import Transition, read_log
from lowrl_ros.core.runtime.artifact import parse_artifact, read_artifact_bytes
from lowrl_ros.core.runtime.bundle import load_bundle
from lowrl_ros.core.runtime.engines import load_artifact
from lowrl_ros.core.sim import legged, sysid
from lowrl_ros.core.sim.reality_gap import RealityGapConfig, make_gapped_env

ARTIFACT = Path(__file__).resolve().parents[1] / "models" / "legged_ant_int8.onnx"
OFFSETS = (0.1, -0.1, 0.1, 0.1, -0.1, 0.1, 0.1, -0.1)
SETTINGS = SysidSettings(episodes=6, window=10, iterations=1, judge_episodes=2)


def _transitions(version: int, episodes: int, steps: int, start: int = 0) -> tuple[list[int], list[Transition]]:
    """``episodes`` numbered episodes of the base policy on the gapped robot, tagged ``version``."""
    gap = RealityGapConfig(encoder_offset=OFFSETS, gyro_bias=(0.2, -0.2, 0.1), tilt_bias=(0.1, -0.08),
                           kp_scale=(0.6,))
    policy = load_artifact(ARTIFACT, engine="numpy")
    env = make_gapped_env("LeggedAnt", gap, max_episode_steps=steps)
    rec = sysid.record(lambda o: policy.act(np.asarray(o, dtype=np.float32)), env, episodes * steps, seed=5)
    env.close()
    out = []
    for obs, actions in zip(rec.observations, rec.actions):
        for i, a in enumerate(actions):
            out.append(Transition(obs[i], a, 1.0, obs[i + 1], False, i == len(actions) - 1, version, 0.0))
    return list(range(start, start + len(out))), out


def _retagged(ts: list[Transition], version: int, reward: float) -> list[Transition]:
    return [Transition(t.obs, t.action, reward, t.next_obs, t.terminated, t.truncated, version, t.stamp) for t in ts]


@pytest.fixture(scope="module")
def base_stream():
    return _transitions(1, SETTINGS.episodes + 2, 12)


def test_identifies_after_enough_episodes_and_releases_the_base_with_the_biases_folded(base_stream, tmp_path):
    indices, ts = base_stream
    learner = OffboardSysid(ARTIFACT, 1, tmp_path / "work", tmp_path / "releases", SETTINGS)
    # The stream begins at index 0, the robot's first transition: its first episode began when the policy was
    # enabled, with no reset before it (the robot may still move), so it does not count; the ones after ends do.
    assert learner.receive(indices[:-24], ts[:-24]) == [] and not learner.can_learn()
    assert learner.step() == [] and len(learner._episodes) == SETTINGS.episodes - 1
    learner.receive(indices[-24:], ts[-24:])
    assert learner.can_learn()
    (bundle_path,) = learner.step()
    assert bundle_path == tmp_path / "releases" / "v000002.lowrl" and learner.state == "judging"
    released = load_bundle(bundle_path)
    assert released.version == 2
    art = parse_artifact(read_artifact_bytes(learner.work_dir / "sysid" / "v000002_int8.onnx"), "v2")
    base = parse_artifact(read_artifact_bytes(ARTIFACT), "base")
    assert art.contract.parent_version == 1
    shift = np.asarray(art.contract.obs_offset) - np.asarray(base.contract.obs_offset)
    assert np.allclose(shift[sysid.JOINT_POS], OFFSETS, atol=0.04)  # the encoder offsets, from 6 starts
    assert np.allclose(shift[sysid.COMMAND], 0.0) and np.allclose(shift[sysid.LAST_ACTION], 0.0)
    assert all(np.array_equal(a.bias, b.bias) and np.array_equal(a.weight_t, b.weight_t)
               for a, b in zip(art.layers, base.layers))  # the stored (int8) weights are untouched
    status = json.loads((learner.work_dir / "sysid" / "status.json").read_text())
    assert status["state"] == "judging" and status["released"] == [2]
    assert "encoder_offset" in status["identified"]["gap"]["sensors"]
    learner.close()
    assert len(read_log(learner.work_dir / "transitions")[0]) == len(ts)  # every transition kept on disk


@pytest.mark.parametrize("reward, kept", [(2.0, True), (0.5, False)])
def test_the_new_version_is_judged_against_the_base_and_rolled_back_if_worse(base_stream, tmp_path, reward, kept):
    indices, ts = base_stream
    learner = OffboardSysid(ARTIFACT, 1, tmp_path / "work", tmp_path / "releases", SETTINGS)
    learner.receive(indices, ts)
    learner.step()
    n = 12 * SETTINGS.judge_episodes
    more = _retagged(ts[:n], 2, reward)  # the robot's episodes with v2 (reward per step chosen here)
    out = learner.receive(list(range(indices[-1] + 1, indices[-1] + 1 + n)), more)
    assert json.loads((learner.work_dir / "sysid" / "status.json").read_text())["decision"] == learner.last_decision
    if kept:
        assert out == [] and learner.state == "kept" and "v2 kept" in learner.last_decision
    else:
        assert out == [tmp_path / "releases" / "v000003.lowrl"] and learner.state == "rolled_back"
        assert load_bundle(out[0]).version == 3
        rolled = parse_artifact(read_artifact_bytes(learner.work_dir / "sysid" / "v000003_int8.onnx"), "v3")
        base = parse_artifact(read_artifact_bytes(ARTIFACT), "base")
        assert rolled.contract.obs_offset == base.contract.obs_offset  # the base, as it was
    learner.close()


def test_refuses_a_policy_that_is_not_the_legged_robots(tmp_path):
    pendulum = Path(__file__).resolve().parents[1] / "models" / "pendulum_sac_int8.onnx"
    with pytest.raises(ValueError, match="legged example robot"):
        OffboardSysid(pendulum, 1, tmp_path, tmp_path / "r")
    with pytest.raises(ValueError, match="needs base_policy_path"):
        OffboardSysid("", 1, tmp_path, tmp_path / "r")
    assert legged.OBS_DIM == 33


def test_an_episode_with_a_lost_transition_is_not_replayed(base_stream, tmp_path):
    indices, ts = base_stream
    learner = OffboardSysid(ARTIFACT, 1, tmp_path / "work", tmp_path / "releases", SETTINGS)
    holed = [i for i in range(len(ts)) if i != 30]  # one transition of the third episode lost in transit
    learner.receive([indices[i] for i in holed], [ts[i] for i in holed])
    # 8 sent: the first (no reset before it) and the holed one left out
    assert len(learner._episodes) == SETTINGS.episodes
    assert all(len(e) == 12 for e in learner._episodes)
    assert not any(e[0].obs is ts[24].obs for e in learner._episodes)
    assert len(learner.judge.finished) == SETTINGS.episodes + 1 and learner.judge.lost == 1
    learner.close()


def test_a_stream_joined_mid_way_skips_its_first_episode(base_stream, tmp_path):
    indices, ts = base_stream
    learner = OffboardSysid(ARTIFACT, 1, tmp_path / "work", tmp_path / "releases", SETTINGS)
    learner.receive([i + 500 for i in indices[6:]], ts[6:])  # heard from the middle of the first episode
    assert len(learner._episodes) == SETTINGS.episodes + 1 and learner._episodes[0][0].obs is ts[12].obs
    assert len(learner.judge.finished) == SETTINGS.episodes + 1 and learner.judge.lost == 0
    learner.close()


def test_a_restart_while_recording_resumes_the_episodes_from_the_log(base_stream, tmp_path):
    indices, ts = base_stream
    first = OffboardSysid(ARTIFACT, 1, tmp_path / "work", tmp_path / "releases", SETTINGS)
    # 4 whole episodes (the first, from the policy's start, not recorded) and half of the fifth; the process dies
    first.receive(indices[:54], ts[:54])
    first.writer.sync()  # (what a crash leaves: the WAL; the new process repairs it)
    again = OffboardSysid(ARTIFACT, 1, tmp_path / "work", tmp_path / "releases", SETTINGS)
    assert again.resumed == 54 and len(again._episodes) == 3 and again.state == "recording"
    assert again.last_decision == "recording: 3/6 episodes of v1"
    # The robot went on meanwhile: it comes back mid-episode (index 70), which is not used.
    again.receive(indices[70:], ts[70:])
    assert len(again._episodes) == 3 + 2 and not again.can_learn()  # the sixth to eighth: two whole
    more = list(range(indices[-1] + 1, indices[-1] + 1 + 12))
    again.receive(more, ts[12:24])
    (bundle_path,) = again.step()
    assert load_bundle(bundle_path).version == 2 and again.state == "judging"
    again.close()
    assert len(read_log(again.work_dir / "transitions")[0]) == 54 + len(ts) - 70 + 12  # nothing lost


@pytest.mark.parametrize("judged_before", [False, True])
def test_a_restart_while_judging_keeps_the_release_and_judges(base_stream, tmp_path, judged_before):
    indices, ts = base_stream
    first = OffboardSysid(ARTIFACT, 1, tmp_path / "work", tmp_path / "releases", SETTINGS)
    first.receive(indices, ts)
    first.step()
    n = 12 * SETTINGS.judge_episodes
    worse = _retagged(ts[:n], 2, 0.5)  # v2 returns 6 a episode, the base 12
    start = indices[-1] + 1
    if judged_before:  # the judge's episodes were on disk when the process died, before its decision
        for t in worse:
            first.writer.append(t)
    else:
        first.receive(list(range(start, start + 12)), worse[:12])
    first.writer.sync()
    again = OffboardSysid(ARTIFACT, 1, tmp_path / "work", tmp_path / "releases", SETTINGS)
    assert again.released[0] == 2 and again.new_version == 2
    assert again._returns(1) == [12.0] * (SETTINGS.episodes + 2)
    if judged_before:  # decided while resuming; the release goes out through the next step()
        assert again.state == "rolled_back" and again.released == [2, 3]
        assert again.step() == [tmp_path / "releases" / "v000003.lowrl"] and again.step() == []
    else:
        assert again.state == "judging" and again.released == [2]
        assert again._returns(2) == [6.0]
        # Back mid-episode (not used), then one more whole episode: judged, rolled back.
        assert again.receive(list(range(start + 20, start + 24)), worse[20:24]) == []
        out = again.receive(list(range(start + 24, start + 36)), _retagged(ts[:12], 2, 0.5))
        assert out == [tmp_path / "releases" / "v000003.lowrl"] and again.state == "rolled_back"
    status = json.loads((again.work_dir / "sysid" / "status.json").read_text())
    assert status["released"] == [2, 3] and status["state"] == "rolled_back"
    again.close()


def test_a_status_of_another_base_version_is_not_resumed(tmp_path):
    work = tmp_path / "work" / "sysid"
    work.mkdir(parents=True)
    (work / "status.json").write_text(json.dumps({"state": "kept", "released": [8], "base_version": 7}))
    lines: list[str] = []
    learner = OffboardSysid(ARTIFACT, 1, tmp_path / "work", tmp_path / "releases", SETTINGS, log=lines.append)
    assert learner.state == "recording" and learner.released == [] and learner.new_version == 2
    assert any("base v7" in line for line in lines)
    learner.close()
