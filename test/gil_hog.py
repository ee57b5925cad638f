"""A pytest plugin that keeps the test process's interpreter busy, as a loaded CI runner does: ``LOWRL_GIL_HOG``
threads (default 1) each loop in pure Python, and the interpreter switches threads every
``LOWRL_GIL_HOG_SWITCH_MS`` (default 20; CPython's own is 5). A test whose ROS callbacks, spinner thread or client
must run within a few milliseconds to keep its data (a KEEP_LAST 1 reader, a short timeout) then fails every time
instead of once in many CI runs. Timeouts stretch with it: read a failure's assertion, not a timeout, as the race.

    PYTHONPATH=test .venv/bin/python -m pytest -p gil_hog -m "ros and integration and not realtime" test
"""
import os
import sys
import threading


def _busy() -> None:
    while True:
        sum(range(20_000))


sys.setswitchinterval(float(os.environ.get("LOWRL_GIL_HOG_SWITCH_MS", "20")) / 1000.0)
for _ in range(int(os.environ.get("LOWRL_GIL_HOG", "1"))):
    threading.Thread(target=_busy, name="gil_hog", daemon=True).start()
