"""`lowrl demo`'s CPU-load phase without ROS: when it runs, and that its burner processes are real CPU load
and always stop (stopped, or their parent killed without a chance to stop them)."""
from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from lowrl_ros.commands import demo


def args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_load_phase_is_placed_by_seconds_and_can_be_skipped():
    p = demo.load_phase(args())
    assert (p.at_s, p.seconds) == (45.0, 10.0)  # the 90 s default: halfway, 10 s
    assert demo.load_phase(args("--robot", "legged")).at_s == 120.0  # the legged session's 240 s
    assert demo.load_phase(args("--robot", "legged", "--sysid")).at_s == 135.0  # 270 s
    p = demo.load_phase(args("--seconds", "40"))
    assert p.at_s == 20.0 and p.seconds == pytest.approx(40 / 9)
    p = demo.load_phase(args("--seconds", "200", "--load-at", "30", "--load-seconds", "10", "--burners", "3"))
    assert (p.at_s, p.seconds, p.burners) == (30.0, 10.0, 3)
    assert demo.load_phase(args("--no-load")) is None
    with pytest.raises(ValueError, match="does not fit"):
        demo.load_phase(args("--seconds", "20", "--load-at", "15", "--load-seconds", "10"))


def test_burners_load_the_cpu_and_stop():
    load = demo.CpuLoad(2)
    try:
        procs = [psutil.Process(pid) for pid in load.pids]
        for p in procs:
            p.cpu_percent(None)
        time.sleep(1.0)
        assert sum(p.cpu_percent(None) for p in procs) > 20.0  # busy, even on a machine shared with others
        assert load.running
    finally:
        load.stop()
    assert not load.running and all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
                                    for pid in load.pids)


def test_burners_exit_when_the_demo_is_killed():
    code = textwrap.dedent("""\
        import os, signal, sys
        from lowrl_ros.commands.demo import CpuLoad
        load = CpuLoad(2)
        print(" ".join(map(str, load.pids)), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no finally, no stop(): only the burners' parent watch is left
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    pids = [int(x) for x in out.stdout.split()]
    assert len(pids) == 2, out.stderr
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                                              for p in pids):
        time.sleep(0.1)
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    for p in alive:  # never leave load behind, even when the assertion fails
        psutil.Process(p).kill()
    assert not alive, "a burner outlived its killed parent"


def test_finetune_set_and_explore_std_reach_their_nodes_typed_and_bad_ones_are_refused_first(capsys, tmp_path):
    from lowrl_ros.core.finetune.config import finetune_items

    values = finetune_items(["algorithm=residual", "residual_scale=1", "residual_critic_updates=5e3",
                             "residual_prior=off"], "--finetune-set")
    # A float stays a float (1.0, not 1) for the node's typed parameter.
    assert [demo._param_text(v) for v in values.values()] == ["residual", "1.0", "5000", "false"]
    for item, says in (("nope=1", "FineTuneConfig has no such field"), ("algorithm=ppo", "algorithm='ppo'"),
                       ("residual_scale", "use FIELD=VALUE")):
        assert demo.run(args("--finetune-set", item, "--session-dir", str(tmp_path / "s"))) == 2
        assert says in capsys.readouterr().err
    assert demo.run(args("--explore-std", "2", "--session-dir", str(tmp_path / "s"))) == 2
    assert "explore_std=2.0 is outside 0..1" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()  # refused before the session started


def test_retrain_needs_a_robot_with_a_simulator_and_gap_file_needs_retrain(capsys):
    assert demo.run(args("--robot", "pendulum", "--retrain")) == 2
    assert "--retrain needs a robot with a simulator" in capsys.readouterr().err
    assert demo.run(args("--robot", "legged", "--gap-file", "config/gaps/legged_example_sim.yaml")) == 2
    assert "--gap-file is the simulated robot's gap of --retrain" in capsys.readouterr().err
    assert demo.session_seconds(args("--robot", "legged", "--retrain")) == demo.RETRAIN_SECONDS
    assert demo.ROBOTS["legged"].sim[0] == "config/robots/legged_ant.yaml"  # its sim: config


def test_the_shipped_retrain_sources_are_the_checkpoints_their_policies_came_from():
    """--retrain and `lowrl bench sim2real_session` start the retraining from these (ppo.source_checkpoint)."""
    from lowrl_ros.bench.sim2real_session import ROBOTS as BENCH_ROBOTS
    from lowrl_ros.core.retrain.source import load_source_critic
    from lowrl_ros.core.runtime.artifact import parse_artifact, read_artifact_bytes

    root = Path(__file__).resolve().parents[1]
    for name, robot in demo.ROBOTS.items():
        if not robot.sim[0]:
            continue
        policy, source = root / "models" / robot.sim[1], root / "models" / robot.sim[3]
        assert str(source.relative_to(root)) == BENCH_ROBOTS[name][3]
        parsed = parse_artifact(read_artifact_bytes(policy), str(policy))
        critic = load_source_critic(source, parsed.contract, parsed.base_weights().output_activation)
        assert critic.weights.input_dim == parsed.contract.obs_dim, name


@pytest.mark.parametrize("robot", ["legged", "quadruped"])
def test_retrain_cuts_the_recorded_episodes_and_takes_its_benchmarked_settings(monkeypatch, tmp_path, robot):
    """`lowrl demo --robot legged|quadruped --retrain`: the fine-tuner cuts the 9 episodes before the identification
    at 250 steps, and the trainer node releases 480 s after them, half its episodes at the robot's commands; the
    quadruped's also across one more physics step of latency (bench_results/sim2real_session/HISTORY.md)."""
    import lowrl_ros.ros.recorder_node as recorder_node

    class Launched(Exception):
        pass

    def launcher(nodes, *_args, **_kwargs):
        raise Launched({n.executable: dict(n.params) for n in nodes})

    monkeypatch.setattr(recorder_node, "Recorder", lambda session: None)
    monkeypatch.setattr(demo, "Launcher", launcher)
    monkeypatch.setattr(demo, "machine_cpu_load", lambda seconds=2.0: 0.0)
    with pytest.raises(Launched) as launched:
        demo.run(args("--robot", robot, "--retrain", "--session-dir", str(tmp_path / "s")))
    params = launched.value.args[0]
    assert params["finetune_node"]["record_episodes"] == "9"
    assert params["finetune_node"]["record_time_limit_steps"] == "250"
    trainer = params["trainer_node"]
    assert trainer["retrain.release_within_s"] == "480.0" and trainer["ppo.recorded_command_share"] == "0.5"
    assert trainer["retrain.episodes"] == "8" and trainer["ppo.n_envs"] == "32"  # the shared recipe
    assert trainer.get("ppo.latency_extra") == ("1" if robot == "quadruped" else None)
