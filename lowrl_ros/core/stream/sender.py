"""The sending end of bundle streaming (trainer side): watch a bundle file or directory, publish each
new version once as one signed message (stream/protocol.py has the format), and re-send on the robot's
request. No ROS, no torch; the trainer node maps its parameters to :class:`StreamConfig`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lowrl_ros.core.config import field
from lowrl_ros.core.runtime.bundle import load_bundle
from lowrl_ros.core.stream.protocol import (
    DEFAULT_CHUNK_SIZE,
    NO_PARENT,
    BundleStatus,
    encode_bundle,
    read_header,
)


@dataclass(frozen=True)
class StreamConfig:
    """What the trainer streams and how (config/trainer_node.yaml; the trainer node maps its parameters here).

    Set exactly one of ``bundle_path`` and ``watch_dir`` (e.g. where `lowrl compress -o DIR/vN.lowrl` writes).
    """

    bundle_path: str = field("", "one bundle/artifact file to publish; a change publishes the new file", live=True)
    watch_dir: str = field("", "or: a directory; the newest bundle version matching pattern is published")
    pattern: str = field("*.lowrl", "glob of bundle files in watch_dir")
    key_file: str = field("", "HMAC-SHA256 key file shared with the robot (chmod 600); required unless insecure")
    insecure: bool = field(False, "send unsigned bundles when there is no key (bench only; the robot needs "
                                  "require_signature:=false)")
    chunk_size: int = field(DEFAULT_CHUNK_SIZE, "payload bytes per CRC-checked chunk", range=(1, 64 * 1024 * 1024))
    max_resends: int = field(3, "re-sends of one version on the robot's request before giving up", range=(0, 1000))
    poll_period_s: float = field(1.0, "how often the source is checked for a new version", range=(0.01, 3600.0))

    def __post_init__(self) -> None:
        if bool(self.bundle_path) == bool(self.watch_dir):
            raise ValueError("set exactly one of bundle_path (a .lowrl/.onnx file) or watch_dir (a directory "
                             f"`lowrl compress` writes into); got bundle_path={self.bundle_path!r}, "
                             f"watch_dir={self.watch_dir!r}")
        if not self.pattern:
            raise ValueError("pattern is empty; use a glob such as '*.lowrl'")
        if not self.key_file and not self.insecure:
            raise ValueError("no key_file: bundles must be signed. Create a key with `python -c \"import secrets; "
                             "print(secrets.token_hex(32))\" > ~/.lowrl/bundle.key && chmod 600 ~/.lowrl/bundle.key`, "
                             "give the same file to the robot, and set key_file; or run insecure:=true on a bench")
        if not 1 <= self.chunk_size <= 64 * 1024 * 1024:
            raise ValueError(f"chunk_size {self.chunk_size} must be 1..67108864 bytes (64 KiB is a good size)")
        if not 0 <= self.max_resends <= 1000:
            raise ValueError(f"max_resends {self.max_resends} must be 0..1000")
        if not 0.01 <= self.poll_period_s <= 3600:
            raise ValueError(f"poll_period_s {self.poll_period_s} must be 0.01..3600 s")


@dataclass
class SendEvent:
    """What the sender decided on one poll: ``kind`` is "publish", "refused" or "unreadable"."""

    kind: str
    message: str
    path: str = ""
    version: int = 0
    wire: bytes = b""


class BundleSender:
    """Pick the newest bundle version from the source, frame it, and keep the re-send account.

    Versions only go up: a file whose version is not above the last one published (or the one the
    robot reports running) is refused, never sent. The wire message of the current version is kept
    so a re-send repeats exactly the signed bytes.
    """

    def __init__(self, config: StreamConfig, key: bytes | None) -> None:
        self.config = config
        self.key = key
        self.published_version = 0
        self.published_path = ""
        self.wire = b""
        self.n_chunks = 0
        self.resends = 0
        self.robot_version = 0
        self._seen: dict[str, tuple[int, int]] = {}  # path -> (mtime_ns, size) last looked at
        self._versions: dict[str, tuple[tuple[int, int], int, int]] = {}  # path -> (sig, version, parent)

    def _candidates(self) -> list[Path]:
        if self.config.bundle_path:
            return [Path(self.config.bundle_path).expanduser()]
        return sorted(p for p in Path(self.config.watch_dir).expanduser().glob(self.config.pattern) if p.is_file())

    def _version_of(self, path: Path, sig: tuple[int, int]) -> tuple[int, int]:
        cached = self._versions.get(str(path))
        if cached and cached[0] == sig:
            return cached[1], cached[2]

        bundle = load_bundle(path, engine="numpy")
        parent = bundle.contract.parent_version or NO_PARENT
        self._versions[str(path)] = (sig, bundle.version, parent)
        return bundle.version, parent

    def poll(self) -> list[SendEvent]:
        """Look at the source; return what happened (at most one "publish")."""
        events: list[SendEvent] = []
        candidates = self._candidates()
        if self.config.bundle_path and not candidates[0].is_file():
            if self._seen.get(str(candidates[0])) != (-1, -1):
                self._seen[str(candidates[0])] = (-1, -1)
                events.append(SendEvent("unreadable", f"{candidates[0]}: no such file yet; waiting for it",
                                        str(candidates[0])))
            return events
        if self.config.watch_dir and not Path(self.config.watch_dir).expanduser().is_dir():
            if self._seen.get(self.config.watch_dir) != (-1, -1):
                self._seen[self.config.watch_dir] = (-1, -1)
                events.append(SendEvent("unreadable", f"watch_dir {self.config.watch_dir} does not exist yet; "
                                                      "waiting for `lowrl compress -o` to create it",
                                        self.config.watch_dir))
            return events
        self._seen.pop(self.config.watch_dir, None)
        found: list[tuple[int, int, Path, bool]] = []  # version, parent, path, changed since last poll
        for path in candidates:
            try:
                st = path.stat()
            except OSError:
                continue  # removed between glob and stat
            sig = (st.st_mtime_ns, st.st_size)
            changed = self._seen.get(str(path)) != sig
            self._seen[str(path)] = sig
            try:
                version, parent = self._version_of(path, sig)
            except (ValueError, OSError) as exc:
                if changed:  # said once per change of the file, not at every poll
                    events.append(SendEvent("unreadable", f"cannot use {path}: {exc}", str(path)))
                continue
            found.append((version, parent, path, changed))
        if not found:
            return events
        floor = max(self.published_version, self.robot_version)
        version, parent, path, _ = max(found, key=lambda f: f[0])
        if version > floor:
            data = path.read_bytes()
            st = path.stat()
            if (st.st_mtime_ns, st.st_size) != self._seen.get(str(path)):
                return events  # replaced since it was validated: validate the new file at the next poll
            self.wire = encode_bundle(data, version, self.key, parent_version=parent,
                                      chunk_size=self.config.chunk_size)
            self.n_chunks = read_header(self.wire).n_chunks
            self.published_version, self.published_path, self.resends = version, str(path), 0
            events.append(SendEvent("publish", f"v{version} from {path}: {len(data)} bytes in {self.n_chunks} "
                                               f"chunk(s)", str(path), version, self.wire))
        for v, _, p, changed in found:
            if changed and v <= floor and not (v == self.published_version and str(p) == self.published_path):
                events.append(SendEvent("refused", f"refusing {p}: its version v{v} is not newer than v{floor} "
                                                   "(published, or running on the robot); versions must increase "
                                                   "(`lowrl compress --version N`)", str(p), v))
        return events

    def on_status(self, status: BundleStatus) -> SendEvent | None:
        """Account for the robot's answer; return a "publish" event when a re-send is due."""
        self.robot_version = max(self.robot_version, status.running_version)
        if status.version != self.published_version or not status.resend or not self.wire:
            return None
        if self.resends >= self.config.max_resends:
            return SendEvent("refused", f"v{self.published_version}: the robot asked for a re-send again "
                                        f"({status.code}) but max_resends={self.config.max_resends} are spent; "
                                        "check the link, then publish a new version or restart the trainer",
                             self.published_path, self.published_version)
        self.resends += 1
        return SendEvent("publish", f"re-sending v{self.published_version} ({self.resends}/{self.config.max_resends}) "
                                    f"on the robot's request: {status.code}", self.published_path,
                         self.published_version, self.wire)
