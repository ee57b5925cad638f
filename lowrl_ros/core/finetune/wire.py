"""The ``/lowrl/transitions`` wire format: rows of the robot's transitions, numbered (no torch).

Wire format of ``/lowrl/transitions`` (std_msgs/Float64MultiArray, reliable): a batch of rows,
``layout.dim[0]`` = (``"transitions"``, rows, rows * width), ``layout.dim[1]`` = (the row's fields
with their sizes, width, width). A row is exactly a record of the robot's transition log
(lowrl_ros/core/finetune/transition_log.py: obs, action, reward, next_obs, terminated, truncated,
policy_version, stamp; same topic name, same field order) followed by ``index``, e.g. the label
``obs:3;action:1;reward:1;next_obs:3;terminated:1;truncated:1;policy_version:1;stamp:1;index:1``.
``index`` counts the robot's transitions from 0 at each start of its node and never repeats within
one, so the receiver sees a lost batch (a gap) and does not judge an episode with a gap; the
robot's own log still holds every transition.
"""
from __future__ import annotations

import numpy as np

from lowrl_ros.core.finetune.transition_log import Transition, transition_label


def row_width(obs_dim: int, act_dim: int) -> int:
    """Values in one row: the transition log's record plus its index."""
    return 2 * obs_dim + act_dim + 6  # reward, terminated, truncated, policy_version, stamp, index


def column_names(obs_dim: int, act_dim: int) -> str:
    """The row's label (``layout.dim[1].label``): each field with its size, ``index`` last."""
    return transition_label(obs_dim, act_dim) + ";index:1"


def encode_transitions(transitions: list[Transition], first_index: int) -> np.ndarray:
    """Rows (float64, shape [n, width]) for transitions numbered from ``first_index``."""
    if not transitions:
        raise ValueError("no transitions to encode")
    obs_dim, act_dim = len(transitions[0].obs), len(transitions[0].action)
    rows = np.empty((len(transitions), row_width(obs_dim, act_dim)), dtype=np.float64)
    for i, t in enumerate(transitions):
        rows[i] = np.concatenate([t.obs, t.action, [t.reward], t.next_obs,
                                  [float(t.terminated), float(t.truncated), t.policy_version, t.stamp,
                                   first_index + i]])
    return rows


def decode_transitions(data, obs_dim: int, act_dim: int) -> tuple[list[int], list[Transition]]:
    """(indices, transitions) of a message's flat data; ValueError saying what is wrong.

    A row with a non-finite value is dropped (the robot's log keeps it; it is not trained on)."""
    flat = np.asarray(data, dtype=np.float64).ravel()
    width, n, m = row_width(obs_dim, act_dim), obs_dim, act_dim
    if flat.size == 0 or flat.size % width:
        raise ValueError(f"a transitions message has {flat.size} values, not a multiple of the row width {width} "
                         f"(2 x obs_dim {obs_dim} + act_dim {act_dim} + 6); is the robot's policy the kit's?")
    indices, out = [], []
    for r in flat.reshape(-1, width):
        if not np.isfinite(r).all():
            continue
        tail = r[2 * n + m + 1:]
        indices.append(int(tail[4]))
        out.append(Transition(obs=r[:n].copy(), action=r[n:n + m].copy(), reward=float(r[n + m]),
                              next_obs=r[n + m + 1:2 * n + m + 1].copy(), terminated=bool(tail[0]),
                              truncated=bool(tail[1]), policy_version=int(tail[2]), stamp=float(tail[3])))
    return indices, out
