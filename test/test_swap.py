"""PolicySwapper without ROS: newest wins, version arithmetic, rejection codes, lock-free take.

Fakes stand in for the controller, the loader and the receiver where the test is about the swapper's
own decisions; the last tests run the real BundleReceiver and PolicyController on real artifacts.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract, save_artifact
from lowrl_ros.core.runtime.bundle import load_bundle
from lowrl_ros.core.runtime.control import ControlConfig, PolicyController
from lowrl_ros.core.runtime.swap import PolicySwapper, RejectCode, StreamStatus, SwapState, SwapStatus
from lowrl_ros.core.stream.protocol import BundleStatus, encode_bundle
from lowrl_ros.core.stream.receiver import BundleReceiver, ReceiverConfig
from lowrl_ros.core.types import Level

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class FakeBundle:
    version: int
    path: str
    obs_dim: int = 3
    sha256: str = ""


@dataclass
class FakeController:
    bundle: FakeBundle
    swaps: list = field(default_factory=list)

    def check_compatible(self, bundle: FakeBundle) -> None:
        if bundle.obs_dim != self.bundle.obs_dim:
            raise ValueError(f"maps {bundle.obs_dim} observations, the running one {self.bundle.obs_dim}")

    def swap(self, bundle: FakeBundle) -> None:
        self.check_compatible(bundle)
        self.bundle = bundle
        self.swaps.append(bundle.version)


class Loader:
    """Files named ``v<N>[-<obs_dim>].onnx`` load as version N; ``bad*`` fails; ``gate`` holds the first load."""

    def __init__(self) -> None:
        self.loaded: list[str] = []
        self.gate: threading.Event | None = None
        self.started = threading.Event()

    def __call__(self, path: str) -> FakeBundle:
        self.started.set()
        if self.gate is not None:
            self.gate.wait(10.0)
            self.gate = None
        self.loaded.append(path)
        name = Path(path).stem
        if name.startswith("bad"):
            raise ValueError(f"{path} is not an ONNX file")
        version, _, dim = name[1:].partition("-")
        return FakeBundle(int(version), path, int(dim or 3))


def make(active: str = "v1.onnx", **kwargs):
    controller = FakeController(FakeBundle(1, active))
    loader = Loader()
    events: dict[str, list] = {"log": [], "reject": [], "reply": []}
    swapper = PolicySwapper(controller, loader, active_path=active,
                            log=lambda level, line: events["log"].append((level, line)),
                            on_reject=events["reject"].append, reply=events["reply"].append, **kwargs)
    return swapper, controller, loader, events


def test_a_path_is_validated_off_the_control_path_and_installed_by_take():
    swapper, controller, loader, events = make()
    assert swapper.status() == SwapStatus()  # nothing requested yet
    assert swapper.take() is None
    assert swapper.request_path("v2.onnx")
    assert swapper.wait(10.0)
    status = swapper.status()
    assert (status.state, status.path, status.version) == (SwapState.VALIDATED, "v2.onnx", 2)
    assert controller.swaps == []  # nothing changes until the control thread takes it
    assert swapper.take().version == 2 and controller.swaps == [2]
    status = swapper.status()
    assert (status.state, status.version, swapper.active_path) == (SwapState.SWAPPED, 2, "v2.onnx")
    assert status.message == "swapped to v2.onnx v2" and status.level == Level.OK
    assert swapper.take() is None  # installed once
    assert not swapper.request_path("v2.onnx")  # the running file: nothing to do


def test_a_bad_file_is_rejected_with_a_code_and_the_running_policy_stays():
    swapper, controller, loader, events = make()
    swapper.request_path("bad.onnx")
    swapper.wait(10.0)
    status = swapper.status()
    assert status.state == SwapState.REJECTED and status.code == RejectCode.INVALID_ARTIFACT
    assert status.path == "bad.onnx" and status.version == 0 and status.level == Level.ERROR
    assert status.message == "rejected bad.onnx: bad.onnx is not an ONNX file"  # the text rqt showed before
    assert events["reject"] == [status]
    assert (Level.ERROR, "hot-swap rejected, keeping v1.onnx: bad.onnx is not an ONNX file") in events["log"]
    assert swapper.take() is None and controller.bundle.version == 1


def test_an_incompatible_file_is_a_contract_mismatch_with_its_version():
    swapper, controller, loader, events = make()
    swapper.request_path("v4-5.onnx")
    swapper.wait(10.0)
    status = swapper.status()
    assert (status.state, status.code, status.version) == (SwapState.REJECTED, "contract_mismatch", 4)
    assert status.values() == {"swap": status.message, "swap_state": "rejected", "swap_path": "v4-5.onnx",
                               "swap_version": 4, "swap_code": "contract_mismatch"}


def test_newest_request_wins_while_the_worker_is_busy():
    swapper, controller, loader, events = make()
    loader.gate = threading.Event()
    swapper.request_path("v2.onnx")
    assert loader.started.wait(10.0)  # the worker holds v2
    for v in (3, 4, 5):
        swapper.request_path(f"v{v}.onnx")  # queued while busy: each replaces the one before
    loader.gate.set()
    assert swapper.wait(10.0)
    assert loader.loaded == ["v2.onnx", "v5.onnx"]  # one worker, never a queue of stale versions
    assert swapper.take().version == 5 and controller.swaps == [5]


def test_take_does_not_touch_the_lock_when_nothing_is_pending():
    swapper, *_ = make()
    done = threading.Event()
    with swapper._lock:  # another thread holds the lock (a swap worker mid-update)
        thread = threading.Thread(target=lambda: (swapper.take(), done.set()))
        thread.start()
        assert done.wait(2.0), "take() waited for the lock with nothing pending"
    thread.join()


def test_a_failing_callback_never_stops_the_worker():
    def boom(_):
        raise RuntimeError("publisher destroyed")

    controller = FakeController(FakeBundle(1, "v1.onnx"))
    swapper = PolicySwapper(controller, Loader(), active_path="v1.onnx", on_reject=boom)
    swapper.request_path("bad.onnx")
    swapper.request_path("v2.onnx")
    assert swapper.wait(10.0)
    assert swapper.status().state in (SwapState.VALIDATED, SwapState.REJECTED)
    swapper.request_path("v3.onnx")  # a new worker starts: the last one ended cleanly
    assert swapper.wait(10.0) and swapper.status().version == 3


# ---- streamed bundles with a fake receiver -----------------------------------------------------

@dataclass
class Header:
    version: int
    total_len: int = 100
    n_chunks: int = 1


@dataclass
class Got:
    bundle: FakeBundle
    path: str
    header: Header


class FakeReceiver:
    """Answers scripted replies and records the version each message had to beat."""

    def __init__(self, *, signed: bool = True) -> None:
        self.config = ReceiverConfig(require_signature=signed)
        self.key = b"k" * 32 if signed else None
        self.currents: list[int] = []
        self.script: list = []

    def answer(self, message, *, current_version, running, protect=(), check=None):
        self.currents.append(current_version)
        return self.script.pop(0)


def accepted(version: int) -> tuple:
    bundle = FakeBundle(version, f"recv/v{version}.onnx")
    return Got(bundle, bundle.path, Header(version)), BundleStatus(version=version, accepted=True,
                                                                   running_version=version)


def rejected(version: int, code: str, resend: bool = False) -> tuple:
    return None, BundleStatus(version=version, accepted=False, code=code, reason=f"{code} happened", resend=resend)


def test_bundle_version_arithmetic_running_pending_and_accepted():
    receiver = FakeReceiver()
    swapper, controller, _, events = make(receiver=receiver)
    assert swapper.stream_status() == StreamStatus(signed_only=True, key_loaded=True)
    receiver.script = [accepted(5), accepted(7)]
    swapper.request_bundle(b"m5")
    swapper.wait(10.0)
    assert receiver.currents == [1]  # only the running v1 so far
    assert swapper.stream_status().version == 5 and swapper.pending.version == 5
    swapper.request_bundle(b"m7")
    swapper.wait(10.0)
    assert receiver.currents == [1, 5]  # v5 is pending (and accepted): v7 must beat it
    assert swapper.take().version == 7 and controller.swaps == [7]
    assert [r.version for r in events["reply"]] == [5, 7]
    stream = swapper.stream_status()
    assert (stream.level, stream.message, stream.last_code) == (Level.OK, "accepted v7", "ok")


def test_a_duplicate_is_not_an_error_and_a_rejection_is():
    receiver = FakeReceiver()
    swapper, controller, _, events = make(receiver=receiver)
    receiver.script = [rejected(1, "duplicate")]
    swapper.request_bundle(b"again")
    swapper.wait(10.0)
    stream = swapper.stream_status()
    assert (stream.level, stream.message, stream.last_code) == (Level.OK, "v1 already running", "duplicate")
    assert swapper.status().state == SwapState.NONE and events["reject"] == []
    receiver.script = [rejected(3, "corrupt_chunk", resend=True)]
    swapper.request_bundle(b"damaged")
    swapper.wait(10.0)
    stream, status = swapper.stream_status(), swapper.status()
    assert stream.level == Level.ERROR and stream.message == "rejected v3: [corrupt_chunk] corrupt_chunk happened"
    assert stream.values()["resend_requested"] is True and stream.values()["last_code"] == "corrupt_chunk"
    assert (status.state, status.path, status.version, status.code) == (SwapState.REJECTED, "bundle v3", 3,
                                                                       "corrupt_chunk")
    assert status.message == "rejected bundle v3: [corrupt_chunk] corrupt_chunk happened"
    assert [r.code for r in events["reply"]] == ["duplicate", "corrupt_chunk"]  # every message is answered


def test_without_a_receiver_bundle_messages_are_ignored():
    swapper, *_ = make()
    assert not swapper.request_bundle(b"anything")


def test_reject_codes_are_every_wire_code_raised_today():
    """The StrEnum holds exactly the codes the protocol and receiver raise (wire values never change)."""
    raised = set()
    for rel in ("lowrl_ros/core/stream/protocol.py", "lowrl_ros/core/stream/receiver.py"):
        raised |= set(re.findall(r'BundleRejected\(\s*"([a-z_0-9]+)"', (ROOT / rel).read_text()))
    raised.add("invalid_artifact")  # receiver.answer raises it through RejectCode
    assert raised == {c.value for c in RejectCode}
    assert RejectCode.PARITY == "parity" and f"{RejectCode.NO_KEY}" == "no_key"


# ---- the real receiver and controller ----------------------------------------------------------

def artifact(path: Path, action: float, version: int, obs_dim: int = 3) -> Path:
    """A constant-output policy over limits [-2, 2]."""
    y = np.arctanh(action / 2.0)
    w1 = np.full((4, obs_dim), 0.1, np.float32)
    weights = MlpWeights([(w1, np.zeros(4, np.float32)), (np.zeros((1, 4), np.float32), np.array([y], np.float32))])
    contract = PolicyContract(obs_names=tuple(f"o{i}" for i in range(obs_dim)), action_names=("u",),
                              action_low=(-2.0,), action_high=(2.0,), version=version)
    return save_artifact(path, weights, contract)


@pytest.fixture
def real(tmp_path):
    base = artifact(tmp_path / "v1.onnx", 0.5, 1)
    controller = PolicyController(ControlConfig(soft_start_steps=0), load_bundle(base, engine="numpy"))
    key = b"0123456789abcdef0123456789abcdef"
    receiver = BundleReceiver(ReceiverConfig(receive_dir=str(tmp_path / "recv"), engine="numpy"), key)
    replies: list = []
    swapper = PolicySwapper(controller, lambda p: load_bundle(p, engine="numpy"), active_path=str(base),
                            receiver=receiver, reply=replies.append)
    return swapper, controller, key, replies, tmp_path


def test_real_bundle_accepted_swapped_then_redelivered_as_duplicate(real):
    swapper, controller, key, replies, tmp_path = real
    message = encode_bundle(artifact(tmp_path / "v2.onnx", -1.0, 2).read_bytes(), 2, key)
    swapper.request_bundle(message)
    swapper.wait(30.0)
    assert replies[-1].accepted and replies[-1].code == "ok" and replies[-1].version == 2
    assert swapper.take() is not None and controller.bundle.version == 2
    controller.activate()
    controller.observe(np.zeros(3))
    assert controller.step().action[0] == pytest.approx(-1.0, abs=1e-3)
    swapper.request_bundle(message)  # the latched topic hands the same message again
    swapper.wait(30.0)
    assert replies[-1].code == "duplicate" and swapper.stream_status().level == Level.OK


def test_real_bundle_rejections_carry_the_receivers_code(real):
    swapper, controller, key, replies, tmp_path = real
    unsigned = encode_bundle(artifact(tmp_path / "v2.onnx", -1.0, 2).read_bytes(), 2, None)
    swapper.request_bundle(unsigned)
    swapper.wait(30.0)
    assert (replies[-1].code, swapper.status().code, swapper.status().version) == ("unsigned", "unsigned", 2)
    wrong = encode_bundle(artifact(tmp_path / "v3.onnx", -1.0, 3, obs_dim=4).read_bytes(), 3, key)
    swapper.request_bundle(wrong)
    swapper.wait(30.0)
    assert replies[-1].code == "contract_mismatch" and not replies[-1].accepted
    assert swapper.take() is None and controller.bundle.version == 1


def test_receiver_config_warnings():
    assert ReceiverConfig().warnings(key_loaded=True) == []
    no_key = ReceiverConfig().warnings(key_loaded=False, topic="/lowrl/policy_bundle")
    assert len(no_key) == 1 and "no key_file: bundles on /lowrl/policy_bundle will be rejected" in no_key[0]
    insecure = ReceiverConfig(require_signature=False).warnings(key_loaded=False)
    assert len(insecure) == 1 and "UNSIGNED bundles will be accepted" in insecure[0]


def test_the_engines_policy_satisfies_the_policy_protocol(real):
    from lowrl_ros.core.types import Policy

    swapper, controller, *_ = real
    assert all(isinstance(p, Policy) for p in controller.bundle.policies.values())
    assert not isinstance(object(), Policy)
