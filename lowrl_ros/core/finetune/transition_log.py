"""Durable on-robot transition log: MCAP segments with ROS 2 encoding plus a write-ahead log.

Every transition the fine-tuner sees (observation, action, reward, next observation, terminated,
truncated, policy version, time) is kept on disk so that a crash of the node loses nothing it
reported as recorded. No torch, no rclpy: the CDR bytes are written by a few lines of ``struct``.

On disk (one directory)::

    transitions_000001.mcap   a closed segment: a complete, indexed MCAP file (Foxglove, mcap CLI,
                              rosbag2 open it: topic /lowrl/transitions, std_msgs/msg/Float64MultiArray,
                              schema encoding "ros2msg", message encoding "cdr")
    transitions_000002.mcap   the open segment (chunked MCAP, its last chunk still in memory)
    transitions_000002.wal    its write-ahead log: every transition of the open segment, appended
                              and handed to the kernel before ``append`` returns

Why both: MCAP's chunks (compressed, indexed) are what tools want, but a chunk sits in the
writer's memory until it is full, so a killed process would lose it. The WAL is a plain append-only
file of length + CRC32 framed CDR records, written with one ``os.write`` per transition; the page
cache keeps it when the process dies (``fsync_interval_s`` bounds what a power cut can take). A
segment is closed every ``segment_transitions`` transitions or ``segment_seconds`` seconds: its MCAP
is finished (summary, indexes), fsynced, and only then its WAL deleted. On start-up, any WAL left
behind by a crash is turned back into a complete MCAP (written to a temp file, fsynced, renamed),
so after a restart every file is a valid MCAP again. ``read_log`` reads a directory without
changing it, tolerating a torn last record and a truncated MCAP, and reports what it recovered.

Message layout: ``data = obs[n] + action[m] + [reward] + next_obs[n] + [terminated, truncated,
policy_version, stamp]``; ``layout.dim[0].label`` names the fields with their sizes, e.g.
``obs:3;action:1;reward:1;next_obs:3;terminated:1;truncated:1;policy_version:1;stamp:1``, so each
message describes itself and ``data[i]`` can be plotted in Foxglove. The optional fields (``EXTRA_FIELDS``)
follow with their sizes in the label: ``;intervention:1;reward_terms:k`` and ``;command:c``.
"""
from __future__ import annotations

import logging
import math
import os
import re
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from lowrl_ros.core.config import field as config_field

LOG = logging.getLogger("lowrl.transition_log")

TOPIC = "/lowrl/transitions"
SCHEMA_NAME = "std_msgs/msg/Float64MultiArray"
_SEP = "=" * 80
# The ros2msg schema text as rosbag2 writes it: the message, then each dependency after a separator.
SCHEMA_TEXT = (
    "MultiArrayLayout layout\nfloat64[] data\n"
    f"{_SEP}\nMSG: std_msgs/MultiArrayLayout\nMultiArrayDimension[] dim\nuint32 data_offset\n"
    f"{_SEP}\nMSG: std_msgs/MultiArrayDimension\nstring label\nuint32 size\nuint32 stride\n"
)
FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated", "policy_version", "stamp")
# Optional trailing fields (written only when set, so logs without them read as before):
# ``intervention:1`` (1: a person's teleop action, HIL-SERL), ``reward_terms:k`` (each reward term's
# weighted value, core/finetune/rewards.py, in the robot file's order) and ``command:c`` (what went out to the
# actuators at this tick, robot units, the policy's joint order: the step row's command, with the soft start,
# the rate limit and any safe action in it; identification replays it).
EXTRA_FIELDS = ("intervention", "reward_terms", "command")
_PREFIX = "transitions_"
_NAME = re.compile(r"^transitions_(\d{6})\.(mcap|wal)$")
_WAL_MAGIC = b"LOWRLWAL1\n"
_WAL_HEAD = struct.Struct("<IIQ")  # payload length, CRC32 of (log time + payload), log time ns
COMPRESSIONS = ("zstd", "lz4", "none")


class TransitionLogError(ValueError):
    """A log directory or record that cannot be used; the message says how to fix it."""


