"""A short lockstep sim-to-real session on Pendulum-v1 with a reality gap, with real nodes over DDS.

Real rclpy nodes (in this process, one executor): the sim robot (lockstep, gapped, logging
episodes), the policy node running a real tiny `lowrl train` policy, the budget monitor (its CPU
load limit off, as in config/sim_to_real/budget_monitor.yaml) and the fine-tuner with that run's
kit. Checked end to end: the fine-tuner learns from the robot's transitions, makes a version, the
policy node swaps to it, the robot runs whole episodes with it (episodes.csv says which version ran
each), and the session report shows both versions.

What this test does not claim: that the return improves. A policy trained for 300 steps
fine-tuned for a few hundred updates moves its return by noise; the claim "fine-tuning recovers
the gap" needs thousands of robot steps and is measured by `lowrl bench sim2real`
(docs/sim_to_real.md has the figures and the command).
"""
from __future__ import annotations

import pytest

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from lowrl_ros.core.runtime.artifact import parse_artifact, read_artifact_bytes  # noqa: E402
from lowrl_ros.core.session.analysis import version_returns  # noqa: E402
from lowrl_ros.core.session.files import read_session  # noqa: E402
from lowrl_ros.core.session.report import write_session_report  # noqa: E402
from lowrl_ros.ros.budget_monitor_node import BudgetMonitorNode  # noqa: E402
from lowrl_ros.ros.finetune_node import FineTuneNode  # noqa: E402
from lowrl_ros.ros.sim_robot_node import SimRobotNode  # noqa: E402
from rosutil import PENDULUM_FIELDS as FIELDS, active_policy_node, spin_until  # noqa: E402

pytestmark = pytest.mark.ros


@pytest.fixture(scope="module")
def kit(tiny_kit):
    """(kit dir, base int8 artifact) from a real tiny `lowrl train` run (conftest.tiny_kit)."""
    return tiny_kit


# residual (issue 28): the base frozen, versions are the base artifact plus a correction head (format 3),
# hot-swapped by the same policy node.
LEARNERS = {"kit": [], "residual": [Parameter("algorithm", value="residual"),
                                    Parameter("residual_critic_updates", value=20)]}


@pytest.mark.parametrize("learner", sorted(LEARNERS))
def test_lockstep_session_with_a_gap_fine_tunes_and_swaps(ros_context, kit, tmp_path, learner):
    kit_dir, base = kit
    session = tmp_path / "session"
    sim = SimRobotNode(context=ros_context, parameter_overrides=[
        Parameter("mode", value="lockstep"), Parameter("max_episode_steps", value=40),
        Parameter("session_dir", value=str(session)), Parameter("gap.mass_scale", value=1.3),
        Parameter("gap.actuator_gain", value=0.8), Parameter("gap.obs_noise_std", value=0.01),
        Parameter("gap.action_delay_steps", value=1)])
    policy = active_policy_node(ros_context, base)
    # The policy node shares this test process, which holds torch (~0.5 GB) and runs the learner: its memory
    # limit is raised here, and so are its latency and miss limits (the process's interpreter is shared, so a
    # busy runner makes the policy's ticks late and the monitor stepped down to safe before any v2: the
    # gil_hog plugin shows it). On a robot the policy node is its own torch-free process; the tiers'
    # own tests are test_budget_node.py and test_ladder_ros.py.
    budget = BudgetMonitorNode(context=ros_context, parameter_overrides=[
        Parameter("cpu_load_limit_pct", value=0.0), Parameter("policy_rss_limit_mb", value=8000.0),
        Parameter("latency_p99_limit_us", value=1e8), Parameter("miss_rate_limit", value=1.0)])
    tuner = FineTuneNode(context=ros_context, parameter_overrides=[
        Parameter("kit_path", value=str(kit_dir)), Parameter("work_dir", value=str(session / "finetune")),
        Parameter("base_policy_path", value=str(base)), Parameter("obs_fields", value=FIELDS),
        Parameter("min_transitions", value=64), Parameter("batch_size", value=32),
        Parameter("memory_cap_mb", value=1e6),  # the cap would measure this whole pytest process
        # at most an update per 4 transitions: a version every 160 robot steps at the soonest, so v2 runs at
        # least 3 whole 40-step episodes however fast the learner is against the robot (a busy runner slows the
        # lockstep robot more than the learner: at the default cap of 1, v13 came before v2 had run 2 episodes)
        Parameter("updates_per_transition", value=0.25),
        Parameter("version_every_updates", value=40), Parameter("eval_episodes", value=1),
        Parameter("rollback_margin", value=1e6), Parameter("diagnostics_period_s", value=0.2),
        *LEARNERS[learner]])
    nodes = (sim, policy, budget, tuner)
    ex = SingleThreadedExecutor(context=ros_context)
    for n in nodes:
        ex.add_node(n)

    def v2_episodes() -> int:
        data = read_session(session)
        return len(version_returns(data).get(2, [])) if data.n_episodes else 0

    try:
        # v2 made from robot transitions, swapped in by the policy node, and run for 2 whole episodes.
        ok = spin_until(ex, lambda: v2_episodes() >= 2, timeout=75)
        assert ok, (f"no fine-tuned episodes: steps {sim.steps}, recorded {tuner.recorded}, state {tuner.state}, "
                    f"updates {tuner.tuner.updates}, decision {tuner.last_decision!r}, tier {tuner.tier}")
        assert policy.active_policy_path.endswith("versions/v000002.onnx")
        assert tuner.recorded >= 64 and tuner.tuner.updates >= 40
        head = parse_artifact(read_artifact_bytes(policy.active_policy_path), "v2").residual
        assert (head is not None) == (learner == "residual")
    finally:
        tuner.close()
        ex.shutdown()
        for n in nodes:
            n.destroy_node()
    data = read_session(session)
    per_version = version_returns(data)
    assert len(per_version[1]) >= 1 and len(per_version[2]) >= 2  # the base ran whole episodes first
    assert data.info["gap"] == "mass_scale=1.3, actuator_gain=0.8, obs_noise_std=0.01, action_delay_steps=1"
    assert (data.episodes["length"] == 40).all()
    text = write_session_report(session).read_text()
    assert "| v1 |" in text and "| v2 |" in text and "v2 (parent v1" in text
    assert (session / "session_report.png").is_file()


