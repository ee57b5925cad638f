"""offboard_method retrain (core/retrain/offboard.py, core/retrain/job.py): the robot's transitions in, the gap
identified and the policy retrained in a child process, released, judged, rolled back if worse; a restart resumes
the job from the saved recording. Default tier: the refusals and the randomization around the identified values;
integration tier (test/tiers.py): the whole job on the quadruped's simulator, with a restart mid-job."""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import pytest

from lowrl_ros.core.finetune.transition_log import Transition
from lowrl_ros.core.retrain.job import spread_of
from lowrl_ros.core.retrain.offboard import OffboardRetrain, RetrainSessionSettings
from lowrl_ros.core.runtime.observation import ObservationSpec

ROOT = Path(__file__).resolve().parents[1]
QUADRUPED = ROOT / "config/robots/quadruped.yaml"
POLICY = ROOT / "models/quadruped.lowrl"


def test_spread_is_sigmas_of_the_uncertainty_as_a_share_of_the_prior_and_whole_where_unidentified():
    priors = {"mass_scale": (0.7, 1.3), "friction": (0.5, 1.5), "encoder_offset": (-0.05, 0.05)}
    found = {"std": {"mass_scale": 0.03, "friction": 0.1, "encoder_offset": [0.001, 0.005]},
             "identifiable": {"mass_scale": True, "friction": False, "encoder_offset": True}}
    spread = spread_of(found, priors, sigmas=2.0)
    assert spread["mass_scale"] == pytest.approx(2 * 2 * 0.03 / 0.6)
    assert spread["friction"] == 1.0  # not identified: its whole prior
    assert spread["encoder_offset"] == pytest.approx(2 * 2 * 0.005 / 0.1)  # the widest joint's
    assert spread_of({"std": {"mass_scale": 5.0}}, priors, 2.0)["mass_scale"] == 1.0  # capped at the prior


def test_a_base_for_another_robot_and_a_missing_robot_file_are_refused(tmp_path):
    with pytest.raises(ValueError, match="robot_file"):
        OffboardRetrain(POLICY, 1, tmp_path / "w", tmp_path / "r", "")
    with pytest.raises(ValueError, match="33 observations and drives 8 joints.*45"):
        OffboardRetrain(ROOT / "models/legged_ant_int8.onnx", 1, tmp_path / "w", tmp_path / "r", QUADRUPED)


def test_fewer_episodes_than_the_identification_needs_is_refused_at_start(tmp_path):
    from lowrl_ros.core.sim.robot_sysid import IdentifySettings

    with pytest.raises(ValueError, match="retrain.episodes=6.*min_rest_phases=8"):
        OffboardRetrain(POLICY, 1, tmp_path / "w", tmp_path / "r", QUADRUPED, RetrainSessionSettings(episodes=6),
                        IdentifySettings())


def test_a_missing_source_checkpoint_is_refused_at_start_and_a_relative_one_made_absolute(tmp_path, monkeypatch):
    from lowrl_ros.core.retrain.retrain import RetrainSettings

    with pytest.raises(ValueError, match="ppo.source_checkpoint 'nowhere.pt': no such file"):
        OffboardRetrain(POLICY, 1, tmp_path / "w", tmp_path / "r", QUADRUPED,
                        ppo=RetrainSettings(source_checkpoint="nowhere.pt"))
    monkeypatch.chdir(ROOT)
    off = OffboardRetrain(POLICY, 1, tmp_path / "w", tmp_path / "r", QUADRUPED,
                          ppo=RetrainSettings(source_checkpoint="models/quadruped_rsl_rl/model.pt"))
    assert off.ppo_settings.source_checkpoint == str(ROOT / "models/quadruped_rsl_rl/model.pt")


def test_status_json_follows_the_jobs_progress(tmp_path):
    """status.json takes in the child's progress at each change of state and every STATUS_S while it runs."""
    from lowrl_ros.core.retrain import offboard

    learner = OffboardRetrain(POLICY, 1, tmp_path / "w", tmp_path / "r", QUADRUPED)
    learner.state = "identifying"  # as after _start_job, with the child's progress lines below
    progress = learner.job_dir / "progress.jsonl"
    progress.write_text(json.dumps({"stage": "ppo", "steps": 2048, "total_steps": 600000, "best_return": 210.0,
                                    "best_steps": 2048, "base_return": 200.0}) + "\n")
    assert learner.step() == []
    status = json.loads((tmp_path / "w" / "sysid" / "status.json").read_text())
    assert status["state"] == "retraining" and status["progress"]["steps"] == 2048
    assert "best evaluated 210.0 at 2,048 steps vs the base's 200.0" in learner.last_decision
    with progress.open("a") as f:
        f.write(json.dumps({"stage": "ppo", "steps": 4096, "total_steps": 600000}) + "\n")
    learner._polled = learner._status_saved = time.monotonic() - offboard.STATUS_S
    learner.step()
    assert json.loads((tmp_path / "w" / "sysid" / "status.json").read_text())["progress"]["steps"] == 4096
    learner.close()


