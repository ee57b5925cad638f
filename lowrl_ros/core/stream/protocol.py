"""The wire protocol that carries a policy bundle from the trainer to the robot (no ROS, no torch).

docs/architecture.md, "Policy artifacts": "chunked if large, each chunk checksummed, the whole
SHA-256-checked and signed (HMAC with a key file from config); versions are monotonic". One
bundle version travels as ONE message (so a latched, depth-1 topic hands a late joiner the whole of the newest bundle),
laid out as:

    header  = MAGIC | proto u16 | version u64 | parent u64 | total_len u64 | chunk_size u32
              | n_chunks u32 | sha256(bundle) 32 B | hmac-sha256(key, header_without_hmac) 32 B
    chunk_i = index u32 | length u32 | crc32(payload) u32 | payload        (i = 0 .. n_chunks-1)

The HMAC covers the header, and the header carries the SHA-256 of the whole bundle, so the
signature vouches for every byte: a chunk that is corrupted fails its CRC (which says *which*
chunk to re-send), a chunk that is missing shows as a gap, and a bundle reassembled from chunks
that all pass their CRCs but do not add up fails the SHA-256. Checks run cheapest-first and the
signature is checked before any payload is trusted.

Every rejection is a ``BundleRejected`` with a machine-readable ``code`` (for the robot's status
reply and diagnostics) and a message that says what to do about it.

Insecure mode (a bench or a simulator, never a robot near people): a sender without a key writes an
all-zero HMAC (``UNSIGNED_HMAC``). A receiver with ``require_signature=True`` rejects such a
message with code ``unsigned`` whatever key it holds, so an insecure trainer can only reach a robot
that was itself configured insecure. Integrity (CRCs, SHA-256) is checked either way.

The robot answers each message with a :class:`BundleStatus` (JSON on the status topic); codes in
``RESEND_CODES`` mean "damaged in transit, send it again".
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import struct
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MAGIC = b"LWRB"
PROTOCOL = 1
_HEADER = struct.Struct("<4sHQQQII32s")  # magic, proto, version, parent, total, chunk_size, n, sha
_CHUNK = struct.Struct("<III")  # index, length, crc32
HMAC_LEN = 32
MIN_KEY_BYTES = 16
DEFAULT_CHUNK_SIZE = 64 * 1024
NO_PARENT = 0  # versions start at 1, so 0 means "no parent"
UNSIGNED_HMAC = bytes(HMAC_LEN)  # what an insecure sender writes instead of a signature
# Damage a re-send can repair (the bytes were hurt on the way, not made wrong by the sender).
RESEND_CODES = frozenset({"corrupt_chunk", "missing_chunk", "truncated", "length_mismatch"})


class BundleRejected(ValueError):
    """A bundle that must not reach the control path. ``code`` names the check that failed."""

    def __init__(self, code: str, message: str, *, missing: tuple[int, ...] = (), corrupt: tuple[int, ...] = ()):
        super().__init__(message)
        self.code = code
        self.missing = missing  # chunk indices absent from the message
        self.corrupt = corrupt  # chunk indices whose CRC failed


@dataclass(frozen=True)
class BundleHeader:
    """The signed facts about one bundle version."""

    version: int
    parent_version: int
    total_len: int
    chunk_size: int
    n_chunks: int
    sha256: bytes


def load_key(path: str | Path) -> bytes:
    """Read an HMAC key file (raw bytes; a hex string is accepted too).

    Raises:
        ValueError: the file is missing, too short, or readable by everyone, with how to fix it.
    """
    p = Path(path).expanduser()
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ValueError(
            f"cannot read the bundle signing key {p}: {exc.strerror}. Create one with "
            f"`python -c \"import secrets; print(secrets.token_hex(32))\" > {p} && chmod 600 {p}` "
            "and give the same file to the trainer and the robot"
        ) from exc
    text = raw.strip()
    try:
        key = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        key = raw
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"bundle signing key {p} holds {len(key)} bytes; use at least {MIN_KEY_BYTES} "
                         "(32 random bytes, e.g. secrets.token_hex(32))")
    if os.name == "posix" and p.stat().st_mode & stat.S_IROTH:
        raise ValueError(f"bundle signing key {p} is readable by every user; run `chmod 600 {p}`")
    return key


def _sign(key: bytes, header: bytes) -> bytes:
    return hmac.new(key, header, hashlib.sha256).digest()


def encode_bundle(bundle: bytes, version: int, key: bytes | None, *, parent_version: int | None = None,
                  chunk_size: int = DEFAULT_CHUNK_SIZE) -> bytes:
    """Frame and sign ``bundle`` (the bytes of a .lowrl or .onnx file) as one wire message.

    Args:
        bundle: the artifact or bundle file's bytes.
        version: this bundle's version, >= 1; the robot accepts only versions above its current one.
        key: the HMAC-SHA256 key shared by trainer and robot (``load_key``); None sends the
            message unsigned (``UNSIGNED_HMAC``), which only an insecure robot accepts.
        parent_version: the version this one was derived from (fine-tuning lineage), if any.
        chunk_size: payload bytes per chunk, >= 1.
    """
    if version < 1:
        raise ValueError(f"bundle version must be >= 1, got {version}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1 byte, got {chunk_size}")
    if key is not None and len(key) < MIN_KEY_BYTES:
        raise ValueError(f"signing key too short ({len(key)} bytes, need >= {MIN_KEY_BYTES})")
    n_chunks = max(1, -(-len(bundle) // chunk_size))
    header = _HEADER.pack(MAGIC, PROTOCOL, version, parent_version or NO_PARENT, len(bundle), chunk_size,
                          n_chunks, hashlib.sha256(bundle).digest())
    parts = [header, UNSIGNED_HMAC if key is None else _sign(key, header)]
    for i in range(n_chunks):
        payload = bundle[i * chunk_size:(i + 1) * chunk_size]
        parts.append(_CHUNK.pack(i, len(payload), zlib.crc32(payload)))
        parts.append(payload)
    return b"".join(parts)


def read_header(message: bytes) -> BundleHeader:
    """Parse the header without checking the signature (for logging what arrived)."""
    if len(message) < _HEADER.size + HMAC_LEN:
        raise BundleRejected("truncated", f"bundle message is {len(message)} bytes, shorter than its header")
    magic, proto, version, parent, total, chunk_size, n_chunks, sha = _HEADER.unpack_from(message)
    if magic != MAGIC:
        raise BundleRejected("bad_magic", "not a lowrl bundle message (wrong magic bytes); "
                                          "is the publisher a lowrl trainer_node?")
    if proto != PROTOCOL:
        raise BundleRejected("bad_protocol", f"bundle protocol {proto}, this robot speaks {PROTOCOL}; "
                                             "update lowrl_ros on the robot or the trainer so they match")
    return BundleHeader(version, parent, total, chunk_size, n_chunks, sha)


def is_signed(message: bytes) -> bool:
    """True when the message carries a signature (not the insecure all-zero HMAC)."""
    return message[_HEADER.size:_HEADER.size + HMAC_LEN] != UNSIGNED_HMAC


def decode_bundle(message: bytes, key: bytes | None, *, current_version: int = 0,
                  require_signature: bool = True) -> tuple[BundleHeader, bytes]:
    """Check and reassemble one wire message; return its header and the bundle bytes.

    Args:
        message: the bytes received.
        key: the HMAC key (``load_key``), or None on a robot that has none.
        current_version: the version running now; only a strictly newer version is accepted.
        require_signature: False only on an insecure robot: then an unsigned message, or a signed
            one the robot holds no key for, is accepted on its CRCs and SHA-256 alone. A signed
            message is verified whenever a key is present.

    Raises:
        BundleRejected: with ``code`` one of truncated, bad_magic, bad_protocol, unsigned, no_key,
            bad_signature, old_version, bad_chunk_size, corrupt_chunk, missing_chunk,
            length_mismatch, bad_sha256.
    """
    header = read_header(message)
    head_bytes = message[:_HEADER.size]
    signature = message[_HEADER.size:_HEADER.size + HMAC_LEN]
    if signature == UNSIGNED_HMAC:
        if require_signature:
            raise BundleRejected("unsigned", f"bundle v{header.version} is unsigned (the trainer runs insecure); "
                                             "give the trainer the robot's key_file, or set require_signature:=false "
                                             "on the robot (bench only)")
    elif key is None:
        if require_signature:
            raise BundleRejected("no_key", f"bundle v{header.version} is signed but this robot has no key_file; "
                                           "set key_file to the trainer's key (chmod 600)")
    elif not hmac.compare_digest(signature, _sign(key, head_bytes)):
        raise BundleRejected("bad_signature", f"bundle v{header.version} signature does not verify: the sender "
                                              "used another key (check the key files match) or the header was altered")
    if header.version <= current_version:
        raise BundleRejected("old_version", f"bundle v{header.version} is not newer than the running "
                                            f"v{current_version}; versions must increase")
    if header.chunk_size < 1 or header.n_chunks < 1:
        raise BundleRejected("bad_chunk_size", f"bundle v{header.version} declares {header.n_chunks} chunks of "
                                               f"{header.chunk_size} bytes")
    chunks: dict[int, bytes] = {}
    corrupt: list[int] = []
    pos = _HEADER.size + HMAC_LEN
    while pos < len(message):
        if pos + _CHUNK.size > len(message):
            break  # a torn tail: whatever chunk it held counts as missing below
        index, length, crc = _CHUNK.unpack_from(message, pos)
        pos += _CHUNK.size
        payload = message[pos:pos + length]
        pos += length
        if index >= header.n_chunks or len(payload) != length or zlib.crc32(payload) != crc:
            if index < header.n_chunks:
                corrupt.append(index)
            continue
        chunks[index] = payload
    if corrupt:
        raise BundleRejected("corrupt_chunk", f"bundle v{header.version}: chunk(s) {sorted(set(corrupt))} of "
                                              f"{header.n_chunks} failed their CRC; asking the trainer to re-send",
                             corrupt=tuple(sorted(set(corrupt))))
    missing = tuple(i for i in range(header.n_chunks) if i not in chunks)
    if missing:
        raise BundleRejected("missing_chunk", f"bundle v{header.version}: chunk(s) {list(missing)} of "
                                              f"{header.n_chunks} missing; asking the trainer to re-send",
                             missing=missing)
    bundle = b"".join(chunks[i] for i in range(header.n_chunks))
    if len(bundle) != header.total_len:
        raise BundleRejected("length_mismatch", f"bundle v{header.version}: {len(bundle)} bytes reassembled, "
                                                f"header promised {header.total_len}")
    if not hmac.compare_digest(hashlib.sha256(bundle).digest(), header.sha256):
        raise BundleRejected("bad_sha256", f"bundle v{header.version}: SHA-256 of the reassembled bytes does not "
                                           "match the signed header; the chunks were tampered with")
    return header, bundle


@dataclass(frozen=True)
class BundleStatus:
    """The robot's answer to one bundle message (JSON on ``/lowrl/policy_bundle/status``).

    Attributes:
        version: the version the message announced (None if its header was unreadable).
        accepted: True once the bundle passed every check and is handed to the hot swap.
        code: "ok", or the BundleRejected code.
        reason: human-readable, says what to do.
        missing, corrupt: chunk indices to re-send.
        resend: the robot asks for the same message again (damage in transit).
        running_version: the highest version the robot runs or has accepted.
    """

    version: int | None
    accepted: bool
    code: str = "ok"
    reason: str = ""
    missing: tuple[int, ...] = field(default_factory=tuple)
    corrupt: tuple[int, ...] = field(default_factory=tuple)
    resend: bool = False
    running_version: int = 0

    def to_json(self) -> str:
        d = asdict(self)
        d["missing"], d["corrupt"] = list(self.missing), list(self.corrupt)
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "BundleStatus":
        """Parse a status reply; ValueError (with the text) if it is not one."""
        try:
            d: Any = json.loads(text)
            if not isinstance(d, dict) or not isinstance(d.get("accepted"), bool):
                raise ValueError("no boolean 'accepted'")
            version = d.get("version")
            return cls(version=None if version is None else int(version), accepted=d["accepted"],
                       code=str(d.get("code", "")), reason=str(d.get("reason", "")),
                       missing=tuple(int(i) for i in d.get("missing") or ()),
                       corrupt=tuple(int(i) for i in d.get("corrupt") or ()),
                       resend=bool(d.get("resend", False)), running_version=int(d.get("running_version") or 0))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"not a bundle status reply ({exc}): {text[:200]!r}") from None

    @classmethod
    def rejected(cls, exc: BundleRejected, version: int | None, running_version: int) -> "BundleStatus":
        return cls(version=version, accepted=False, code=exc.code, reason=str(exc), missing=tuple(exc.missing),
                   corrupt=tuple(exc.corrupt), resend=exc.code in RESEND_CODES, running_version=running_version)
