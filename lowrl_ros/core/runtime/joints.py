"""Joint name -> index: where the robot's joints sit in a message's name list (no ROS, no torch).

A driver's JointState names its joints in its own order, and often more joints than a policy uses. The
lookup is done once per distinct name list and cached (the fast JointState parser hands out one cached
tuple per distinct name block, so a driver's steady messages hit the cache by identity). One class, used
by the observation builder, the policy node's measured pose and the fine-tuner's effort input.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class JointIndex:
    """Finds ``joints`` in a message's ``names``; :meth:`take` gathers their values in ``joints`` order.

    Args:
        joints: the wanted joints, in the order the caller wants their values.
        cache_size: distinct name lists kept (a driver changing its list every message must not grow it).
    """

    def __init__(self, joints: Sequence[str], cache_size: int = 64) -> None:
        self.joints = tuple(joints)
        self._cache: dict[tuple[str, ...], np.ndarray | list[str]] = {}
        self._last: tuple[object, np.ndarray | list[str]] = (None, [])
        self._cache_size = cache_size

    def lookup(self, names: Sequence[str]) -> np.ndarray | list[str]:
        """The index array of ``joints`` in ``names``, or the list of joints ``names`` lacks."""
        if names is self._last[0]:
            return self._last[1]
        key = tuple(names)
        found = self._cache.get(key)
        if found is None:
            where = {n: i for i, n in enumerate(key)}
            missing = [j for j in self.joints if j not in where]
            found = missing or np.array([where[j] for j in self.joints], dtype=np.intp)
            if len(self._cache) >= self._cache_size:
                self._cache.clear()
            self._cache[key] = found
        self._last = (names, found)
        return found

    def missing(self, names: Sequence[str]) -> list[str]:
        """The wanted joints ``names`` lacks (empty: all there)."""
        found = self.lookup(names)
        return found if isinstance(found, list) else []

    def take(self, names: Sequence[str], values: Sequence[float]) -> np.ndarray | None:
        """The values of ``joints`` (float64, in ``joints`` order), or None when a joint is missing or ``values``
        is shorter than ``names`` (e.g. a JointState without efforts)."""
        found = self.lookup(names)
        if isinstance(found, list) or len(values) < len(names):
            return None
        return np.asarray(values, dtype=np.float64)[found]
