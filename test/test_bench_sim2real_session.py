"""`lowrl bench sim2real_session`'s bookkeeping (no sessions run here; the benchmark's sessions are its own)."""
from __future__ import annotations

import argparse

import pytest

from lowrl_ros.bench import sim2real_session as bench


def test_episodes_cut_for_the_recording_count_in_no_return():
    rows = [{"version": "1", "return": "100", "end": "cut"}, {"version": "1", "return": "300", "end": "truncated"},
            {"version": "1", "return": "50", "end": "terminated"},
            {"version": "2", "return": "400", "end": "truncated"}]
    assert bench._returns(rows, 1) == [300.0, 50.0] and bench._returns(rows, 2) == [400.0]
    assert bench._returns([{"version": "1", "return": "7"}], 1) == [7.0]  # an older log without the end column


def test_record_steps_cuts_the_episodes_the_trainer_records_and_the_unrecorded_first():
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    assert bench._record_args(parser.parse_args([])) == ()
    args = parser.parse_args(["--record-steps", "250", "--set", "retrain.episodes=6", "ppo.lr=0.001"])
    assert bench._record_args(args) == ("record_episodes:=7", "record_time_limit_steps:=250")
    assert bench._record_args(parser.parse_args(["--record-steps", "100"]))[0] == "record_episodes:=9"


def test_a_result_of_another_command_is_refused_before_any_session_and_new_seeds_name_their_own(
        tmp_path, monkeypatch, capsys):
    from lowrl_ros.bench import record

    def no_session(*_args, **_kwargs):
        raise AssertionError("a session ran")

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    argv = ["--robot", "legged", "--out", str(tmp_path), "--runs-dir", str(tmp_path / "runs")]
    stem = record.result_path("sim2real_session", setting=bench.result_setting(parser.parse_args(argv)),
                              env="legged_ant", root=tmp_path)
    stem.parent.mkdir(parents=True)
    stem.with_suffix(".json").write_text('{"command": "lowrl bench sim2real_session --an-older-run"}')
    monkeypatch.setattr(bench, "run_seed", no_session)
    assert bench.run(parser.parse_args(argv)) == 2
    assert "holds a result of another command" in capsys.readouterr().err
    # Seeds 3 4 5 are another setting: no refusal, the sessions would run (here: the stand-in above says so).
    other = parser.parse_args(argv + ["--seeds", "3", "4", "5"])
    assert "seeds_3_4_5" in bench.result_setting(other)
    with pytest.raises(AssertionError, match="a session ran"):
        bench.run(other)


def test_the_in_process_figure_pairs_the_release_with_the_base_on_the_same_episodes(tmp_path):
    """The release is the base itself here: same seeded episodes, same command, so it recovers exactly 0 %."""
    import shutil

    from lowrl_ros.bench.sim2real_session import _repo

    root = _repo()
    robot, base = root / "config/robots/quadruped.yaml", root / "models/quadruped.lowrl"
    gap = root / "config/gaps/quadruped_example.yaml"
    assert bench.in_process(robot, base, gap, tmp_path, 0, 1) == {"note": "nothing was released"}
    (tmp_path / "releases").mkdir()
    shutil.copy(base, tmp_path / "releases" / "v000002.lowrl")
    got = bench.in_process(robot, base, gap, tmp_path, 0, 1)
    assert got["version"] == 2 and got["command"] == [0.4, 0.0, 0.0]
    assert got["nominal_return"] > got["before_return"] == got["after_return"]  # the example gap costs return
    assert got["recovered_pct"] == 0.0
