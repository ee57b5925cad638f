"""The bundle wire protocol: every way a message can be wrong is rejected with its own code."""
from __future__ import annotations

import os
import struct

import pytest

from lowrl_ros.core.stream.protocol import (BundleRejected, decode_bundle, encode_bundle, load_key,
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


# ---- unsigned (insecure) messages, status replies -------------------------------------------------
def test_unsigned_message_needs_an_insecure_robot():
    from lowrl_ros.core.stream.protocol import UNSIGNED_HMAC, is_signed

    msg = encode_bundle(BUNDLE, 2, None, chunk_size=4096)
    assert not is_signed(msg) and msg[70:102] == UNSIGNED_HMAC
    for key in (KEY, None):
        with pytest.raises(BundleRejected) as e:
            decode_bundle(msg, key)
        assert e.value.code == "unsigned" and "require_signature" in str(e.value)
        assert decode_bundle(msg, key, require_signature=False)[1] == BUNDLE
    signed = encode_bundle(BUNDLE, 2, KEY)
    with pytest.raises(BundleRejected) as e:
        decode_bundle(signed, None)
    assert e.value.code == "no_key"
    with pytest.raises(BundleRejected) as e:  # insecure robot with a key still verifies signatures
        decode_bundle(signed, bytes(range(1, 33)), require_signature=False)
    assert e.value.code == "bad_signature"


def test_status_reply_round_trip_and_resend_codes():
    from lowrl_ros.core.stream.protocol import BundleStatus

    msg = encode_bundle(BUNDLE, 3, KEY, chunk_size=1000)
    pos, _, length = list(_chunks(msg))[1]
    with pytest.raises(BundleRejected) as e:
        decode_bundle(msg[:pos] + msg[pos + 12 + length:], KEY)
    status = BundleStatus.rejected(e.value, 3, running_version=2)
    back = BundleStatus.from_json(status.to_json())
    assert back == status and back.resend and back.missing == (1,) and not back.accepted
    with pytest.raises(BundleRejected) as e:
        decode_bundle(msg, bytes(32))
    assert not BundleStatus.rejected(e.value, 3, 2).resend  # a wrong key is not repaired by re-sending
    with pytest.raises(ValueError, match="not a bundle status"):
        BundleStatus.from_json('{"version": 1}')


# ---- the receiver: every check of the robot side ---------------------------------------------------
def _policy(path, action=0.5, *, version=1, obs=("a", "b", "c"), low=-2.0, int8=False):
    import numpy as np

    from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract, save_artifact

    rng = np.random.default_rng(version)
    w1 = rng.normal(size=(8, len(obs))).astype(np.float32)
    y = np.arctanh((action - low) / (2.0 - low) * 2.0 - 1.0)
    weights = MlpWeights([(w1, np.zeros(8, np.float32)), (np.zeros((1, 8), np.float32), np.array([y], np.float32))])
    contract = PolicyContract(obs_names=obs, action_names=("u",), action_low=(low,), action_high=(2.0,),
                              version=version)
    return save_artifact(path, weights, contract, int8=int8)


def nan_weights(src, dst):
    """An artifact whose first float initializer holds a NaN (save_artifact refuses to write one)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(src))
    for init in model.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT and init.dims and np.prod(init.dims) > 1:
            arr = numpy_helper.to_array(init).copy()
            arr.flat[0] = np.nan
            init.CopyFrom(numpy_helper.from_array(arr, init.name))
            break
    onnx.save(model, str(dst))
    return dst


@pytest.fixture
def receiver(tmp_path):
    from lowrl_ros.core.stream.receiver import BundleReceiver, ReceiverConfig

    running = _policy(tmp_path / "run.onnx", version=1)
    from lowrl_ros.core.runtime.bundle import load_bundle

    return BundleReceiver(ReceiverConfig(receive_dir=str(tmp_path / "rx"), engine="numpy", keep=2), KEY), \
        load_bundle(running, engine="numpy")


def test_receiver_accepts_a_good_bundle_into_a_versioned_file(receiver, tmp_path):
    from lowrl_ros.core.runtime.bundle import save_bundle

    rx, running = receiver
    tiers = {"full": _policy(tmp_path / "f.onnx", -1.0, version=2, int8=True)}
    data = save_bundle(tmp_path / "b.lowrl", tiers).read_bytes()
    got = rx.receive(encode_bundle(data, 2, KEY, chunk_size=999), current_version=1, running=running.contract)
    assert got.path.read_bytes() == data and got.path.name.startswith("v000002-") and got.path.suffix == ".lowrl"
    assert got.bundle.version == 2 and got.bundle.path == got.path
    assert abs(got.bundle.policies["full"].act([1.0, 0.0, 0.0])[0] + 1.0) < 0.05
    assert not list(got.path.parent.glob("*.tmp"))
    with pytest.raises(BundleRejected) as e:  # the same bytes again: harmless
        rx.receive(encode_bundle(data, 2, KEY), current_version=2, running=running.contract,
                   running_sha256=got.bundle.sha256)
    assert e.value.code == "duplicate"
    for v in (3, 4, 5):  # keep=2: older accepted files go, the protected running one stays
        p = _policy(tmp_path / f"p{v}.onnx", version=v)
        rx.receive(encode_bundle(p.read_bytes(), v, KEY), current_version=v - 1, running=running.contract,
                   protect=(got.path,))
    names = sorted(p.name[:7] for p in got.path.parent.iterdir())
    assert names == ["v000002", "v000004", "v000005"]


@pytest.mark.parametrize("case,code", [("nan", "nonfinite_weights"), ("obs_size", "contract_mismatch"),
                                       ("limits", "contract_mismatch"), ("header_version", "version_mismatch"),
                                       ("garbage", "invalid_artifact"), ("old", "old_version")])
def test_receiver_rejects_with_a_code_and_leaves_no_file(receiver, tmp_path, case, code):
    rx, running = receiver
    version = 2
    if case == "nan":
        data = nan_weights(_policy(tmp_path / "g.onnx", version=2), tmp_path / "n.onnx").read_bytes()
    elif case == "obs_size":
        data = _policy(tmp_path / "o.onnx", version=2, obs=("a", "b")).read_bytes()
    elif case == "limits":
        data = _policy(tmp_path / "l.onnx", version=2, low=-1.0).read_bytes()
    elif case == "header_version":
        data, version = _policy(tmp_path / "h.onnx", version=2).read_bytes(), 7
    elif case == "garbage":
        data = b"not onnx at all"
    else:
        data, version = _policy(tmp_path / "h.onnx", version=1).read_bytes(), 1
    with pytest.raises(BundleRejected) as e:
        rx.receive(encode_bundle(data, version, KEY), current_version=1, running=running.contract)
    assert e.value.code == code, str(e.value)
    assert not (tmp_path / "rx").exists() or not list((tmp_path / "rx").iterdir())


# ---- the sender: versions only go up, re-sends are bounded -----------------------------------------
def test_stream_config_validation():
    from lowrl_ros.core.stream.sender import StreamConfig

    with pytest.raises(ValueError, match="key_file"):
        StreamConfig(bundle_path="x.lowrl")
    with pytest.raises(ValueError, match="exactly one"):
        StreamConfig(bundle_path="x", watch_dir="d", insecure=True)
    with pytest.raises(ValueError, match="chunk_size"):
        StreamConfig(bundle_path="x", insecure=True, chunk_size=0)
    assert StreamConfig(watch_dir="d", key_file="k").pattern == "*.lowrl"


def test_sender_publishes_newest_refuses_older_and_bounds_resends(tmp_path):
    import os as _os

    from lowrl_ros.core.stream.protocol import BundleStatus
    from lowrl_ros.core.stream.sender import BundleSender, StreamConfig

    d = tmp_path / "releases"
    sender = BundleSender(StreamConfig(watch_dir=str(d), pattern="*.onnx", key_file="k", max_resends=2), KEY)
    (ev,) = sender.poll()
    assert ev.kind == "unreadable" and "does not exist" in ev.message
    assert sender.poll() == []  # said once
    d.mkdir()
    assert sender.poll() == []
    _policy(d / "v2.onnx", version=2)
    _policy(d / "v3.onnx", version=3)
    (ev,) = sender.poll()
    assert ev.kind == "publish" and ev.version == 3
    assert decode_bundle(ev.wire, KEY)[1] == (d / "v3.onnx").read_bytes()
    assert sender.poll() == []  # nothing changed
    _policy(d / "v1.onnx", version=1)  # an older file appears: refused, never sent
    (ev,) = sender.poll()
    assert ev.kind == "refused" and "v1" in ev.message and sender.published_version == 3
    (d / "bad.onnx").write_bytes(b"half a file")
    (ev,) = sender.poll()
    assert ev.kind == "unreadable"
    resend = BundleStatus(version=3, accepted=False, code="corrupt_chunk", resend=True, corrupt=(0,))
    assert sender.on_status(resend).wire == sender.wire
    assert sender.on_status(BundleStatus(version=2, accepted=False, resend=True)) is None  # not ours
    assert sender.on_status(resend).kind == "publish"
    assert sender.on_status(resend).kind == "refused"  # max_resends spent
    _policy(d / "v4.onnx", version=4)
    _os.utime(d / "v4.onnx")
    (ev,) = sender.poll()
    assert ev.kind == "publish" and ev.version == 4 and sender.resends == 0
