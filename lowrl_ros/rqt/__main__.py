"""``python -m lowrl_ros.rqt [--namespace NS]``: the "lowrl monitor" widget without rqt (rqt_gui is not on
PyPI); a ROS thread feeds the model, Qt's event loop draws it."""
from __future__ import annotations

import argparse
import sys
import threading
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lowrl_ros.rqt", description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", default=None, help="watch only this robot namespace (default: all found)")
    parser.add_argument("--screenshot", metavar="PNG", default="",
                        help="save the window to PNG after --seconds and quit (docs/monitoring_rqt.png)")
    parser.add_argument("--seconds", type=float, default=0.0, help="quit after this long (0: run until closed)")
    args = parser.parse_args(argv)

    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from lowrl_ros.core.monitor.model import MonitorModel
    from lowrl_ros.ros.monitor_listener import MonitorListener
    from lowrl_ros.rqt.qt import QApplication, QTimer
    from lowrl_ros.rqt.widget import MonitorWidget

    rclpy.init()
    model = MonitorModel(time.monotonic)
    listener = MonitorListener(model, namespace=args.namespace, node_name="lowrl_monitor_rqt")
    stop = threading.Event()
    executor = SingleThreadedExecutor()
    executor.add_node(listener.node)

    def spin() -> None:
        while not stop.is_set():
            executor.spin_once(timeout_sec=0.1)

    spinner = threading.Thread(target=spin, name="lowrl-monitor-ros", daemon=True)
    spinner.start()
    app = QApplication(sys.argv[:1])
    widget = MonitorWidget(model, listener)
    widget.resize(1240, 760)
    widget.show()
    if args.seconds > 0:
        def finish() -> None:
            widget.refresh()
            if args.screenshot:
                widget.grab().save(args.screenshot)
            app.quit()
        QTimer.singleShot(int(args.seconds * 1000), finish)
    try:
        return app.exec_()
    finally:
        stop.set()
        spinner.join(timeout=2.0)
        listener.close()
        rclpy.try_shutdown()


if __name__ == "__main__":
    sys.exit(main())
