"""The step row: what the policy saw and did at one control tick, as the fine-tuner reads it (no ROS, no torch).

The policy node publishes one row per policy or safe tick on ``step_topic`` (``/lowrl/policy/step``,
std_msgs/Float64MultiArray); the fine-tuner and the tests decode it here, so the layout lives in one
place (pinned in docs/CONTRACTS.md, "The step row").

Format version 2, ``6 + n + 3 m`` float64 values for ``n`` observations and ``m`` actions::

    format          2 (this module's STEP_ROW_VERSION), first so a reader can check it before anything else
    stamp           wall clock (s) of the tick
    safe            1 on a safe tick (safe action, e-stop, watchdog, bad observation), else 0
    intervention    1 when a person's teleop action replaced the policy's, else 0
    estop           1 while the e-stop latch holds, else 0
    policy_version  the version of the policy that ran this tick (the artifact's contract version; 0: none yet)
    obs[n]          the observation the policy saw (NaN when there was none)
    policy_action[m]  the policy's own output (NaN when it did not run)
    action[m]       what was executed, in policy units (the teleop action in an intervention; NaN on a safe tick)
    command[m]      what went out, robot units, in the policy's joint order

Version 1 (before this module) had no ``format`` and no ``policy_version``: it began with the stamp,
a wall-clock time far from 2, so a version-2 reader refuses it with a message naming both versions.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

STEP_ROW_VERSION = 2
HEADER = ("format", "stamp", "safe", "intervention", "estop", "policy_version")
_H = len(HEADER)


class StepRowError(ValueError):
    """A step row this reader cannot use; the message says why and what to check."""


class StepRow(NamedTuple):
    """One decoded step row (arrays are views into the decoded data)."""

    stamp: float
    safe: bool
    intervention: bool
    estop: bool
    policy_version: int
    obs: np.ndarray
    policy_action: np.ndarray
    action: np.ndarray
    command: np.ndarray

    @property
    def usable(self) -> bool:
        """A policy tick with a finite observation and executed action: the start of a transition."""
        return not self.safe and bool(np.isfinite(self.obs).all()) and bool(np.isfinite(self.action).all())


def row_size(obs_dim: int, action_dim: int) -> int:
    """Values in one row for ``obs_dim`` observations and ``action_dim`` actions."""
    return _H + obs_dim + 3 * action_dim


def row_label(obs_dim: int, action_dim: int) -> str:
    """The row's ``layout.dim[0].label``: each field with its size, in order."""
    return ";".join([f"{h}:1" for h in HEADER] + [f"obs:{obs_dim}", f"policy_action:{action_dim}",
                                                  f"action:{action_dim}", f"command:{action_dim}"])


def encode_step(buf: np.ndarray, *, stamp: float, safe: bool, intervention: bool, estop: bool, policy_version: int,
                obs: np.ndarray | None, policy_action: np.ndarray | None, action: np.ndarray | None,
                command: np.ndarray) -> np.ndarray:
    """Write one row into ``buf`` (float64, preallocated with :func:`row_size`) in place; returns ``buf``.

    ``obs`` of another size than the row's, or None, is written as NaN; ``policy_action`` and ``action``
    None are NaN (the policy did not run)."""
    m = command.size
    n = buf.size - _H - 3 * m
    buf[0] = STEP_ROW_VERSION
    buf[1] = stamp
    buf[2] = 1.0 if safe else 0.0
    buf[3] = 1.0 if intervention else 0.0
    buf[4] = 1.0 if estop else 0.0
    buf[5] = policy_version
    k = _H
    if obs is not None and obs.size == n:
        buf[k:k + n] = obs
    else:
        buf[k:k + n] = np.nan
    k += n
    buf[k:k + m] = np.nan if policy_action is None else policy_action
    buf[k + m:k + 2 * m] = np.nan if action is None else action
    buf[k + 2 * m:k + 3 * m] = command
    return buf


def decode_step(data, obs_dim: int, action_dim: int) -> StepRow:
    """One row back from its values; StepRowError names the format version or the size that does not fit."""
    row = np.asarray(data, dtype=np.float64)
    if row.ndim != 1 or row.size == 0:
        raise StepRowError("an empty or multi-dimensional step row")
    if row[0] != STEP_ROW_VERSION:
        raise StepRowError(f"step row format {row[0]:g} is not {STEP_ROW_VERSION} (version 1 or unknown): the policy "
                           f"node and the fine-tuner come from different lowrl_ros versions; update both")
    size = row_size(obs_dim, action_dim)
    if row.size != size:
        raise StepRowError(f"the step row has {row.size} values; this policy needs {size} ({_H} header + {obs_dim} "
                           f"obs + 3 x {action_dim} actions): the policy node runs another policy or robot file")
    if not np.isfinite(row[1]):
        raise StepRowError(f"the step row's stamp is {row[1]:g}, not a time: the publisher is not the policy node")
    n, m = obs_dim, action_dim
    o = _H + n
    return StepRow(float(row[1]), bool(row[2]), bool(row[3]), bool(row[4]), int(row[5]), row[_H:o], row[o:o + m],
                   row[o + m:o + 2 * m], row[o + 2 * m:o + 3 * m])


def peek_version(data) -> int | None:
    """The ``policy_version`` of a step row without knowing its sizes (None: not a format-2 row).

    For listeners that want only which policy runs (the demo's recorder, the sim robot's episode log)."""
    if len(data) < _H or data[0] != STEP_ROW_VERSION:
        return None
    return int(data[5])
