"""The ``/lowrl/transitions`` wire format: rows of the robot's transitions, numbered (no torch).

Wire format version 3 of ``/lowrl/transitions`` (std_msgs/Float64MultiArray, reliable): a batch of rows,
``layout.dim[0]`` = (``"transitions"``, rows, rows * width), ``layout.dim[1]`` = (the row's fields with
their sizes, width, width). A row is the robot's transition-log record with its optional columns
(lowrl_ros/core/finetune/transition_log.py: obs, action, reward, next_obs, terminated, truncated,
policy_version, stamp, intervention, reward_terms, command; same names, same order) followed by four
numbers: ``n_terms`` (how many reward terms the row carries), ``n_command`` (how many command values: the
joints, or 0 where the robot's reward comes from a topic and no command is paired), ``wire`` (the format
version, 3) and ``index``, e.g. ``obs:3;action:1;reward:1;next_obs:3;terminated:1;truncated:1;
policy_version:1;stamp:1;intervention:1;reward_terms:2;command:1;n_terms:1;n_command:1;wire:1;index:1``.
Width = 2 obs_dim + act_dim + 10 + n_terms + n_command.

``intervention`` is 1 where a person's teleop action replaced the policy's (the off-board learner puts
such rows into its demo buffer, as the robot's learner does); ``reward_terms`` are each term's weighted
value when the robot file's ``reward:`` terms computed the reward (0 terms with a reward topic);
``command`` is what went out to the actuators at that tick (robot units: the soft start, the rate limit
and any safe action included), which the trainer's identification replays.
``index`` counts the robot's transitions from 0 at each start of its node and never repeats within
one, so the receiver sees a lost batch (a gap) and does not judge an episode with a gap; the robot's
own log still holds every transition.

Versions: the reader takes the version from the end of the data (the last row's ``wire``), before it
knows the width, so any other version is refused with a message naming both versions. Version 2 (no
command, no n_command) ends with its version 2 there; version 1 (rows without intervention, reward terms,
n_terms and wire) with a stamp: both are refused as another version.
"""
from __future__ import annotations

import numpy as np

from lowrl_ros.core.finetune.transition_log import Transition, transition_label

WIRE_VERSION = 3


def row_width(obs_dim: int, act_dim: int, n_terms: int = 0, n_command: int = 0) -> int:
    """Values in one row: the transition log's record with intervention, ``n_terms`` reward terms and
    ``n_command`` command values, then n_terms, n_command, wire, index."""
    return 2 * obs_dim + act_dim + 10 + n_terms + n_command


def column_names(obs_dim: int, act_dim: int, n_terms: int = 0, n_command: int = 0) -> str:
    """The row's label (``layout.dim[1].label``): each field with its size, ``index`` last."""
    return (transition_label(obs_dim, act_dim) + f";intervention:1;reward_terms:{n_terms};command:{n_command};"
            "n_terms:1;n_command:1;wire:1;index:1")


def encode_transitions(transitions: list[Transition], first_index: int) -> np.ndarray:
    """Rows (float64, shape [n, width]) for transitions numbered from ``first_index``.

    Every transition of a batch carries the same number of reward terms and command values (one robot file);
    ValueError if not."""
    if not transitions:
        raise ValueError("no transitions to encode")
    obs_dim, act_dim = len(transitions[0].obs), len(transitions[0].action)
    k, c = len(transitions[0].reward_terms), _command_size(transitions[0])
    rows = np.empty((len(transitions), row_width(obs_dim, act_dim, k, c)), dtype=np.float64)
    for i, t in enumerate(transitions):
        if len(t.reward_terms) != k or _command_size(t) != c:
            raise ValueError(f"transition {i} carries {len(t.reward_terms)} reward terms and {_command_size(t)} "
                             f"command values, the first {k} and {c}: one batch holds the transitions of one robot "
                             "configuration")
        rows[i] = np.concatenate([t.obs, t.action, [t.reward], t.next_obs,
                                  [float(t.terminated), float(t.truncated), t.policy_version, t.stamp,
                                   float(bool(t.intervention))], t.reward_terms,
                                  () if t.command is None else np.ravel(t.command),
                                  [k, c, WIRE_VERSION, first_index + i]])
    return rows


def _command_size(t: Transition) -> int:
    return 0 if t.command is None else int(np.size(t.command))


def decode_transitions(data, obs_dim: int, act_dim: int) -> tuple[list[int], list[Transition]]:
    """(indices, transitions) of a message's flat data; ValueError saying what is wrong.

    A row with a non-finite value is dropped (the robot's log keeps it; it is not trained on)."""
    flat = np.asarray(data, dtype=np.float64).ravel()
    n, m = obs_dim, act_dim
    if flat.size < 4:
        raise ValueError(f"a transitions message has {flat.size} values; a row has at least {row_width(n, m)}")
    version, c, k = flat[-2], flat[-3], flat[-4]
    if version != WIRE_VERSION:
        raise ValueError(f"a transitions message of wire format version {version:g} (1, 2, unknown, or a torn "
                         f"message: no version at the end of its rows); this reader takes version {WIRE_VERSION}: "
                         "run the same lowrl_ros on the robot and the trainer")
    for count, what in ((k, "reward terms"), (c, "command values")):
        if not (count >= 0 and count == int(count)):
            raise ValueError(f"a transitions message says it carries {count:g} {what}; a count is a whole number "
                             ">= 0")
    k, c = int(k), int(c)
    width = row_width(n, m, k, c)
    if flat.size % width:
        raise ValueError(f"a transitions message has {flat.size} values, not a multiple of the row width {width} "
                         f"(2 x obs_dim {n} + act_dim {m} + 10 + {k} reward terms + {c} command values); is the "
                         "robot's policy the kit's?")
    indices, out = [], []
    for r in flat.reshape(-1, width):
        if not np.isfinite(r).all():
            continue
        # terminated, truncated, policy_version, stamp, intervention, terms, command, k, c, wire, index
        tail = r[2 * n + m + 1:]
        if tail[5 + k + c] != k or tail[6 + k + c] != c or tail[7 + k + c] != WIRE_VERSION:
            raise ValueError(f"a transitions row does not end in n_terms {k}, n_command {c}, wire {WIRE_VERSION}: "
                             f"the rows of one message differ, or obs_dim {n} / act_dim {m} is not the robot's (is "
                             "the policy the kit's?)")
        indices.append(int(tail[8 + k + c]))
        out.append(Transition(obs=r[:n].copy(), action=r[n:n + m].copy(), reward=float(r[n + m]),
                              next_obs=r[n + m + 1:2 * n + m + 1].copy(), terminated=bool(tail[0]),
                              truncated=bool(tail[1]), policy_version=int(tail[2]), stamp=float(tail[3]),
                              intervention=bool(tail[4]), reward_terms=tuple(float(v) for v in tail[5:5 + k]),
                              command=tail[5 + k:5 + k + c].copy() if c else None))
    return indices, out
