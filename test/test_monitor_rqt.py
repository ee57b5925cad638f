"""The rqt plugin's widget (lowrl_ros/rqt/widget.py) on a fed model, offscreen: the labels show the model's
rows, the plots draw the model's time series, a tab per robot, and the e-stop buttons act only once confirmed.
Against a real session: test/test_monitor_session.py."""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from lowrl_ros.core.monitor.text import rows  # noqa: E402
from lowrl_ros.rqt.qt import QApplication  # noqa: E402
from lowrl_ros.rqt.widget import MonitorWidget  # noqa: E402
from lowrl_ros.core.types import Level  # noqa: E402
from test_monitor_model import Clock, row, stats  # noqa: E402
from test_monitor_top import fed_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def app():
    return QApplication.instance() or QApplication([])


class Actions:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def estop(self, ns: str) -> None:
        self.calls.append(("estop", ns))

    def estop_reset(self, ns: str) -> None:
        self.calls.append(("reset", ns))


def test_the_labels_show_the_models_rows_and_a_tab_per_robot(app):
    model = fed_model(Clock())
    widget = MonitorWidget(model, Actions(), refresh_ms=60000)
    page = widget.pages["/"]
    assert page.findChild(type(page.values["inference"]), "inference").text() == dict(rows(model.snapshot("/")))[
        "inference"]
    assert "p99 845 us" in page.values["inference"].text()
    assert page.values["versions"].text().startswith("running v2  best v1")
    assert page.plots["cpu_load"].chart.title == "cpu_load  45 %"
    model.on_status("/r2", "lowrl/budget/memory", 0, "ok", {"value": "300", "unit": "MB"})
    widget.refresh()
    assert [widget.tabs.tabText(i) for i in range(widget.tabs.count())] == ["/", "/r2"]
    assert widget.pages["/r2"].values["inference"].text().startswith("[not running]")


def test_the_plots_draw_the_models_time_series(app):
    clock = Clock()
    model = fed_model(clock)
    for i in range(1, 30):  # a load phase: p99 up, the tier lite, a miss, a swap to v3 and an episode under it
        clock.t += 0.5
        model.on_stats("/", stats(misses=int(i > 20), p99=845.0 + 100 * i, tier=int(10 <= i < 20)))
        model.on_status("/", "lowrl/budget/cpu_load", Level.OK, "", {"value": str(i), "unit": "%", "warn": "80",
                                                                     "limit": "95"})
    model.on_step("/", row(3))
    model.on_episode("/", [1, -100.0, 200, 0])
    widget = MonitorWidget(model, Actions(), refresh_ms=60000)
    widget.resize(1240, 760)
    widget.show()
    app.processEvents()
    page, series = widget.pages["/"], model.snapshot("/").series
    now = series.now

    def points(name, trace):
        return page.plots[name].traces()[trace].points

    assert points("latency", "p99") == tuple((t - now, p99) for t, _, p99 in series.latency)
    assert points("latency", "p50") == tuple((t - now, p50) for t, p50, _ in series.latency)
    assert [x for x, _ in points("latency", "misses")] == [t - now for t, _ in series.misses] and series.misses
    assert [m.at for m in page.plots["latency"].chart.hlines] == [20000.0]  # the deadline line
    assert points("tier", "tier") == tuple((t - now, float(v)) for t, v in series.tier)
    assert [m.label for m in page.plots["tier"].chart.vlines] == ["lite", "full"]  # the tier stepped down and back
    assert points("cpu_load", "cpu_load") == tuple((t - now, v) for t, v in series.signals["cpu_load"])
    assert [v for _, v in series.signals["cpu_load"]] == [45.0] + [float(i) for i in range(1, 30)]
    assert [m.label for m in page.plots["cpu_load"].chart.hlines] == ["warn 80", "limit 95"]
    assert points("returns", "v2") == ((100.0 - now, -321.5),) and points("returns", "v3") == ((now - now, -100.0),)
    assert [(m.at, m.label) for m in page.plots["returns"].chart.vlines] == [(0.0, "v3")]  # the swap
    assert page.plots["returns"].traces()["v3 mean"].label == "v3 running"
    assert not page.grab().isNull()  # painting every plot raises nothing


def test_estop_buttons_act_only_when_confirmed(app):
    actions, answers = Actions(), []
    widget = MonitorWidget(fed_model(Clock()), actions, confirm=lambda *_: answers.pop(0), refresh_ms=60000)
    page = widget.pages["/"]
    answers[:] = [False, True, True]
    page.estop_button.click()  # declined
    page.estop_button.click()
    page.reset_button.click()
    assert actions.calls == [("estop", "/"), ("reset", "/")]
    assert not MonitorWidget(fed_model(Clock()), None, refresh_ms=60000).pages["/"].estop_button.isEnabled()


def test_plugin_xml_is_exported_and_installed():
    """rqt finds a plugin through package.xml's export of plugin.xml (installed by setup.py), whose class type
    names the Plugin subclass."""
    export = ET.parse(ROOT / "package.xml").getroot().find("export")
    assert export.find("rqt_gui").get("plugin") == "${prefix}/plugin.xml"
    cls = ET.parse(ROOT / "plugin.xml").getroot().find("class")
    assert cls.get("base_class_type") == "rqt_gui_py::Plugin"
    module, name = cls.get("type").rsplit(".", 1)
    source = (ROOT / (module.replace(".", "/") + ".py")).read_text()
    assert f"class {name}(Plugin)" in source
    assert '"plugin.xml"' in (ROOT / "setup.py").read_text()
