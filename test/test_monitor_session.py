"""The two monitoring views against a real session (`lowrl demo`, its nodes in their own processes):
the rqt widget offscreen (its labels equal what the nodes published; the e-stop buttons latch and release
the policy node's e-stop), and `lowrl top` in an 80x24 tmux pane, read as a person reads it, quit with q."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

ROOT = Path(__file__).resolve().parents[1]
LOWRL = [sys.executable, "-m", "lowrl_ros.cli"]


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """A demo session (no load phase) running for the module's tests; stopped with SIGINT afterwards."""
    log = tmp_path_factory.mktemp("demo")
    # Its output goes to a file: a pipe nobody reads fills up and blocks the demo mid-print.
    with open(log / "demo.out", "w") as out:
        # Started with SIGINT ignored, as `lowrl demo &` from a script (or a CI job in the background) starts it:
        # the demo handles Ctrl-C itself then too.
        proc = subprocess.Popen(LOWRL + ["demo", "--seconds", "240", "--no-load", "--quiet", "--log-dir", str(log),
                                         "--session-dir", str(log / "session")],
                                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        yield proc
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()  # its nodes stop with it (they watch their launcher: ros/spinning.exit_with_launcher)
            rc = proc.wait()
        # Ctrl-C is how a person ends a demo: it stops its nodes and writes the report, exit code 0.
        assert rc == 0, f"the demo ended with {rc} on SIGINT:\n" + (log / "demo.out").read_text()[-3000:]
        assert (log / "session" / "session_report.md").is_file()


@pytest.mark.ros
def test_rqt_widget_shows_what_the_nodes_published_and_its_estop_latches_the_policy(session, ros_context):
    from rclpy.executors import SingleThreadedExecutor

    from lowrl_ros.core.monitor.model import MonitorModel, tier_label
    from lowrl_ros.ros.monitor_listener import MonitorListener
    from lowrl_ros.rqt.qt import QApplication
    from lowrl_ros.rqt.widget import MonitorWidget
    from rosutil import spin_until

    app = QApplication.instance() or QApplication([])
    model = MonitorModel(time.monotonic, stale_s=5.0)
    raw: dict = {"status": {}}  # what arrived, as published, before the model saw it
    for feed in ("on_stats", "on_tier", "on_step"):
        def record(ns, value, _feed=feed, _orig=getattr(model, feed)):
            raw[_feed] = value
            _orig(ns, value)
        setattr(model, feed, record)
    orig_status = model.on_status

    def on_status(ns, name, level, message, values):
        raw["status"][name] = dict(values)
        orig_status(ns, name, level, message, values)
    model.on_status = on_status

    listener = MonitorListener(model, context=ros_context, node_name="monitor_session_test")
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(listener.node)
    widget = MonitorWidget(model, listener, confirm=lambda *_: True, refresh_ms=60000)
    wanted = ("lowrl/budget/tier", "lowrl/policy/estop", "lowrl/finetune/learner", "lowrl/budget/cpu_load",
              "lowrl/finetune/versions", "lowrl/policy/input/joint_states", "lowrl/finetune/input")
    try:
        assert spin_until(executor, lambda: {"on_stats", "on_tier", "on_step"} <= set(raw)
                          and all(w in raw["status"] for w in wanted), timeout=120), (sorted(raw), session.poll())
        widget.refresh()
        app.processEvents()
        page = widget.pages["/"]
        stats, snap = raw["on_stats"], model.snapshot("/")
        assert f"p99 {stats[1]:.0f} us" in page.values["inference"].text()
        assert f"deadline {stats[5]:.0f} us" in page.values["inference"].text()
        assert page.values["tier"].text().startswith(f"published {tier_label(raw['on_tier'])}, applied "
                                                     f"{tier_label(stats[6])}")
        assert page.values["reason"].text() == raw["status"]["lowrl/budget/tier"]["last_change"][:68]
        assert f"running v{int(raw['on_step'][5])}" in page.values["versions"].text()
        learner = raw["status"]["lowrl/finetune/learner"]
        assert page.values["learner"].text().startswith(f"{learner['state']}, {learner['updates']} updates")
        cpu = raw["status"]["lowrl/budget/cpu_load"]
        assert page.plots["cpu_load"].chart.title.startswith(f"cpu_load  {float(cpu['value']):.3g}")
        series = snap.series  # the plots draw the model's series as they are (x relative to the snapshot's now)
        assert page.plots["latency"].traces()["p99"].points[-1][1] == series.latency[-1][2]
        assert snap.sources["policy"] == snap.sources["budget"] == snap.sources["finetune"] == "ok"
        # The counters are the fine-tuner's keys; each input says when it went stale ("" while heard).
        versions = raw["status"]["lowrl/finetune/versions"]
        assert {"swaps", "rejections", "rollbacks"} <= set(versions)
        assert f"rollbacks {versions['rollbacks']}" in page.values["versions"].text()
        for name in ("lowrl/policy/input/joint_states", "lowrl/finetune/input"):
            assert {"stale_since", "silent_s", "timeout_s"} <= set(raw["status"][name]), name

        # Item 5: every status name the session's nodes publish falls into one group of the aggregator file,
        # and the policy's latency status carries the loop timing keys.
        from lowrl_ros.core.runtime.status import TIMING_KEYS
        from test_budget_config_files import aggregator_groups

        names = sorted(raw["status"])
        assert {n: len(aggregator_groups(n)) for n in names} == {n: 1 for n in names}
        assert set(TIMING_KEYS) <= set(raw["status"]["lowrl/policy/latency"])

        page.estop_button.click()
        assert spin_until(executor, lambda: raw["status"]["lowrl/policy/estop"].get("latched") == "True", 15)
        page.reset_button.click()
        assert spin_until(executor, lambda: raw["status"]["lowrl/policy/estop"].get("latched") == "False", 15)
        widget.refresh()
        assert page.values["e-stop"].text().startswith("clear (estop, reset estop_reset)")
    finally:
        widget.timer.stop()
        executor.shutdown()
        listener.close()


def _pane(socket: str) -> str:
    return subprocess.run(["tmux", "-L", socket, "capture-pane", "-p", "-t", "top"], capture_output=True,
                          text=True).stdout


def _wait_pane(socket: str, predicate, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    screen = _pane(socket)
    while time.monotonic() < deadline and not predicate(screen):
        time.sleep(0.25)  # polling a terminal a person reads; the condition, not the sleep, decides
        screen = _pane(socket)
    return screen


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_lowrl_top_in_an_80x24_terminal_shows_the_session_and_quits_on_q(session, tmp_path):
    socket = f"lowrl-top-test-{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    cmd = " ".join(LOWRL + ["top"]) + "; echo TOP-EXITED $?; sleep 60"
    subprocess.run(["tmux", "-L", socket, "new-session", "-d", "-s", "top", "-x", "80", "-y", "24", cmd],
                   check=True, cwd=ROOT, env=env)
    try:
        # Wait for every row asserted below: on a loaded machine the budget monitor's first 1 Hz status and
        # the latched tier reach a viewer started late seconds after the policy's stats do. "p99 N us  deadline"
        # is the inference row (the budget row "latency_p99 N us" comes without the stats).
        wanted = (r"p99 \d+ us  deadline \d+ us", r"tier\s+published \w+, applied \w+", r"policy ok", r"budget ok",
                  r"versions\s+running v\d+")
        screen = _wait_pane(socket, lambda s: all(re.search(w, s) for w in wanted), timeout=90)
        (tmp_path / "top.txt").write_text(screen)
        lines = screen.splitlines()
        assert len(lines) <= 24 and max(map(len, lines)) <= 80
        assert re.search(r"p99 \d+ us  deadline \d+ us", screen), screen
        assert re.search(r"tier\s+published \w+, applied \w+", screen), screen
        assert "policy ok" in screen and "budget ok" in screen, screen
        assert re.search(r"versions\s+running v\d+", screen), screen
        subprocess.run(["tmux", "-L", socket, "send-keys", "-t", "top", "q"], check=True)
        screen = _wait_pane(socket, lambda s: "TOP-EXITED" in s, timeout=20)
        assert "TOP-EXITED 0" in screen, screen
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
