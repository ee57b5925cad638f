"""The robot's end of bundle streaming: from received bytes to a validated, warmed-up bundle (no ROS, no torch).

One call, :meth:`BundleReceiver.receive`, runs every check of docs/architecture.md ("Policy
artifacts"): "the robot validates (signature, checksum, contract, finite weights, parity on a probe
set)", cheapest first:

1. ``decode_bundle``: signature, version newer than the running one, chunk CRCs, SHA-256;
2. the bytes go to a temporary file in ``receive_dir`` (fsync'd), so nothing half-written is
   ever loaded and a power cut leaves at worst a ``.tmp`` file, never a bad ``v*.lowrl``;
3. every float initializer of every tier must be finite (checked on the raw ONNX, so a NaN shows
   as its own code, ``nonfinite_weights``, before anything is built from it);
4. ``load_bundle``: the artifact's own validation (contract, shapes, graph) and warm-up;
5. the bundle's version is the one the signed header announced; its I/O contract is the running
   policy's (same observation/action names, sizes and limits), else ``contract_mismatch``;
6. parity on a probe set: each tier's engine against the float64 reference of its own weights,
   actions finite and within the limits.

Only then is the temporary file renamed (atomically) to ``v<version>-<sha8>.<ext>`` and the
loaded bundle returned for the hot swap. Every failure is a ``BundleRejected`` with a code; the
caller keeps running what it runs.

This runs on the policy node's swap worker thread, never on the control path.
"""
from __future__ import annotations

import io
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import numpy_helper

from lowrl_ros.core.config import field
from lowrl_ros.core.runtime.artifact import ArtifactError, PolicyContract, parse_artifact
from lowrl_ros.core.runtime.bundle import MANIFEST, PolicyBundle, is_bundle_file, load_bundle
from lowrl_ros.core.runtime.engines import probe_observations
from lowrl_ros.core.runtime.swap import RejectCode
from lowrl_ros.core.stream.protocol import BundleHeader, BundleRejected, BundleStatus, decode_bundle, read_header

_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)


@dataclass(frozen=True)
class ReceiverConfig:
    """The robot's bundle-receiving settings (policy node parameters of the same names; ``keep`` is keep_bundles)."""

    receive_dir: str = field("~/.lowrl/received_bundles", "where accepted bundles are kept (v<version>-<sha8>.lowrl)")
    # Only a bench robot sets this False (then the trainer may run insecure).
    require_signature: bool = field(True, "reject unsigned or unverifiable bundles (false only on a bench)")
    keep: int = field(3, "accepted bundle files kept in receive_dir (older ones are deleted, never the running one)",
                      range=(1, 1000))
    probe_count: int = field(32, "observations in the parity probe set", range=(1, 10000))
    engine: str = field("auto", "inference engine of a loaded bundle: auto | ort | numpy (as the policy node's)")

    def __post_init__(self) -> None:
        if not self.receive_dir:
            raise ValueError("receive_dir is empty; give a writable directory, e.g. ~/.lowrl/received_bundles")
        if not 1 <= self.keep <= 1000:
            raise ValueError(f"keep {self.keep} must be 1..1000 (bundle files kept in receive_dir)")
        if not 1 <= self.probe_count <= 10000:
            raise ValueError(f"probe_count {self.probe_count} must be 1..10000")
        if self.engine not in ("auto", "ort", "numpy"):
            raise ValueError(f"engine {self.engine!r} is unknown; use auto, ort or numpy")

    def warnings(self, *, key_loaded: bool, topic: str = "the bundle topic") -> list[str]:
        """What an operator must be told at start about these settings (one line each).

        Args:
            key_loaded: whether the robot holds the trainer's key.
            topic: the bundle topic, named in the message.
        """
        if not self.require_signature:
            return ["require_signature is false: UNSIGNED bundles will be accepted "
                    "(bench only; anyone on the network can replace the policy)"]
        if not key_loaded:
            return [f"no key_file: bundles on {topic} will be rejected "
                    "(set key_file to the trainer's key to accept streamed policies)"]
        return []


@dataclass
class Received:
    """An accepted bundle: its signed header, where it lies, and the loaded, warmed-up bundle."""

    header: BundleHeader
    path: Path
    bundle: PolicyBundle


