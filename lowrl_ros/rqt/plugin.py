"""The rqt plugin "lowrl monitor" (rqt_gui_py): ``rqt --standalone lowrl_ros`` or Plugins > Robot Tools.

Found through ``plugin.xml``, which package.xml exports (``<rqt_gui plugin="${prefix}/plugin.xml"/>``)
and setup.py installs. rqt gives the plugin a node (``context.node``) and spins it; the widget and
the listener are the ones ``python -m lowrl_ros.rqt`` runs without rqt.
"""
from __future__ import annotations

import time

from qt_gui.plugin import Plugin  # rqt_gui; only on a ROS 2 desktop with rqt installed

from lowrl_ros.core.monitor.model import MonitorModel
from lowrl_ros.ros.monitor_listener import MonitorListener
from lowrl_ros.rqt.widget import MonitorWidget


class MonitorPlugin(Plugin):
    """The rqt_gui_py plugin: a MonitorWidget over a MonitorListener on rqt's node."""

    def __init__(self, context) -> None:
        super().__init__(context)
        self.setObjectName("LowrlMonitor")
        self.model = MonitorModel(time.monotonic)
        self.listener = MonitorListener(self.model, node=context.node)
        self.widget = MonitorWidget(self.model, self.listener)
        if context.serial_number() > 1:
            self.widget.setWindowTitle(f"{self.widget.windowTitle()} ({context.serial_number()})")
        context.add_widget(self.widget)

    def shutdown_plugin(self) -> None:
        self.widget.timer.stop()
        self.listener.close()
