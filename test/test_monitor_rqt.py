"""The rqt plugin's widget (lowrl_ros/rqt/widget.py) on a fed model, offscreen: the labels show the model's
rows, a tab per robot, and the e-stop buttons act only once confirmed. Against a real session:
test/test_monitor_session.py."""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from lowrl_ros.core.monitor.text import rows  # noqa: E402
from lowrl_ros.rqt.qt import QApplication  # noqa: E402
from lowrl_ros.rqt.widget import MonitorWidget  # noqa: E402
from test_monitor_model import Clock  # noqa: E402
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
    assert page.values["budget"].text() == "cpu_load 45 % (warn 80, limit 95)"
    model.on_status("/r2", "lowrl/budget/memory", 0, "ok", {"value": "300", "unit": "MB"})
    widget.refresh()
    assert [widget.tabs.tabText(i) for i in range(widget.tabs.count())] == ["/", "/r2"]
    assert widget.pages["/r2"].values["inference"].text().startswith("[not running]")


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
