"""The policy hot swap, free of ROS: load and check off the control path, install between ticks.

A swap comes from two places: a new ``policy_path`` (a file on the robot) or a streamed bundle
message (the trainer). Both run on ONE worker thread, one request at a time; a request that arrives
while the worker is busy replaces any request still waiting (newest wins), so a burst of versions
costs one load, never a queue of stale ones, and no callback ever waits for a join. What the worker
validated and warmed up waits in ``pending`` until the control thread calls :meth:`PolicySwapper.take`
between two ticks (one reference swap: atomic for the controller). ``take`` reads ``pending``
without the lock, so a tick with nothing to install costs one attribute read.

Streamed bundles are checked by the receiver (``lowrl_ros.core.stream.receiver.BundleReceiver.answer``),
which also builds the reply for the trainer; this module only needs the duck-typed parts of it
(:class:`BundleSource`), because the stream package sits above the runtime (docs/architecture.md).
The version a bundle must beat is the newest of what runs, what is pending and what the stream
already accepted, so a latched re-delivery or a slow worker never installs an older version.

A one-tier version (what the fine-tuner makes) keeps the running bundle's lite tier when the contract
still matches (``lowrl_ros.core.runtime.ladder.keep_lite``), on both paths: the robot's fallback ladder
keeps its same-rate step across fine-tuned versions.

Everything the swapper decides is visible in :meth:`PolicySwapper.status` (a :class:`SwapStatus`,
whose ``values()`` are the keys the policy node adds to its ``lowrl/policy/policy`` diagnostic,
docs/CONTRACTS.md) and :meth:`PolicySwapper.stream_status`.
"""
from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from lowrl_ros.core.runtime.ladder import keep_lite
from lowrl_ros.core.types import Level


class _StrEnum(str, enum.Enum):
    """``enum.StrEnum`` (Python 3.11+) on Python 3.10 too (Humble, JetPack 6): str() and format() give
    the value, exactly as StrEnum does."""

    __str__ = str.__str__
    __format__ = str.__format__


class RejectCode(_StrEnum):
    """Why a bundle or artifact was rejected: the ``code`` of a BundleRejected and of the
    ``BundleStatus`` reply on ``/lowrl/policy_bundle/status`` (wire values: never rename one)."""

    # Wire and signature (lowrl_ros/core/stream/protocol.py: decode_bundle).
    TRUNCATED = "truncated"
    BAD_MAGIC = "bad_magic"
    BAD_PROTOCOL = "bad_protocol"
    UNSIGNED = "unsigned"
    NO_KEY = "no_key"
    BAD_SIGNATURE = "bad_signature"
    OLD_VERSION = "old_version"
    BAD_CHUNK_SIZE = "bad_chunk_size"
    CORRUPT_CHUNK = "corrupt_chunk"
    MISSING_CHUNK = "missing_chunk"
    LENGTH_MISMATCH = "length_mismatch"
    BAD_SHA256 = "bad_sha256"
    # Content (lowrl_ros/core/stream/receiver.py), and a path swap's load or contract check here.
    DUPLICATE = "duplicate"  # the running bundle again (a latched re-delivery): harmless, not an error
    INVALID_ARTIFACT = "invalid_artifact"
    NONFINITE_WEIGHTS = "nonfinite_weights"
    RECEIVE_DIR = "receive_dir"
    VERSION_MISMATCH = "version_mismatch"
    CONTRACT_MISMATCH = "contract_mismatch"
    PARITY = "parity"


class SwapState(_StrEnum):
    """Where the last swap request stands (the ``swap_state`` diagnostic value)."""

    NONE = "none"  # nothing requested since configure
    VALIDATED = "validated"  # loaded, checked, warmed up: installed at the next tick
    SWAPPED = "swapped"  # the control path runs it
    REJECTED = "rejected"  # refused; the running policy keeps running


@dataclass(frozen=True)
class SwapStatus:
    """The last swap request's outcome.

    Attributes:
        state: none | validated | swapped | rejected.
        path: the artifact or bundle file; for a streamed bundle rejected before it was stored,
            ``bundle v<N>``.
        version: the policy version (0: unknown, e.g. a file that did not load).
        code: a :class:`RejectCode` value when rejected, else "".
        message: the human text (unchanged from before the keys existed: rqt shows it).
    """

    state: SwapState = SwapState.NONE
    path: str = ""
    version: int = 0
    code: str = ""
    message: str = "no swap requested"

    @property
    def level(self) -> Level:
        return Level.ERROR if self.state == SwapState.REJECTED else Level.OK

    def values(self) -> dict[str, Any]:
        """The diagnostic values (docs/CONTRACTS.md pins the ``swap_*`` keys; ``swap`` is the text)."""
        return {"swap": self.message, "swap_state": str(self.state), "swap_path": self.path,
                "swap_version": self.version, "swap_code": self.code}