def test_offboard_fine_tuning_learns_from_streamed_transitions_and_sends_signed_versions(ros_context, kit,
                                                                                          tmp_path):
    """learner:=offboard on the robot: finetune_node records and streams; trainer_node learns and
    streams v2 as a signed bundle, which the policy node validates, hot-swaps and runs."""
    import secrets

    from lowrl_ros.ros.trainer_node import TrainerNode

    kit_dir, base = kit
    session = tmp_path / "session"
    key = tmp_path / "bundle.key"
    key.write_text(secrets.token_hex(32))
    key.chmod(0o600)
    sim = SimRobotNode(context=ros_context, parameter_overrides=[
        Parameter("mode", value="lockstep"), Parameter("max_episode_steps", value=40),
        Parameter("session_dir", value=str(session)), Parameter("gap.mass_scale", value=1.3)])
    policy = active_policy_node(ros_context, base, key_file=str(key), receive_dir=str(tmp_path / "received"))
    recorder = FineTuneNode(context=ros_context, parameter_overrides=[
        Parameter("kit_path", value=str(kit_dir)), Parameter("work_dir", value=str(session / "finetune")),
        Parameter("base_policy_path", value=str(base)), Parameter("obs_fields", value=FIELDS),
        Parameter("learner", value="offboard"), Parameter("diagnostics_period_s", value=0.2)])
    trainer = TrainerNode(context=ros_context, parameter_overrides=[
        Parameter("watch_dir", value=str(tmp_path / "releases")), Parameter("key_file", value=str(key)),
        Parameter("poll_period_s", value=0.1), Parameter("finetune_kit", value=str(kit_dir)),
        Parameter("finetune_work_dir", value=str(tmp_path / "offboard")),
        Parameter("base_policy_path", value=str(base)),
        Parameter("finetune.min_transitions", value=64), Parameter("finetune.batch_size", value=32),
        Parameter("finetune.version_every_updates", value=40), Parameter("finetune.eval_episodes", value=1),
        Parameter("finetune.rollback_margin", value=1e6)])
    nodes = (sim, policy, recorder, trainer)
    ex = SingleThreadedExecutor(context=ros_context)
    for n in nodes:
        ex.add_node(n)

    def tuned_episodes() -> int:  # whole episodes run by versions learned off-board
        data = read_session(session)
        return sum(len(r) for v, r in version_returns(data).items() if v >= 2) if data.n_episodes else 0

    try:
        ok = spin_until(ex, lambda: tuned_episodes() >= 2, timeout=75)
        lr = trainer.learner
        assert ok, (f"no off-board version ran: steps {sim.steps}, recorded {recorder.recorded}, streamed "
                    f"{recorder.streamed}, received {lr.received}, updates {lr.tuner.updates}, released "
                    f"{lr.released}, decision {lr.last_decision!r}, error {trainer.learner_error!r}")
        assert recorder.tuner is None and recorder.streamed >= 64  # the robot side learned nothing itself
        assert lr.received >= 64 and lr.tuner.updates >= 40 and 2 in lr.released
        assert trainer.sender.published_version >= 2 and policy.controller.bundle.version >= 2
    finally:
        ex.shutdown()
        recorder.close()
        for n in nodes:
            n.destroy_node()
    assert (tmp_path / "offboard" / "learner.pt").is_file()  # the trainer's resume point (saved on destroy)