def test_release_within_s_leaves_the_retraining_what_is_left_and_fails_clearly_when_too_little(tmp_path, monkeypatch):
    """retrain.release_within_s: PPO's budget is the time left of it after the identification, less the gates'
    margin; too little left is a clear failure (the robot keeps its version), not the base released again."""
    from types import SimpleNamespace

    from lowrl_ros.core.retrain import job as job_module, retrain
    from lowrl_ros.core.sim.robot_sim import Gap

    budgets = []
    monkeypatch.setattr(retrain, "retrain", lambda *a, **k: budgets.append(a[4].budget_s) or SimpleNamespace(
        ok=True, reason="", path=None, sim_return_before=1.0, sim_return_after=2.0, steps=64, wall_s=1.0))
    job = {"robot_file": str(QUADRUPED), "base_path": str(POLICY), "version": 2, "seed": 0, "parent_pid": 0,
           "release_within_s": 100.0, "ppo": {}}
    found = {"gap": Gap().as_dict(), "std": {}, "identifiable": {}}
    progress = job_module.Progress(tmp_path / "progress.jsonl")
    assert job_module._retrain(tmp_path, job, found, progress, time.monotonic() + 100.0)["ok"]
    assert 100.0 - job_module.RELEASE_MARGIN_S - 5.0 < budgets[0] <= 100.0 - job_module.RELEASE_MARGIN_S
    job["ppo"] = {"budget_s": 20.0}  # a smaller ppo.budget_s of the user's stands
    job_module._retrain(tmp_path, job, found, progress, time.monotonic() + 100.0)
    assert budgets[1] == 20.0
    late = job_module._retrain(tmp_path, job, found, progress, time.monotonic() + 40.0)
    assert not late["ok"] and late["reason"].startswith("release_within_s 100 s: the identification left ")
    assert len(budgets) == 2  # nothing retrained


def _transitions(episodes: int, steps: int, seed: int = 0) -> list[Transition]:
    from lowrl_ros.core.sim.robot_recording import record_in_sim
    from lowrl_ros.core.sim.robot_sim import load_gap_file

    rec = record_in_sim(QUADRUPED, load_gap_file(ROOT / "config/gaps/quadruped_example.yaml"), episodes=episodes,
                        steps=steps, seed=seed)
    # Each episode ends as a fall: the robot file's time limit is 20 s, and one truncated sooner was cut for a
    # recording (the fine-tuner's record_episodes), which is never judged.
    return [Transition(t.obs, t.action, 1.0, t.next_obs, t.terminated or t.truncated, False, 1, t.stamp)
            for t in rec.transitions]


def test_recording_waits_for_whole_episodes_and_nothing_starts_before(tmp_path):
    learner = OffboardRetrain(POLICY, 1, tmp_path / "w", tmp_path / "r", QUADRUPED,
                              RetrainSessionSettings(episodes=3))
    ts = _transitions(3, 30)  # the first, from the policy's start, is not a rest start: 2 of the 3 recorded
    learner.receive(list(range(len(ts))), ts)
    assert learner.step() == [] and learner.state == "recording" and learner.last_decision.startswith("recording: 2/3")
    assert not (tmp_path / "w" / "retrain" / "job.json").exists()
    # the robot file's 20 s limit at 50 Hz: a truncated episode shorter than 90 % of it was cut (record_episodes)
    assert learner.judge.whole_steps == 900
    learner.close()


