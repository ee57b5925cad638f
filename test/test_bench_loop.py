"""lowrl bench loop --legged's per-thread CPU accounting (bench/loop.py), on this process's own threads."""
from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from lowrl_ros.bench.loop import _thread_ticks, thread_group
from lowrl_ros.core.runtime.realtime import CONTROL_THREAD, name_thread


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/<pid>/task is Linux's")
def test_thread_ticks_name_and_charge_the_busy_thread():
    got: dict = {}

    def busy() -> None:
        name_thread(CONTROL_THREAD)
        got["tid"] = threading.get_native_id()
        before = _thread_ticks(os.getpid())
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.3:  # 0.3 s of CPU on this thread
            pass
        got["before"], got["after"] = before, _thread_ticks(os.getpid())

    t = threading.Thread(target=busy)
    t.start()
    t.join()
    tid = got["tid"]
    name, ticks = got["after"][tid]
    assert name == CONTROL_THREAD and thread_group(name) == "control"
    used = (ticks - got["before"][tid][1]) / os.sysconf("SC_CLK_TCK")
    assert 0.2 <= used <= 0.5
    assert thread_group("dds.recv") == "dds" and thread_group("policy_node") == "executor+other"