def _tier_blobs(data: bytes) -> dict[str, bytes]:
    """tier name -> ONNX bytes (a plain artifact is tier "full"); load_bundle validates the rest."""
    if not is_bundle_file(data):
        return {"full": data}
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        tiers = json.loads(zf.read(MANIFEST))["tiers"]
        return {name: zf.read(entry["file"]) for name, entry in tiers.items()}
    except (zipfile.BadZipFile, KeyError, TypeError, json.JSONDecodeError, OSError, EOFError) as exc:
        raise BundleRejected("invalid_artifact", f"the bundle is not a readable .lowrl zip ({exc}); "
                                                 "rebuild it with `lowrl compress` or save_bundle()") from None


def _check_finite(version: int, blobs: dict[str, bytes]) -> None:
    for tier, blob in blobs.items():
        try:
            model = onnx.load_from_string(blob)
        except Exception as exc:  # noqa: BLE001 - protobuf raises several types on damage
            raise BundleRejected("invalid_artifact", f"bundle v{version} tier {tier!r} is not readable ONNX "
                                                     f"({type(exc).__name__}); re-export it") from None
        for init in model.graph.initializer:
            if init.data_type in _FLOAT_TYPES and not np.isfinite(numpy_helper.to_array(init)).all():
                raise BundleRejected("nonfinite_weights", f"bundle v{version} tier {tier!r}: initializer "
                                                          f"{init.name!r} holds NaN or Inf; the training run "
                                                          "diverged: retrain or pick an earlier checkpoint")


def _contract_problem(new: PolicyContract, running: PolicyContract) -> str:
    if new.obs_dim != running.obs_dim or new.action_dim != running.action_dim:
        return (f"it maps {new.obs_dim} observations to {new.action_dim} actions, the running policy "
                f"{running.obs_dim} to {running.action_dim}")
    if new.obs_names != running.obs_names:
        return f"observation names {list(new.obs_names)} differ from the running {list(running.obs_names)}"
    if new.action_names != running.action_names:
        return f"action names {list(new.action_names)} differ from the running {list(running.action_names)}"
    if new.action_low != running.action_low or new.action_high != running.action_high:
        return (f"action limits {list(new.action_low)}..{list(new.action_high)} differ from the running "
                f"{list(running.action_low)}..{list(running.action_high)}")
    return ""