@dataclass(frozen=True)
class TransitionLogConfig:
    """How the log is cut into files and bounded (finetune_node's ``log_<field>`` parameters)."""

    segment_transitions: int = config_field(2000, "close the open MCAP segment after this many transitions",
                                            range=(1, 10_000_000))
    segment_seconds: float = config_field(60.0, "... or after this many seconds, whichever comes first",
                                          range=(0.01, 86400.0))
    chunk_bytes: int = config_field(64 * 1024, "MCAP chunk size (uncompressed) inside a segment",
                                    range=(256, 64 * 1024 * 1024))
    compression: str = config_field("zstd", "chunk compression: zstd, lz4 or none")
    # A killed process loses nothing either way; this bounds what a power cut can take.
    fsync_interval_s: float = config_field(1.0, "fsync the WAL at most this often (0: after every transition)",
                                           range=(0.0, 3600.0))
    max_files: int = config_field(500, "keep at most this many segments; the oldest closed ones are deleted (logged)",
                                  range=(2, 1_000_000))
    max_bytes: int = config_field(512 * 1024 * 1024, "keep at most this many bytes of segments (same rule)",
                                  range=(65536, 2**62))

    def __post_init__(self) -> None:
        if self.segment_transitions < 1:
            raise ValueError(f"segment_transitions={self.segment_transitions} must be >= 1 (e.g. 2000)")
        if not self.segment_seconds > 0:
            raise ValueError(f"segment_seconds={self.segment_seconds} must be > 0 (e.g. 60)")
        if self.chunk_bytes < 256:
            raise ValueError(f"chunk_bytes={self.chunk_bytes} must be >= 256 (e.g. 65536)")
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"compression={self.compression!r} is unknown; use one of {', '.join(COMPRESSIONS)}")
        if self.fsync_interval_s < 0:
            raise ValueError(f"fsync_interval_s={self.fsync_interval_s} must be >= 0 (0: fsync every transition)")
        if self.max_files < 2:
            raise ValueError(f"max_files={self.max_files} must be >= 2 (the open segment and at least one closed)")
        if self.max_bytes < 64 * 1024:
            raise ValueError(f"max_bytes={self.max_bytes} must be >= 65536")


@dataclass(frozen=True)
class Transition:
    """One step as the robot saw it: the observation as the policy reads it, the action EXECUTED in policy units
    (the step row's ``action``: clipped to the action space, the teleop's in an intervention), ``command``: what
    went out to the actuators (robot units; the step row's ``command``, None where the reward came from a topic),
    and ``stamp``: the DDS source time of the next tick's step row, which completes it
    (core/sim/robot_recording.py documents what identification reads from it)."""

    obs: np.ndarray
    action: np.ndarray
    reward: float
    next_obs: np.ndarray
    terminated: bool
    truncated: bool
    policy_version: int
    stamp: float  # seconds (the publisher's clock when the row completing the transition was sent)
    intervention: bool = False  # a person's teleop action replaced the policy's (HIL-SERL)
    reward_terms: tuple[float, ...] = ()  # each reward term's weighted value (robot file reward:)
    command: np.ndarray | None = None  # what went out at this tick, robot units (robot file: the step row's command)


@dataclass
class TransitionBatch:
    """Transitions as arrays, in the order they were recorded."""

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    policy_version: np.ndarray
    stamp: np.ndarray
    intervention: np.ndarray | None = None  # bool per transition (None: read as all False)
    reward_terms: np.ndarray | None = None  # (n, terms) when every transition has the same terms, else None
    command: np.ndarray | None = None  # (n, joints) when every transition carries a command, else None

    def row(self, i: int) -> Transition:
        """Transition ``i`` back as a :class:`Transition`."""
        return Transition(self.obs[i], self.action[i], float(self.reward[i]), self.next_obs[i],
                          bool(self.terminated[i]), bool(self.truncated[i]), int(self.policy_version[i]),
                          float(self.stamp[i]), bool(self.intervention[i]) if self.intervention is not None else False,
                          tuple(self.reward_terms[i]) if self.reward_terms is not None else (),
                          self.command[i] if self.command is not None else None)

    def __len__(self) -> int:
        return len(self.reward)


@dataclass
class ReadReport:
    """What ``read_log`` found."""

    transitions: int = 0
    segments: int = 0
    complete_segments: int = 0  # MCAPs with a footer and no WAL
    from_wal: int = 0  # segments read from a WAL (the process died with it open)
    truncated_segments: int = 0  # MCAPs cut short with no WAL (read up to the last whole chunk)
    torn_bytes: int = 0  # bytes of a partial last WAL record (written when the process died)
    skipped_segments: int = 0  # older segments not read (max_transitions reached)
    problems: list[str] = field(default_factory=list)


