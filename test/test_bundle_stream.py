"""The bundle wire protocol: every way a message can be wrong is rejected with its own code."""
from __future__ import annotations

import os
import struct

import pytest

from lowrl_ros.core.bundle_stream import (BundleRejected, decode_bundle, encode_bundle, load_key,
                                          read_header)

KEY = bytes(range(32))
BUNDLE = os.urandom(10_000)


def _chunks(message: bytes):
    """Yield (offset, index, length) of each chunk (test-side parser, independent of the decoder)."""
    pos = 4 + 2 + 8 + 8 + 8 + 4 + 4 + 32 + 32
    while pos < len(message):
        index, length, _ = struct.unpack_from("<III", message, pos)
        yield pos, index, length
        pos += 12 + length


def test_round_trip_many_chunks():
    msg = encode_bundle(BUNDLE, 3, KEY, parent_version=2, chunk_size=1000)
    header, data = decode_bundle(msg, KEY, current_version=2)
    assert data == BUNDLE
    assert (header.version, header.parent_version, header.n_chunks) == (3, 2, 10)


def test_single_chunk_and_empty_tail():
    msg = encode_bundle(b"x" * 5, 1, KEY, chunk_size=5)
    assert decode_bundle(msg, KEY)[1] == b"x" * 5


def test_corrupt_chunk_names_the_chunk():
    msg = bytearray(encode_bundle(BUNDLE, 3, KEY, chunk_size=1000))
    offsets = list(_chunks(bytes(msg)))
    pos, index, _ = offsets[4]
    msg[pos + 12 + 7] ^= 0xFF
    with pytest.raises(BundleRejected) as e:
        decode_bundle(bytes(msg), KEY)
    assert e.value.code == "corrupt_chunk" and e.value.corrupt == (index,)


def test_missing_chunk_names_the_chunk():
    msg = encode_bundle(BUNDLE, 3, KEY, chunk_size=1000)
    pos, index, length = list(_chunks(msg))[6]
    cut = msg[:pos] + msg[pos + 12 + length:]
    with pytest.raises(BundleRejected) as e:
        decode_bundle(cut, KEY)
    assert e.value.code == "missing_chunk" and e.value.missing == (6,)


def test_wrong_key_and_tampered_header_fail_the_signature():
    msg = encode_bundle(BUNDLE, 3, KEY)
    with pytest.raises(BundleRejected) as e:
        decode_bundle(msg, bytes(32))
    assert e.value.code == "bad_signature"
    tampered = bytearray(msg)
    tampered[6] ^= 1  # the version field
    with pytest.raises(BundleRejected) as e:
        decode_bundle(bytes(tampered), KEY)
    assert e.value.code == "bad_signature"


def test_recomputed_crcs_cannot_hide_tampering():
    """An attacker who rewrites a chunk and its CRC still fails the signed SHA-256."""
    import zlib
    msg = bytearray(encode_bundle(BUNDLE, 3, KEY, chunk_size=1000))
    pos, index, length = list(_chunks(bytes(msg)))[2]
    payload = bytes(length)
    msg[pos:pos + 12 + length] = struct.pack("<III", index, length, zlib.crc32(payload)) + payload
    with pytest.raises(BundleRejected) as e:
        decode_bundle(bytes(msg), KEY)
    assert e.value.code == "bad_sha256"


@pytest.mark.parametrize("current", [3, 4])
def test_old_or_same_version_is_refused(current):
    msg = encode_bundle(BUNDLE, 3, KEY)
    with pytest.raises(BundleRejected) as e:
        decode_bundle(msg, KEY, current_version=current)
    assert e.value.code == "old_version"


def test_garbage_and_truncation():
    with pytest.raises(BundleRejected) as e:
        decode_bundle(b"hello", KEY)
    assert e.value.code == "truncated"
    with pytest.raises(BundleRejected) as e:
        decode_bundle(b"XXXX" + bytes(200), KEY)
    assert e.value.code == "bad_magic"
    msg = encode_bundle(BUNDLE, 3, KEY, chunk_size=1000)
    with pytest.raises(BundleRejected) as e:
        decode_bundle(msg[:-500], KEY)
    assert e.value.code in ("corrupt_chunk", "missing_chunk")
    assert read_header(msg).total_len == len(BUNDLE)


def test_encode_validates_its_arguments():
    with pytest.raises(ValueError, match="version"):
        encode_bundle(b"x", 0, KEY)
    with pytest.raises(ValueError, match="chunk_size"):
        encode_bundle(b"x", 1, KEY, chunk_size=0)
    with pytest.raises(ValueError, match="key"):
        encode_bundle(b"x", 1, b"short")


def test_key_file_rules(tmp_path):
    good = tmp_path / "key"
    good.write_text(KEY.hex() + "\n")
    good.chmod(0o600)
    assert load_key(good) == KEY
    with pytest.raises(ValueError, match="secrets.token_hex"):
        load_key(tmp_path / "absent")
    short = tmp_path / "short"
    short.write_bytes(b"abc")
    short.chmod(0o600)
    with pytest.raises(ValueError, match="at least"):
        load_key(short)
    good.chmod(0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        load_key(good)