@dataclass(frozen=True)
class StreamStatus:
    """The bundle stream as the robot sees it (the ``lowrl/policy/bundle`` diagnostic).

    Attributes:
        level: OK, or ERROR after a rejection (a duplicate is OK).
        message: the last event in words.
        version: the highest version accepted from the stream (0: none yet).
        last_code: "ok" or the last rejection code ("" before any bundle).
        resend_requested: whether the last rejection asked the trainer to send again (None: n/a).
        signed_only: the receiver requires a signature; key_loaded: it holds a key.
    """

    level: Level = Level.OK
    message: str = "no bundle received"
    version: int = 0
    last_code: str = ""
    resend_requested: bool | None = None
    signed_only: bool = False
    key_loaded: bool = False

    def values(self) -> dict[str, Any]:
        out: dict[str, Any] = {"stream_version": self.version, "signed_only": self.signed_only,
                               "key": "loaded" if self.key_loaded else "none"}
        if self.last_code:
            out["last_code"] = self.last_code
        if self.resend_requested is not None:
            out["resend_requested"] = self.resend_requested
        return out


class Swappable(Protocol):
    """What the swapper needs of the controller (``PolicyController`` fits)."""

    @property
    def bundle(self) -> Any: ...

    def check_compatible(self, bundle: Any) -> None: ...

    def swap(self, bundle: Any) -> None: ...


class BundleSource(Protocol):
    """What the swapper needs of the bundle receiver (``BundleReceiver`` fits).

    ``answer`` never raises: it returns the accepted bundle (with ``.bundle``, ``.path`` and
    ``.header``) or None, and the reply for the trainer (a ``BundleStatus``: ``version``,
    ``accepted``, ``code``, ``reason``, ``resend``).
    """

    config: Any
    key: Any

    def answer(self, message: bytes, *, current_version: int, running: Any, protect: tuple = (),
               check: Callable[[Any], None] | None = None) -> tuple[Any | None, Any]: ...


def _nothing(*_args: Any) -> None:
    return None