# ---- CDR (XCDR1, little endian) for std_msgs/msg/Float64MultiArray ---------------------------
def transition_label(obs_dim: int, act_dim: int) -> str:
    sizes = (obs_dim, act_dim, 1, obs_dim, 1, 1, 1, 1)
    return ";".join(f"{name}:{n}" for name, n in zip(FIELDS, sizes))


def _pad(buf: bytearray, align: int) -> None:
    # CDR aligns to the offset after the 4-byte encapsulation header.
    buf.extend(b"\0" * (-(len(buf) - 4) % align))


def encode_float64_multiarray(label: str, data: np.ndarray) -> bytes:
    """CDR bytes of a Float64MultiArray with one dimension ``label`` (what rclpy would serialise)."""
    values = np.ascontiguousarray(data, dtype="<f8").ravel()
    text = label.encode("utf-8") + b"\0"
    buf = bytearray(b"\x00\x01\x00\x00")  # CDR_LE encapsulation
    buf += struct.pack("<I", 1)  # dim: one MultiArrayDimension
    buf += struct.pack("<I", len(text)) + text
    _pad(buf, 4)
    buf += struct.pack("<III", values.size, values.size, 0)  # size, stride, data_offset
    buf += struct.pack("<I", values.size)
    _pad(buf, 8)
    buf += values.tobytes()
    return bytes(buf)


def decode_float64_multiarray(payload: bytes) -> tuple[list[str], np.ndarray]:
    """Labels and data of a CDR Float64MultiArray; TransitionLogError if the bytes are not one."""
    try:
        if payload[:2] != b"\x00\x01":
            raise ValueError("not little-endian CDR")
        pos = 4
        (ndim,) = struct.unpack_from("<I", payload, pos)
        pos += 4
        labels = []
        for _ in range(ndim):
            (n,) = struct.unpack_from("<I", payload, pos)
            pos += 4
            labels.append(payload[pos:pos + n - 1].decode("utf-8"))
            pos += n
            pos += -(pos - 4) % 4
            pos += 8  # size, stride
        pos += 4  # data_offset
        (count,) = struct.unpack_from("<I", payload, pos)
        pos += 4
        pos += -(pos - 4) % 8
        data = np.frombuffer(payload, dtype="<f8", count=count, offset=pos).astype(np.float64)
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        raise TransitionLogError(f"a /lowrl/transitions record is not a CDR Float64MultiArray ({exc})") from None
    return labels, data


def encode_transition(t: Transition) -> bytes:
    """The CDR bytes of one transition (layout in the module docstring)."""
    obs = np.asarray(t.obs, dtype=np.float64).ravel()
    action = np.asarray(t.action, dtype=np.float64).ravel()
    next_obs = np.asarray(t.next_obs, dtype=np.float64).ravel()
    if obs.size != next_obs.size:
        raise TransitionLogError(f"obs has {obs.size} values but next_obs {next_obs.size}; they must match")
    data = np.concatenate([obs, action, [float(t.reward)], next_obs,
                           [float(bool(t.terminated)), float(bool(t.truncated)), float(t.policy_version),
                            float(t.stamp)]])
    label = transition_label(obs.size, action.size)
    if t.intervention or t.reward_terms or t.command is not None:
        terms = np.asarray(t.reward_terms, dtype=np.float64).ravel()
        label += f";intervention:1;reward_terms:{terms.size}"
        data = np.concatenate([data, [float(bool(t.intervention))], terms])
    if t.command is not None:
        command = np.asarray(t.command, dtype=np.float64).ravel()
        label += f";command:{command.size}"
        data = np.concatenate([data, command])
    return encode_float64_multiarray(label, data)