def test_an_episode_that_began_moving_is_recorded_beside_one_more(tmp_path):
    """The identification needs episodes that begin at rest; one begun moving (a reset the robot had not finished:
    3 rad/s on two of eight quadruped starts) made the whole run fail. The trainer records one more instead."""
    logged: list[str] = []
    learner = OffboardRetrain(POLICY, 1, tmp_path / "w", tmp_path / "r", QUADRUPED,
                              RetrainSessionSettings(episodes=3), log=logged.append)
    ts = _transitions(6, 20)  # the first (from the policy's start) is not recorded: 5 whole episodes
    starts = [0] + [i + 1 for i, t in enumerate(ts[:-1]) if t.terminated]
    names = ObservationSpec.from_robot_file(learner.robot, 0.02).entry_names()
    moved = ts[starts[2]].obs.copy()  # the second recorded episode begins moving
    moved[[i for i, n in enumerate(names) if n.startswith("joint_velocity")]] = 0.15
    ts[starts[2]] = dataclasses.replace(ts[starts[2]], obs=moved)
    learner.receive(list(range(starts[4])), ts[:starts[4]])  # 3 recorded, one of them moving
    assert learner.step() == [] and learner.state == "recording"
    assert any("episode start(s) 2 of 3 began moving" in line for line in logged)
    learner.receive(list(range(starts[4], starts[5])), ts[starts[4]:starts[5]])  # a 4th: 3 at rest
    learner.step()
    assert learner.state == "identifying"
    saved = np.load(tmp_path / "w" / "retrain" / "recording.npz")
    assert len(set(saved["episode"].tolist())) == 4  # the moving one too: the identification leaves it out
    learner.close()


# ---- integration tier: the whole job, and a restart mid-job --------------------------------------------
def _wait(learner: OffboardRetrain, states: tuple[str, ...], timeout_s: float) -> list:
    released, t0 = [], time.monotonic()
    while learner.state not in states and time.monotonic() - t0 < timeout_s:
        released += learner.step()
        time.sleep(0.2)
    return released


def test_identify_retrain_release_judge_and_resume_after_a_restart(tmp_path):
    from lowrl_ros.core.retrain.retrain import RetrainSettings
    from lowrl_ros.core.sim.robot_sysid import IdentifySettings

    identify = IdentifySettings(min_rest_phases=4, iterations=2, population=6, elites=2, search_steps=200,
                                refine_rounds=0, max_steps=400, horizon=50)
    # lr ~0: the flow is under test, not what 3 PPO updates make of a bang-bang policy (one lost 6 % of its return)
    ppo = RetrainSettings(total_steps=1024, n_envs=2, workers=1, seed=0, recorded_command_share=0.5, lr=1e-6)
    settings = RetrainSessionSettings(episodes=4, judge_episodes=1, nice=0)
    make = lambda: OffboardRetrain(POLICY, 1, tmp_path / "w", tmp_path / "r", QUADRUPED, settings,  # noqa: E731
                                   identify, ppo)
    learner = make()
    ts = _transitions(5, 60)  # the first episode (no reset before it) is not recorded
    learner.receive(list(range(len(ts))), ts)
    learner.step()
    assert learner.state == "identifying" and (tmp_path / "w" / "retrain" / "recording.npz").is_file()
    learner.close()  # the trainer stops mid-job: the child goes with it

    learner = make()  # a restart: the job starts again from the saved recording, nothing recorded again
    assert learner.state == "identifying" and learner.resumed == len(ts)
    released = _wait(learner, ("judging", "failed"), 600)
    assert learner.state == "judging", learner.paused_reason
    assert [p.name for p in released] == ["v000002.lowrl"] and learner.released == [2]
    identified = json.loads((tmp_path / "w" / "retrain" / "identified.json").read_text())
    assert {"gap", "std", "identifiable", "residual", "notes"} <= identified.keys()
    status = json.loads((tmp_path / "w" / "sysid" / "status.json").read_text())
    assert status["state"] == "judging" and status["identified"]["gap"] == identified["gap"]
    assert status["progress"]["stage"] in ("gates", "ppo", "quantize", "done") or "steps" in status["progress"]
    lines = [json.loads(line) for line in (tmp_path / "w" / "retrain" / "progress.jsonl").read_text().splitlines()]
    # half the episodes walk at the commands of the 4 recorded episodes (60 steps each)
    assert [p["recorded_commands"] for p in lines if "recorded_commands" in p] == [4 * 60]

    # the new version's episodes: worse by far -> rolled back to the base's weights as v3 (after a restart the
    # stream is rejoined mid-episode: its first episode does not count, the second does)
    worse = [Transition(t.obs, t.action, -100.0, t.next_obs, t.terminated, t.truncated, 2, t.stamp)
             for t in _transitions(2, 30, seed=5)]
    cut = [Transition(t.obs, t.action, 1e6, t.next_obs, False, t.terminated, 2, t.stamp)
           for t in _transitions(1, 30, seed=6)]  # truncated after 30 of 900 steps: cut, so never judged
    worse = worse[:30] + cut + worse[30:]  # the first is the rejoined one, the cut one would be judged "kept"
    start = len(ts)
    rolled = learner.receive(list(range(start, start + len(worse))), worse)
    assert learner.state == "rolled_back" and [p.name for p in rolled] == ["v000003.lowrl"]
    learner.close()
    assert status["progress"]["elapsed_s"] >= 0.0  # the child's own clock, from progress.jsonl