def test_demo_session_fine_tuning_improves_the_return_on_the_gapped_robot(tmp_path):
    """`lowrl demo` as a user runs it (every node its own process, over DDS): the shipped sim policy
    (models/pendulum_rlx2, -743 on this gap in made.json) is fine-tuned on the gapped robot, and
    a fine-tuned version swings the pendulum up, which the sim policy never does on this gap, and
    returns more than the sim policy over whole episodes.

    How much more, and after how long, varies from run to run: the best version's mean was +127 to
    +606 above the sim policy in the 8 runs of 120-150 s whose reports were kept (3 here at 150 s:
    +576, +604, +606; one CI run at 150 s: +127), so the mean alone is a noisy test (versions that
    learned nothing return sim +30 to +70 over their 5 judged episodes). The swing-up is not: in each
    of those 8 runs some fine-tuned version had an episode above -400 (-0.2 to -3.8), and the sim
    policy's best over ~90 episodes on this gap was -752."""
    import subprocess
    import sys

    import numpy as np

    from lowrl_ros.core.session.analysis import swap_windows

    session = tmp_path / "session"
    out = subprocess.run([sys.executable, "-m", "lowrl_ros.cli", "demo", "--seconds", "150", "--quiet",
                          "--session-dir", str(session), "--log-dir", str(tmp_path / "logs")],
                         stdout=open(tmp_path / "demo.out", "w"), stderr=subprocess.STDOUT, timeout=300)
    text = (tmp_path / "demo.out").read_text()
    assert out.returncode == 0, text[-3000:]
    data = read_session(session)
    returns = version_returns(data)
    per_version = {v: r for v, r in returns.items() if len(r) >= 3}
    sim = np.mean(per_version[1])
    tuned = {v: float(np.mean(r)) for v, r in per_version.items() if v > 1}
    assert tuned, f"no fine-tuned version ran 3 whole episodes:\n{text[-3000:]}"
    assert max(returns[1]) < -400.0, f"the sim policy swung up on the gapped robot: {returns[1]}"
    swung = {v: max(r) for v, r in returns.items() if v > 1 and max(r) > -400.0}
    assert swung, f"no fine-tuned version swung the pendulum up: sim {sim:.1f}, fine-tuned {tuned}\n{text[-3000:]}"
    assert max(tuned.values()) >= sim + 50.0, f"sim policy {sim:.1f}, fine-tuned {tuned}\n{text[-3000:]}"
    assert len(swap_windows(data)) >= 2  # versions really went through the policy node's hot-swap


def test_demo_refuses_a_kit_without_its_policy(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "lowrl_ros.cli", "demo", "--kit", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--kit needs --policy" in out.stderr


def test_demo_load_phase_steps_the_tier_down_and_back_and_pauses_the_fine_tuner(tmp_path):
    """`lowrl demo` with its CPU-load phase (a short session): the budget monitor steps the tier below full
    during the load (not before it), back to full after it, the fine-tuner waits for the full tier while
    it is down and learns again after, and the report says so. The burners are gone afterwards.

    On a machine already busy with other work the demo turns the CPU-load limit off (it would trip
    without the load); then there is nothing to check and the test says why it skips."""
    import subprocess
    import sys

    import psutil

    from lowrl_ros.core.runtime.tiers import ComputeTier
    from lowrl_ros.core.session.analysis import load_outcome

    session = tmp_path / "session"
    proc = subprocess.Popen([sys.executable, "-m", "lowrl_ros.cli", "demo", "--seconds", "45", "--load-at", "18",
                             "--load-seconds", "8", "--quiet", "--session-dir", str(session),
                             "--log-dir", str(tmp_path / "logs")],
                            stdout=open(tmp_path / "demo.out", "w"), stderr=subprocess.STDOUT)
    rc = proc.wait(timeout=200)
    text = (tmp_path / "demo.out").read_text()
    assert rc == 0, text[-3000:]
    assert "loading the CPU (" in text and "CPU load stopped" in text
    # this demo's burners carry its pid as their argument (they watch it)
    assert not [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [""])[-1] == str(proc.pid)
                and "parent = int(sys.argv[1])" in " ".join(p.info["cmdline"])], "a burner outlived the demo"
    data = read_session(session)
    if str(data.info.get("cpu_load_limit", "")).startswith("off"):
        pytest.skip(f"CPU-load limit {data.info['cpu_load_limit']}")
    o = load_outcome(data)
    report = (session / "session_report.md").read_text()
    assert o is not None and o.step_down_s is not None, report
    assert o.start_s <= o.step_down_s <= o.start_s + 3.0, report  # stepped down by the load, within 3 s
    assert o.lowest_tier > ComputeTier.FULL
    assert o.back_to_full_s is not None and o.back_to_full_s > o.end_s, report
    assert o.paused_s is not None and o.start_s <= o.paused_s <= o.end_s + 1.5, report
    assert o.resumed_s is not None and o.resumed_s >= o.back_to_full_s - 1.5, report
    assert "## Adaptive compute" in report and "waiting_for_full_tier" in report
    assert f"full -> {o.lowest_tier.label} at t=" in report