def decode_transition(payload: bytes) -> Transition:
    """Inverse of ``encode_transition``; the sizes come from the message's own label."""
    labels, data = decode_float64_multiarray(payload)
    try:
        sizes = dict((name, int(n)) for name, n in (part.split(":") for part in labels[0].split(";")))
        n, m = sizes["obs"], sizes["action"]
    except (IndexError, KeyError, ValueError):
        raise TransitionLogError(f"transition label {labels!r} does not name the fields {FIELDS}") from None
    k, c = sizes.get("reward_terms", 0), sizes.get("command", 0)
    extra = (1 + k) if "intervention" in sizes else 0
    if data.size != 2 * n + m + 5 + extra + c:
        raise TransitionLogError(f"transition has {data.size} values, its label says {2 * n + m + 5 + extra + c}")
    tail = data[2 * n + m + 1:]
    return Transition(obs=data[:n], action=data[n:n + m], reward=float(data[n + m]),
                      next_obs=data[n + m + 1:2 * n + m + 1], terminated=bool(tail[0]), truncated=bool(tail[1]),
                      policy_version=int(tail[2]), stamp=float(tail[3]),
                      intervention=bool(extra and tail[4]), reward_terms=tuple(float(v) for v in tail[5:5 + k]),
                      command=tail[4 + extra:4 + extra + c].copy() if c else None)


# ---- WAL ------------------------------------------------------------------------------------
def _read_wal(path: Path) -> tuple[list[tuple[int, bytes]], int]:
    """(log time ns, payload) of every whole, CRC-valid record, and the bytes of a torn tail."""
    blob = path.read_bytes()
    if not blob.startswith(_WAL_MAGIC):
        # A WAL whose header never made it to disk holds nothing.
        return [], len(blob)
    pos, out = len(_WAL_MAGIC), []
    while pos + _WAL_HEAD.size <= len(blob):
        length, crc, log_time = _WAL_HEAD.unpack_from(blob, pos)
        end = pos + _WAL_HEAD.size + length
        if end > len(blob):
            break
        payload = blob[pos + _WAL_HEAD.size:end]
        if zlib.crc32(struct.pack("<Q", log_time) + payload) != crc:
            break
        out.append((log_time, payload))
        pos = end
    return out, len(blob) - pos


def _read_mcap(path: Path) -> tuple[list[tuple[int, bytes]], bool]:
    """(log time ns, payload) of the messages of an MCAP, and whether it was complete."""
    from mcap.stream_reader import StreamReader
    from mcap.records import Footer, Message

    out: list[tuple[int, bytes]] = []
    complete = False
    with path.open("rb") as f:
        try:
            for record in StreamReader(f, record_size_limit=256 * 1024 * 1024).records:
                if isinstance(record, Message):
                    out.append((record.log_time, record.data))
                elif isinstance(record, Footer):
                    complete = True
        except Exception:  # noqa: BLE001 - a truncated file ends in any of mcap's read errors
            complete = False
    return out, complete


def _segments(directory: Path) -> dict[int, dict[str, Path]]:
    found: dict[int, dict[str, Path]] = {}
    for p in directory.iterdir():
        m = _NAME.match(p.name)
        if m:
            found.setdefault(int(m.group(1)), {})[m.group(2)] = p
    return dict(sorted(found.items()))


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_mcap(path: Path, records: Iterable[tuple[int, bytes]], config: TransitionLogConfig):
    """Start an MCAP writer on ``path``; returns (writer, file, channel id)."""
    from mcap.writer import CompressionType, Writer

    f = path.open("wb")
    writer = Writer(f, chunk_size=config.chunk_bytes, compression=CompressionType[config.compression.upper()])
    writer.start(profile="ros2", library="lowrl_ros transition_log")
    schema = writer.register_schema(SCHEMA_NAME, "ros2msg", SCHEMA_TEXT.encode())
    channel = writer.register_channel(TOPIC, "cdr", schema, metadata={"fields": ";".join(FIELDS)})
    for i, (log_time, payload) in enumerate(records):
        writer.add_message(channel, log_time=log_time, data=payload, publish_time=log_time, sequence=i)
    return writer, f, channel


def _finish(writer, f) -> None:
    writer.finish()
    f.flush()
    os.fsync(f.fileno())
    f.close()