class BundleReceiver:
    """Validate received bundle messages into bundles ready for the hot swap (see the module docstring)."""

    def __init__(self, config: ReceiverConfig, key: bytes | None) -> None:
        self.config = config
        self.key = key
        self.dir = Path(config.receive_dir).expanduser()

    def receive(self, message: bytes, *, current_version: int, running: PolicyContract,
                running_sha256: str = "", protect: tuple[str | Path, ...] = ()) -> Received:
        """Check ``message`` completely; return the accepted bundle or raise BundleRejected.

        Args:
            message: the wire bytes (``encode_bundle``).
            current_version: the highest version running or accepted; only newer ones pass.
            running: the running policy's contract; the new one must have the same I/O.
            running_sha256: the running bundle's SHA-256 (hex): a re-delivery of it is rejected
                with the harmless code ``duplicate`` instead of ``old_version``.
            protect: files never deleted by the clean-up of old received bundles (the running one).
        """
        try:
            header, data = decode_bundle(message, self.key, current_version=current_version,
                                         require_signature=self.config.require_signature)
        except BundleRejected as exc:
            if exc.code == "old_version" and running_sha256 \
                    and read_header(message).sha256.hex() == running_sha256:
                raise BundleRejected("duplicate", f"bundle v{read_header(message).version} is the one already "
                                                  "running (a latched re-delivery); nothing to do") from None
            raise
        _check_finite(header.version, _tier_blobs(data))
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BundleRejected("receive_dir", f"cannot create receive_dir {self.dir}: {exc.strerror}; "
                                                "set receive_dir to a writable directory") from None
        ext = "lowrl" if is_bundle_file(data) else "onnx"
        final = self.dir / f"v{header.version:06d}-{header.sha256.hex()[:8]}.{ext}"
        tmp = self.dir / f".incoming-v{header.version}-{os.getpid()}.tmp"
        try:
            self._write(tmp, data)
            bundle = self._validate(tmp, header, running)
            os.replace(tmp, final)  # atomic: only validated bytes ever carry a v*.lowrl name
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        bundle.path = final
        for policy in bundle.policies.values():
            policy.path = final
        self._clean_up({Path(p).resolve() for p in (*protect, final)})
        return Received(header, final, bundle)

    def answer(self, message: bytes, *, current_version: int, running: PolicyBundle,
               protect: tuple[str | Path, ...] = (),
               check: Callable[[PolicyBundle], None] | None = None) -> tuple[Received | None, BundleStatus]:
        """:meth:`receive`, then ``check``, never raising: the result and the reply for the trainer.

        Any failure that is not a BundleRejected (a bug, ``check`` refusing the bundle) is answered
        as ``invalid_artifact`` with its type and text, so the trainer always gets a coded reply
        and the caller keeps running what it runs.

        Returns:
            (the accepted bundle, its ``ok`` reply), or (None, the rejection reply).
        """
        try:
            version: int | None = read_header(message).version
        except BundleRejected:
            version = None
        try:
            got = self.receive(message, current_version=current_version, running=running.contract,
                               running_sha256=running.sha256, protect=protect)
            if check is not None:
                check(got.bundle)
        except Exception as exc:  # noqa: BLE001 - whatever went wrong, the running policy keeps acting
            if not isinstance(exc, BundleRejected):
                exc = BundleRejected(RejectCode.INVALID_ARTIFACT, f"{type(exc).__name__}: {exc}")
            return None, BundleStatus.rejected(exc, version, current_version)
        v = got.header.version
        return got, BundleStatus(version=v, accepted=True, code="ok",
                                 reason=f"validated, swapping at the next tick ({got.path})", running_version=v)

    def _write(self, tmp: Path, data: bytes) -> None:
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())  # the rename below must never publish a file still in the page cache
        except OSError as exc:
            raise BundleRejected("receive_dir", f"cannot write {tmp}: {exc.strerror}; free disk space or set "
                                                "receive_dir to a writable directory") from None

    def _validate(self, path: Path, header: BundleHeader, running: PolicyContract) -> PolicyBundle:
        v = header.version
        try:
            bundle = load_bundle(path, engine=self.config.engine)
        except ArtifactError as exc:
            raise BundleRejected("invalid_artifact", f"bundle v{v}: {exc}") from None
        if bundle.version != v:
            raise BundleRejected("version_mismatch", f"the signed header says v{v} but the bundle's contract says "
                                                     f"v{bundle.version}; the trainer must publish the version "
                                                     "the bundle carries")
        problem = _contract_problem(bundle.contract, running)
        if problem:
            raise BundleRejected("contract_mismatch", f"bundle v{v} does not fit this robot: {problem}; a hot "
                                                      "swap keeps the I/O contract (train for this robot's "
                                                      "observations and actions)")
        blobs = _tier_blobs(path.read_bytes())
        for tier, policy in bundle.policies.items():
            self._parity(v, tier, policy, parse_artifact(blobs[tier], f"v{v}!{tier}"))
        return bundle

    def _parity(self, version: int, tier: str, policy, parsed) -> None:
        """The serving engine against the float64 reference of the same weights, on probe observations.

        The probes (engines.probe_observations) reach past the contract's obs_clip on every fourth row,
        and the reference applies the whole contract (clip, activations, action transform), so a graph
        that drops or mis-writes any of them is rejected here.
        """
        c = parsed.contract
        probes = probe_observations(c, n=self.config.probe_count, seed=version)
        low, high = np.array(c.action_low), np.array(c.action_high)
        span = high - low
        # int8 ORT also quantizes activations (dynamic uint8); the numpy engine and the reference do not.
        tol = (0.1 if policy.int8 else 1e-3) * span
        for obs in probes:
            action = policy.act(obs)
            if not (np.isfinite(action).all() and (action >= low).all() and (action <= high).all()):
                raise BundleRejected("parity", f"bundle v{version} tier {tier!r} gave action {action.tolist()} "
                                               "(non-finite or outside the limits) on a probe observation")
            diff = np.abs(action - parsed.reference_action(obs))  # a residual head included
            if (diff > tol).any():
                raise BundleRejected("parity", f"bundle v{version} tier {tier!r}: engine {policy.engine} and "
                                               f"the weights' reference differ by {diff.max():.4g} > "
                                               f"{tol.max():.4g}; the graph disagrees with its weights: re-export")

    def _clean_up(self, protect: set[Path]) -> None:
        """Keep the newest ``keep`` accepted files (by version), and never a protected one."""
        files = sorted(self.dir.glob("v*-*.*"), key=lambda p: p.name, reverse=True)
        for old in files[self.config.keep:]:
            if old.resolve() not in protect:
                old.unlink(missing_ok=True)
