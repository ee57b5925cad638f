"""`lowrl top`: the textual app on a fed model (textual's own pilot), and the rows it prints.
A real session in tmux: test/test_monitor_session.py."""
from __future__ import annotations

import asyncio

from lowrl_ros.commands.top import TopApp, screen_text
from lowrl_ros.core.monitor.model import MonitorModel
from lowrl_ros.core.monitor.text import columns, lines, sparkline
from lowrl_ros.core.types import Level
from test_monitor_model import Clock, row, stats


def fed_model(clock: Clock) -> MonitorModel:
    m = MonitorModel(clock)
    m.on_tier("/", 0)
    m.on_stats("/", stats(misses=0, p99=845.0))
    m.on_step("/", row(2))
    m.on_episode("/", [0, -321.5, 200, 0])
    m.on_status("/", "lowrl/budget/cpu_load", Level.OK, "45 %", {"value": "45", "unit": "%", "warn": "80",
                                                                "limit": "95"})
    m.on_status("/", "lowrl/finetune/learner", Level.OK, "learning", {"state": "learning", "updates": "40"})
    m.on_status("/", "lowrl/finetune/versions", Level.OK, "v2 made after 40 updates", {"best": "1"})
    return m


def test_every_row_fits_80_columns_and_one_robot_fits_24_rows():
    text = screen_text(fed_model(Clock()))
    assert max(map(len, text.splitlines())) <= 80
    assert len(text.splitlines()) <= 24
    assert "p99 845 us" in text and "running v2  best v1" in text and "v2 -321.5 (1)" in text
    assert "trainer   not running" in text  # no trainer in this session: said, not left blank


def test_sparklines_show_the_last_minute_of_p99_and_the_tier():
    clock = Clock()
    m = fed_model(clock)
    for i in range(600):  # a minute at 10 Hz: p99 ten times higher and the tier lite in its middle third
        clock.t += 0.1
        middle = 200 <= i < 400
        m.on_stats("/", stats(misses=0, p99=4000.0 if middle else 400.0, tier=int(middle)))
    text = screen_text(m)
    lines_ = text.splitlines()
    assert len(lines_) <= 24 and max(map(len, lines_)) <= 80
    p99 = next(line for line in lines_ if line.startswith("p99 60 s"))
    tier = next(line for line in lines_ if line.startswith("tier 60 s"))
    spark, steps = p99[10:46], tier[10:46]  # 36 columns of 1.7 s; a column on a third's edge may hold both
    assert spark[1:11] == "▁" * 10 and spark[13:23] == "█" * 10 and spark[25:35] == "▁" * 10
    assert steps[1:11] == "█" * 10 and steps[13:23] == "▅" * 10 and steps[25:35] == "█" * 10
    assert "max 4000 us, deadline 20000 us" in p99 and "▅lite" in tier


def test_sparkline_columns_take_the_worst_of_their_time_and_leave_silence_blank():
    assert columns([(9.0, 1.0), (9.5, 5.0), (1.0, 2.0)], now=10.0, reduce=max, span_s=10.0, n=5) == [
        2.0, None, None, None, 5.0]
    assert sparkline([0.0, 4.0, 8.0, None], top=8.0) == "▁▄█ "


def test_a_source_that_went_quiet_is_marked_stale():
    clock = Clock()
    m = fed_model(clock)
    clock.t += 10.0
    m.on_stats("/", stats(misses=0))
    text = "\n".join(lines(m.snapshot("/")))
    assert "finetune stale" in text and "[stale] learning, 40 updates" in text
    assert "policy ok" in text


def test_the_app_redraws_the_model_and_quits_on_q():
    clock = Clock()
    model = fed_model(clock)

    async def drive() -> tuple[str, str, bool]:
        app = TopApp(model, refresh_s=0.05)
        async with app.run_test(size=(80, 24)) as pilot:
            first = str(app.query_one("#picture").content)
            model.on_stats("/", stats(misses=7, p99=999.0))
            await pilot.pause(0.2)  # a few refresh periods of the app's own timer
            second = str(app.query_one("#picture").content)
            await pilot.press("q")
            await pilot.pause()
            return first, second, app.is_running

    first, second, running = asyncio.run(drive())
    assert "p99 845 us" in first and "0 in all" in first
    assert "p99 999 us" in second and "7 in all" in second
    assert not running