# ---- writer ---------------------------------------------------------------------------------
class TransitionLogWriter:
    """Appends transitions to ``directory``; see the module docstring for the files.

    Opening a directory first repairs what a crash left (every WAL becomes a complete MCAP), then
    starts a new segment after the highest existing one. Thread-safe.

    Args:
        directory: the log directory (created).
        config: segmenting, fsync and disk bounds.
    """

    def __init__(self, directory: str | Path, config: TransitionLogConfig | None = None) -> None:
        self.directory = Path(directory)
        self.config = config or TransitionLogConfig()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.written = 0  # transitions appended by this writer
        self.repaired = self.repair()
        self.dropped_segments = 0
        existing = _segments(self.directory)
        self._seq = (max(existing) if existing else 0)
        self._writer = None
        self._enforce_bounds()

    def repair(self) -> int:
        """Turn every WAL left by a crash into a complete MCAP; return how many transitions it held."""
        for tmp in self.directory.glob(f"{_PREFIX}*.tmp"):
            tmp.unlink()
        total = 0
        for seq, files in _segments(self.directory).items():
            wal = files.get("wal")
            if wal is None:
                continue
            records, torn = _read_wal(wal)
            mcap_path = self.directory / f"{_PREFIX}{seq:06d}.mcap"
            tmp = mcap_path.with_suffix(".mcap.tmp")
            writer, f, _ = _write_mcap(tmp, records, self.config)
            _finish(writer, f)
            tmp.replace(mcap_path)
            _fsync_dir(self.directory)
            wal.unlink()
            total += len(records)
            LOG.warning("transition log: segment %s was left open by a crash; rebuilt it from its WAL "
                        "(%d transitions%s)", mcap_path.name, len(records),
                        f", {torn} torn bytes of an unfinished record dropped" if torn else "")
        return total

    # -- writing --
    def _open_segment(self) -> None:
        self._seq += 1
        stem = self.directory / f"{_PREFIX}{self._seq:06d}"
        # The WAL exists before the MCAP does: a crash in between leaves a WAL, never an orphan.
        self._wal_fd = os.open(stem.with_suffix(".wal"), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
        os.write(self._wal_fd, _WAL_MAGIC)
        self._writer, self._file, self._channel = _write_mcap(stem.with_suffix(".mcap"), (), self.config)
        self._count = 0
        self._opened = time.monotonic()
        self._last_sync = time.monotonic()

    def append(self, transition: Transition, log_time_ns: int | None = None) -> int:
        """Record one transition; when this returns it survives the process being killed.

        Returns:
            The number of transitions this writer has recorded.
        """
        payload = encode_transition(transition)
        log_time = time.time_ns() if log_time_ns is None else int(log_time_ns)
        with self._lock:
            if self._writer is None:
                self._open_segment()
            head = _WAL_HEAD.pack(len(payload), zlib.crc32(struct.pack("<Q", log_time) + payload), log_time)
            os.write(self._wal_fd, head + payload)  # one write: a record is whole or torn, never mixed
            now = time.monotonic()
            if now - self._last_sync >= self.config.fsync_interval_s:
                os.fsync(self._wal_fd)
                self._last_sync = now
            self._writer.add_message(self._channel, log_time=log_time, data=payload, publish_time=log_time,
                                     sequence=self._count)
            self._count += 1
            self.written += 1
            if self._count >= self.config.segment_transitions or now - self._opened >= self.config.segment_seconds:
                self._close_segment()
            return self.written

    def roll_if_due(self) -> None:
        """Close the open segment if it is older than ``segment_seconds`` (call from a timer)."""
        with self._lock:
            if self._writer is not None and time.monotonic() - self._opened >= self.config.segment_seconds:
                self._close_segment()

    def _close_segment(self) -> None:
        _finish(self._writer, self._file)
        _fsync_dir(self.directory)
        os.close(self._wal_fd)
        (self.directory / f"{_PREFIX}{self._seq:06d}.wal").unlink()  # only once the MCAP is durable
        self._writer = None
        self._enforce_bounds()

    def _enforce_bounds(self) -> None:
        segs = _segments(self.directory)
        open_seq = self._seq if self._writer is not None else None
        closed = [s for s in segs if s != open_seq]
        size = sum(p.stat().st_size for files in segs.values() for p in files.values())
        while closed and (len(segs) > self.config.max_files or size > self.config.max_bytes):
            seq = closed.pop(0)
            for p in segs.pop(seq).values():
                size -= p.stat().st_size
                p.unlink()
            self.dropped_segments += 1
            LOG.warning("transition log: deleted the oldest segment %s%06d to stay within max_files=%d / "
                        "max_bytes=%d; raise them to keep more", _PREFIX, seq, self.config.max_files,
                        self.config.max_bytes)

    def sync(self) -> None:
        """fsync the open segment's WAL now (e.g. before a planned power-off)."""
        with self._lock:
            if self._writer is not None:
                os.fsync(self._wal_fd)

    def close(self) -> None:
        """Close the open segment (finished, fsynced MCAP; WAL removed)."""
        with self._lock:
            if self._writer is not None:
                self._close_segment()


# ---- reader ---------------------------------------------------------------------------------
def read_log(directory: str | Path, max_transitions: int | None = None) -> tuple[TransitionBatch, ReadReport]:
    """Read the transitions in ``directory`` (oldest first) without changing any file.

    ``max_transitions`` reads only the newest segments holding at least that many and returns the
    newest that many (a resuming learner needs its buffer's worth, not months of log).

    A segment with a WAL (its writer died) is read from the WAL, up to the last whole record; a
    truncated MCAP without a WAL is read up to its last whole chunk. Nothing raises on a cut file:
    the report says what was found.

    Raises:
        TransitionLogError: the directory does not exist, or transitions of different sizes are mixed.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise TransitionLogError(f"transition log directory {directory} does not exist; "
                                 "point log_dir at the fine-tuner's log directory")
    report = ReadReport()
    chunks: list[list[Transition]] = []
    count = 0
    for seq, files in reversed(_segments(directory).items()):
        if max_transitions is not None and count >= max_transitions:
            report.skipped_segments += 1
            continue
        items: list[Transition] = []
        chunks.append(items)
        report.segments += 1
        if "wal" in files:
            records, torn = _read_wal(files["wal"])
            report.from_wal += 1
            report.torn_bytes += torn
        else:
            records, complete = _read_mcap(files["mcap"])
            if complete:
                report.complete_segments += 1
            else:
                report.truncated_segments += 1
                report.problems.append(f"{files['mcap'].name} is truncated and has no WAL; read "
                                       f"{len(records)} transitions from its whole chunks")
        for _, payload in records:
            try:
                items.append(decode_transition(payload))
            except TransitionLogError as exc:
                report.problems.append(f"segment {seq}: {exc}")
        count += len(items)
    items = [t for chunk in reversed(chunks) for t in chunk]
    if max_transitions is not None:
        items = items[max(0, len(items) - max_transitions):]
    report.transitions = len(items)
    return _batch(items), report


def _batch(items: list[Transition]) -> TransitionBatch:
    if not items:
        empty = np.zeros((0, 0))
        return TransitionBatch(empty, empty, np.zeros(0), empty, np.zeros(0, bool), np.zeros(0, bool),
                               np.zeros(0, np.int64), np.zeros(0))
    dims = {(t.obs.size, t.action.size) for t in items}
    if len(dims) > 1:
        raise TransitionLogError(f"the log mixes transition sizes {sorted(dims)} (obs, action); keep one "
                                 "robot/policy per log directory")
    return TransitionBatch(
        obs=np.stack([t.obs for t in items]), action=np.stack([t.action for t in items]),
        reward=np.array([t.reward for t in items]), next_obs=np.stack([t.next_obs for t in items]),
        terminated=np.array([t.terminated for t in items]), truncated=np.array([t.truncated for t in items]),
        policy_version=np.array([t.policy_version for t in items], dtype=np.int64),
        stamp=np.array([t.stamp for t in items]), intervention=np.array([t.intervention for t in items]),
        reward_terms=(np.array([t.reward_terms for t in items])
                      if items[0].reward_terms and len({len(t.reward_terms) for t in items}) == 1 else None),
        command=(np.stack([t.command for t in items])
                 if all(t.command is not None for t in items) and len({t.command.size for t in items}) == 1 else None))



# ---- forming transitions from a robot's message streams -------------------------------------
@dataclass
class _Step:
    obs: np.ndarray
    obs_time: float
    next_obs: np.ndarray
    next_time: float
    version: int
    sealable_after: float  # caller's clock: give up waiting for a reward after this


_MAX_QUEUED = 10_000  # rewards/commands/ends kept waiting for observations (a dead observation stream)


class TransitionAssembler:
    """Pairs observations, commands, rewards and episode ends into transitions (ROS-free).

    Every event carries the time its *publisher* sent it (DDS source timestamps: one clock for
    everything a robot process publishes, whatever order the streams arrive in). Step t is the
    interval between observation t (sent at T_t) and observation t+1 (sent at T_{t+1}); on a robot
    like the sim robot node or ros2_control with a reward topic:

    * its action is the newest command sent before T_{t+1} (the robot holds the newest command);
    * its reward is the one reward sent in (T_t, T_{t+1}] (the robot publishes the reward of a step
      just before the observation that follows it); none, or two (an observation was lost), and
      the step is dropped and counted in ``incomplete``: never guessed;
    * an episode end sent in (T_t, T_{t+1}] marks it done ("terminated" or "truncated");
    * it is sealed when a reward and a command sent after T_{t+1} have arrived (each stream arrives
      in order, so everything of step t is in), or ``max_reward_delay_s`` (caller's clock) after
      its next observation arrived (a stream stopped).

    Args:
        max_reward_delay_s: how long to wait for a step's reward before dropping the step.
    """

    def __init__(self, max_reward_delay_s: float = 0.5) -> None:
        if not max_reward_delay_s > 0:
            raise ValueError(f"max_reward_delay_s={max_reward_delay_s} must be > 0 (e.g. 0.5)")
        self.max_reward_delay_s = float(max_reward_delay_s)
        self.incomplete = 0
        self.reset()

    def reset(self) -> None:
        """Forget the open steps (e.g. the robot was restarted); sealed transitions are unaffected."""
        self._obs: np.ndarray | None = None
        self._obs_time = -math.inf
        self._commands: list[tuple[float, np.ndarray]] = []
        self._steps: list[_Step] = []
        self._rewards: list[tuple[float, float]] = []
        self._ends: list[tuple[float, str]] = []
        self._last_reward_time = -math.inf
        self._last_command_time = -math.inf

    def command(self, action, sent: float, now: float = 0.0) -> list[Transition]:
        """A command the controller sent at ``sent``; returns the steps it seals."""
        self._commands.append((sent, np.asarray(action, dtype=np.float64).copy()))
        del self._commands[:-_MAX_QUEUED]
        self._last_command_time = max(self._last_command_time, sent)
        return self._seal(now)

    def reward(self, value: float, sent: float, now: float = 0.0) -> list[Transition]:
        """A reward sent at ``sent``; returns the steps it seals."""
        self._rewards.append((sent, float(value)))
        del self._rewards[:-_MAX_QUEUED]
        self._last_reward_time = max(self._last_reward_time, sent)
        return self._seal(now)

    def episode_end(self, kind: str, sent: float) -> None:
        """An episode ended; ``kind`` is "terminated" or "truncated"."""
        if kind not in ("terminated", "truncated"):
            raise ValueError(f"episode end kind {kind!r}: use terminated or truncated")
        self._ends.append((sent, kind))
        del self._ends[:-_MAX_QUEUED]

    def observation(self, obs, sent: float, version: int, now: float = 0.0) -> list[Transition]:
        """An observation sent at ``sent``: closes the current step; returns the steps sealed."""
        obs = np.asarray(obs, dtype=np.float64).copy()
        if self._obs is not None and sent > self._obs_time:
            self._steps.append(_Step(self._obs, self._obs_time, obs, sent, int(version),
                                     now + self.max_reward_delay_s))
        self._obs, self._obs_time = obs, sent
        return self._seal(now)

    def observation_timeout(self, now: float) -> list[Transition]:
        """Seal the steps whose wait is over at ``now`` (call periodically when messages may stop)."""
        return self._seal(now)

    def flush(self) -> list[Transition]:
        """Seal every open step now (shutdown): complete ones are returned, the rest counted."""
        return self._seal(math.inf, force=True)

    def _seal(self, now: float, force: bool = False) -> list[Transition]:
        out = []
        while self._steps:
            step = self._steps[0]
            in_ = self._last_reward_time > step.next_time and self._last_command_time > step.next_time
            if not (force or in_ or now >= step.sealable_after):
                break
            self._steps.pop(0)
            before = [c for c in self._commands if c[0] < step.next_time]
            action = before[-1][1] if before else None
            # Older commands can never be the newest before a later observation: drop them.
            self._commands = self._commands[max(0, len(before) - 1):]
            inside = [r for r in self._rewards if step.obs_time < r[0] <= step.next_time]
            ends = [e for e in self._ends if step.obs_time < e[0] <= step.next_time]
            self._rewards = [r for r in self._rewards if r[0] > step.next_time]
            self._ends = [e for e in self._ends if e[0] > step.next_time]
            if len(inside) != 1 or action is None:
                self.incomplete += 1  # lost reward, lost observation, or no command yet
                continue
            kind = ends[-1][1] if ends else ""
            out.append(Transition(step.obs, action, inside[0][1], step.next_obs, kind == "terminated",
                                  kind == "truncated", step.version, step.next_time))
        return out