class PolicySwapper:
    """Hot swaps for one configured controller: request, validate on a worker, install on ``take``.

    Args:
        controller: the running controller (``bundle``, ``check_compatible``, ``swap``).
        load: loads, validates and warms up a policy file (``load_bundle`` with the node's engine).
        active_path: the file the controller runs now.
        receiver: checks streamed bundles (None: bundle messages are ignored).
        reply: called with the receiver's reply to every bundle message (the node publishes it).
        log: called with (level, line) for the node's logger.
        on_reject: called with the new status when a request is rejected (the node publishes its
            diagnostics at once). A callback that raises is logged, never raised on the worker.
    """

    def __init__(self, controller: Swappable, load: Callable[[str], Any], *, active_path: str = "",
                 receiver: BundleSource | None = None, reply: Callable[[Any], None] = _nothing,
                 log: Callable[[Level, str], None] = _nothing,
                 on_reject: Callable[[SwapStatus], None] = _nothing) -> None:
        self._controller = controller
        self._load = load
        self._receiver = receiver
        self._reply, self._log, self._on_reject = reply, log, on_reject
        self.active_path = active_path
        self._lock = threading.Lock()  # guards everything below except the lock-free peek in take()
        self.pending: Any = None  # validated and warmed up, waiting for the next tick
        self._queued: tuple[str, Any] | None = None  # ("path", str) or ("bundle", bytes): newest wins
        self._working = False
        self._thread: threading.Thread | None = None
        self._status = SwapStatus()
        self._stream = StreamStatus(signed_only=bool(receiver is not None and receiver.config.require_signature),
                                    key_loaded=receiver is not None and receiver.key is not None)

    # ---- requests (any thread) ----------------------------------------------------------------
    def request_path(self, path: str) -> bool:
        """Swap to the file at ``path``; False (nothing to do) if it is the one running."""
        if path == self.active_path:
            return False
        self._say(Level.OK, f"hot-swap requested: {path}")
        self._queue(("path", path))
        return True

    def request_bundle(self, message: bytes) -> bool:
        """Check a streamed bundle message and swap to it if it passes; False without a receiver."""
        if self._receiver is None:
            return False
        self._queue(("bundle", message))
        return True

    def _queue(self, item: tuple[str, Any]) -> None:
        with self._lock:
            self._queued = item
            if self._working:  # the running worker picks it up before it ends (it checks under this lock)
                return
            self._working = True
            self._thread = threading.Thread(target=self._work, name="policy-swap", daemon=True)
            self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the worker is idle (tests and tools, never the control path); True if it is."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return not self._working

    # ---- the worker ----------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._lock:
                item, self._queued = self._queued, None
                if item is None:
                    self._working = False
                    return
            try:
                kind, what = item
                bundle = self._check_bundle(what) if kind == "bundle" else self._check_path(what)
            except Exception as exc:  # noqa: BLE001 - a bug here must not end the worker with a request queued
                self._reject(str(item[1]) if item[0] == "path" else "bundle", RejectCode.INVALID_ARTIFACT,
                             f"{type(exc).__name__}: {exc}")
                continue
            if bundle is None:
                continue
            with self._lock:
                self.pending = bundle
                self._status = SwapStatus(SwapState.VALIDATED, str(bundle.path), int(bundle.version), "",
                                          f"{bundle.path} v{bundle.version} validated, swapping at the next tick")

    def _check_path(self, path: str) -> Any:
        try:
            bundle = keep_lite(self._load(path), self._controller.bundle)  # validates and warms up every tier
        except Exception as exc:  # noqa: BLE001 - a bad artifact is reported, never raised
            self._reject(path, RejectCode.INVALID_ARTIFACT, str(exc))
            return None
        try:
            self._controller.check_compatible(bundle)
        except ValueError as exc:
            self._reject(path, RejectCode.CONTRACT_MISMATCH, str(exc), int(bundle.version))
            return None
        return bundle

    def _current_version(self) -> int:
        """The version a new bundle must beat: running, pending or already accepted, whichever is newest."""
        with self._lock:
            pending, accepted = self.pending, self._stream.version
        return max(int(self._controller.bundle.version), accepted, int(pending.version) if pending is not None else 0)

    def _check_bundle(self, message: bytes) -> Any:
        current, running = self._current_version(), self._controller.bundle
        got, reply = self._receiver.answer(message, current_version=current, running=running,
                                           protect=(self.active_path,),
                                           check=lambda b: self._controller.check_compatible(keep_lite(b, running)))
        self._call(self._reply, reply)
        stream = self._stream
        if got is None:
            code, version = str(reply.code), reply.version
            if code == RejectCode.DUPLICATE:
                self._say(Level.OK, reply.reason)
                self._set_stream(level=Level.OK, message=f"v{version} already running", last_code=code,
                                 resend_requested=None)
                return None
            self._set_stream(level=Level.ERROR, message=f"rejected v{version}: [{code}] {reply.reason}",
                             last_code=code, resend_requested=bool(reply.resend))
            self._reject(f"bundle v{version}", code, f"[{code}] {reply.reason}", int(version or 0))
            return None
        header = got.header
        self._set_stream(level=Level.OK, message=f"accepted v{header.version}", version=max(stream.version,
                         int(header.version)), last_code="ok", resend_requested=None)
        self._say(Level.OK, f"bundle v{header.version} accepted ({header.total_len} bytes, "
                            f"{header.n_chunks} chunks) -> {got.path}")
        return keep_lite(got.bundle, running)

    def _set_stream(self, **changes: Any) -> None:
        with self._lock:
            self._stream = replace(self._stream, **changes)

    def _reject(self, path: str, code: str, reason: str, version: int = 0) -> None:
        status = SwapStatus(SwapState.REJECTED, path, version, str(code), f"rejected {path}: {reason}")
        with self._lock:
            self._status = status
        self._say(Level.ERROR, f"hot-swap rejected, keeping {self.active_path}: {reason}")
        self._call(self._on_reject, status)

    # ---- the control thread ---------------------------------------------------------------------
    def take(self) -> Any:
        """Install the validated bundle, if one waits; return it (None: nothing installed).

        Called by the control thread between ticks. Lock-free when nothing is pending.
        """
        if self.pending is None:  # unlocked read: the common case costs nothing
            return None
        with self._lock:
            bundle, self.pending = self.pending, None
        if bundle is None:
            return None
        try:
            self._controller.swap(bundle)
        except ValueError as exc:
            self._reject(str(bundle.path), RejectCode.CONTRACT_MISMATCH, str(exc), int(bundle.version))
            return None
        self.active_path = str(bundle.path)
        kept = getattr(bundle, "lite_from", 0)
        note = f", lite tier kept from v{kept}" if kept else ""
        with self._lock:
            self._status = SwapStatus(SwapState.SWAPPED, self.active_path, int(bundle.version), "",
                                      f"swapped to {bundle.path} v{bundle.version}{note}")
        self._say(Level.OK, f"hot-swapped to {bundle.path} v{bundle.version} (soft start{note})")
        return bundle

    def drop_pending(self) -> None:
        """Forget a validated bundle not yet installed (cleanup)."""
        with self._lock:
            self.pending = None

    # ---- state ----------------------------------------------------------------------------------
    def status(self) -> SwapStatus:
        with self._lock:
            return self._status

    def stream_status(self) -> StreamStatus:
        with self._lock:
            return self._stream

    def _say(self, level: Level, line: str) -> None:
        try:
            self._log(level, line)
        except Exception:  # noqa: BLE001 - logging must never stop a swap
            pass

    def _call(self, fn: Callable[[Any], None], arg: Any) -> None:
        try:
            fn(arg)
        except Exception as exc:  # noqa: BLE001 - e.g. publishers torn down by a cleanup during a swap
            self._say(Level.WARN, f"swap callback {getattr(fn, '__name__', fn)} failed: {type(exc).__name__}: {exc}")
