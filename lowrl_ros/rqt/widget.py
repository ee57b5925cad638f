"""The "lowrl monitor" widget: one tab per robot namespace, a compact text header over live plots, e-stop buttons.

The header rows are :func:`lowrl_ros.core.monitor.text.rows` (the same text `lowrl top` prints), one
label each, named ``<row>`` (``inference``, ``versions``, ...) so a test reads exactly what a person
sees. Under it, QPainter plots of the model's time series (lowrl_ros/rqt/charts.py says what each
shows): latency against the deadline, the compute tier, returns per version, and one small plot per
budget signal against its limits (those replace the header's budget rows). The widget knows no ROS:
it reads a :class:`MonitorModel` and calls ``estop(ns)``/``estop_reset(ns)`` of whatever it is
given (the MonitorListener), each after a confirmation dialog.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lowrl_ros.core.monitor.model import MonitorModel, RobotSnapshot
from lowrl_ros.core.monitor.text import rows
from lowrl_ros.rqt.charts import latency_chart, plotted_signals, returns_chart, signal_chart, tier_chart
from lowrl_ros.rqt.plots import Plot
from lowrl_ros.rqt.qt import (QGridLayout, QHBoxLayout, QLabel, QMessageBox, QPushButton, QTabWidget, QTimer,
                              QVBoxLayout, QWidget, Qt)

REFRESH_MS = 500
HEADER = (("sources", "tier", "reason", "inference", "misses"),  # two columns of rows; budget: the small plots
          ("versions", "returns", "learner", "trainer", "e-stop"))
SIGNAL_COLUMNS = 3


def ask(parent: QWidget, title: str, text: str) -> bool:
    """A Yes/No dialog, No by default: an e-stop button pressed by mistake does nothing."""
    answer = QMessageBox.question(parent, title, text, QMessageBox.Yes | QMessageBox.No, QMessageBox.No)
    return answer == QMessageBox.Yes


class RobotPage(QWidget):
    """One robot namespace: the header rows, the plots (:attr:`plots`, by name) and the e-stop buttons."""

    def __init__(self, namespace: str, on_estop: Callable[[], None], on_reset: Callable[[], None]) -> None:
        super().__init__()
        self.namespace = namespace
        header = QGridLayout()
        header.setVerticalSpacing(2)
        self.values: dict[str, QLabel] = {}
        for col, names in enumerate(HEADER):
            for i, row in enumerate(names):
                value = QLabel("-")
                value.setObjectName(row)
                value.setTextInteractionFlags(Qt.TextSelectableByMouse)
                header.addWidget(QLabel(f"<b>{row}</b>"), i, 2 * col)
                header.addWidget(value, i, 2 * col + 1)
                self.values[row] = value
            header.setColumnStretch(2 * col + 1, 1)
        self.estop_button = QPushButton("E-STOP")
        self.estop_button.setObjectName("estop")
        self.estop_button.setStyleSheet("background-color: #c62828; color: white; font-weight: bold; padding: 8px;")
        self.reset_button = QPushButton("Reset e-stop")
        self.reset_button.setObjectName("estop_reset")
        self.estop_button.clicked.connect(on_estop)
        self.reset_button.clicked.connect(on_reset)
        buttons = QVBoxLayout()
        buttons.addWidget(self.estop_button)
        buttons.addWidget(self.reset_button)
        buttons.addStretch(1)
        top = QHBoxLayout()
        top.addLayout(header, 1)
        top.addLayout(buttons)

        self.plots: dict[str, Plot] = {name: Plot(name) for name in ("latency", "tier", "returns")}
        self.signals = QGridLayout()  # a small plot per budget signal, added as signals appear
        self.signals.setSpacing(4)
        signals = QWidget()
        signals.setLayout(self.signals)
        self.signals.setContentsMargins(0, 0, 0, 0)
        grid = QGridLayout()
        grid.addWidget(self.plots["latency"], 0, 0)
        grid.addWidget(self.plots["tier"], 0, 1)
        grid.addWidget(self.plots["returns"], 1, 0)
        grid.addWidget(signals, 1, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addLayout(grid, 1)

    def show_snapshot(self, snap: RobotSnapshot) -> None:
        """Fill the header labels from the model's rows and redraw every plot from the snapshot's series."""
        texts = dict(rows(snap))
        for row, label in self.values.items():
            label.setText(texts.get(row, "-"))
        self.plots["latency"].show_chart(latency_chart(snap))
        self.plots["tier"].show_chart(tier_chart(snap))
        self.plots["returns"].show_chart(returns_chart(snap))
        for signal in plotted_signals(snap):
            plot = self.plots.get(signal.name)
            if plot is None:
                plot = self.plots[signal.name] = Plot(signal.name, small=True)
                n = self.signals.count()
                self.signals.addWidget(plot, n // SIGNAL_COLUMNS, n % SIGNAL_COLUMNS)
            plot.show_chart(signal_chart(snap, signal))


class MonitorWidget(QWidget):
    """Tabs of :class:`RobotPage`, one per namespace the model has heard, redrawn every ``refresh_ms``.

    Args:
        model: the monitor model (fed by a MonitorListener).
        actions: has ``estop(ns)`` and ``estop_reset(ns)`` (None: the buttons are disabled).
        confirm: ``(parent, title, text) -> bool``; the default asks with a dialog.
    """

    def __init__(self, model: MonitorModel, actions: Any = None,
                 confirm: Callable[[QWidget, str, str], bool] = ask, refresh_ms: int = REFRESH_MS) -> None:
        super().__init__()
        self.setObjectName("LowrlMonitor")
        self.setWindowTitle("lowrl monitor")
        self.model = model
        self.actions = actions
        self.confirm = confirm
        self.tabs = QTabWidget()
        self.pages: dict[str, RobotPage] = {}
        self.waiting = QLabel("no lowrl node found yet")
        layout = QVBoxLayout(self)
        layout.addWidget(self.waiting)
        layout.addWidget(self.tabs)
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.refresh)
        self.timer.start(refresh_ms)
        self.refresh()

    def refresh(self) -> None:
        """Add a tab for each new namespace, then redraw every tab from a fresh snapshot."""
        for ns in self.model.namespaces():
            if ns not in self.pages:
                page = RobotPage(ns, lambda _=False, n=ns: self.estop(n), lambda _=False, n=ns: self.estop_reset(n))
                page.estop_button.setEnabled(self.actions is not None)
                page.reset_button.setEnabled(self.actions is not None)
                self.pages[ns] = page
                self.tabs.addTab(page, ns)
        self.waiting.setVisible(not self.pages)
        for ns, page in self.pages.items():
            page.show_snapshot(self.model.snapshot(ns))

    def estop(self, ns: str) -> bool:
        """Assert the e-stop of ``ns`` once confirmed; True when it was sent."""
        topic = self.model.snapshot(ns).estop_topic
        if not self.confirm(self, "E-stop", f"Assert the e-stop of robot {ns} (true on {topic})? The policy node "
                                            f"holds the safe action until a reset."):
            return False
        self.actions.estop(ns)
        return True

    def estop_reset(self, ns: str) -> bool:
        """Release the e-stop of ``ns`` and request a reset, once confirmed; True when it was sent."""
        snap = self.model.snapshot(ns)
        if not self.confirm(self, "Reset e-stop", f"Release the e-stop of robot {ns} (false on {snap.estop_topic}, "
                                                  f"then a reset on {snap.estop_reset_topic})? The policy takes "
                                                  f"over again through its soft start."):
            return False
        self.actions.estop_reset(ns)
        return True
