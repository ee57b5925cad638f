"""matplotlib without a display: the one place that picks the Agg backend.

OFF-BOARD and tests only. Import matplotlib through pyplot() inside the function that draws, so that
importing a module that can draw never loads matplotlib (the robot side never imports it).
"""
from __future__ import annotations

from types import ModuleType


def pyplot() -> ModuleType:
    """Return ``matplotlib.pyplot`` on the Agg backend (PNG files, no display needed).

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    # Before pyplot's first import: a machine without a display (CI, a robot's computer, ssh) would
    # otherwise fail or pick an interactive backend.
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
