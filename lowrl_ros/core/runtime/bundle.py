"""A policy bundle: several compute tiers of one policy in one file (no torch, no ROS).

On disk a bundle is a zip (conventionally ``*.lowrl``) holding ``manifest.json`` and one ONNX
artifact per tier::

    {"format": "lowrl.bundle", "format_version": 1, "version": 3,
     "tiers": {"full": {"file": "full.onnx", "sha256": "..."}, "lite": {...}}}

A plain ``.onnx`` artifact loads as a one-tier bundle ("full"). Every tier must read the same
observations and write the same actions within the same limits, and carry the bundle's version,
so the policy node can switch tiers without the robot noticing anything but the compute.
"""
from __future__ import annotations

import hashlib
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

from lowrl_ros.core.runtime.artifact import ArtifactError, parse_artifact, read_artifact_bytes
from lowrl_ros.core.runtime.engines import Policy, build_policy

BUNDLE_FORMAT = "lowrl.bundle"
BUNDLE_FORMAT_VERSION = 1
MANIFEST = "manifest.json"


@dataclass
class PolicyBundle:
    """Loaded tiers of one policy version.

    Attributes:
        policies: tier name -> ready Policy (e.g. "full", "lite").
        version: the policy version every tier carries.
        path: the bundle file.
        sha256: of the whole file.
    """

    policies: dict[str, Policy]
    version: int
    path: Path | None = None
    sha256: str = ""

    def smallest(self) -> Policy:
        """The tier with the fewest multiply-adds per call (the one to run when compute is short)."""
        return min(self.policies.values(), key=lambda p: (p.macs, p.nbytes))

    @property
    def contract(self):
        """The shared I/O contract (of the "full" tier when present)."""
        return self.policies.get("full", next(iter(self.policies.values()))).contract


def is_bundle_file(data: bytes) -> bool:
    return data[:4] == b"PK\x03\x04"  # zip local-file header; an ONNX protobuf never starts so


def save_bundle(path: str | Path, tiers: dict[str, str | Path]) -> Path:
    """Pack existing tier artifacts (tier name -> .onnx path) into one bundle file; return its path.

    Each artifact is validated; their contracts must match each other's I/O and version, and each
    one's ``tier`` must equal its name here.
    """
    if not tiers:
        raise ArtifactError(f"{path}: a bundle needs at least one tier, e.g. {{'full': 'policy.onnx'}}")
    parsed = {name: parse_artifact(read_artifact_bytes(p), str(p)) for name, p in tiers.items()}
    _check_tiers(str(path), {n: p.contract for n, p in parsed.items()})
    version = next(iter(parsed.values())).contract.version
    manifest = {
        "format": BUNDLE_FORMAT,
        "format_version": BUNDLE_FORMAT_VERSION,
        "version": version,
        "tiers": {name: {"file": f"{name}.onnx", "sha256": p.sha256} for name, p in parsed.items()},
    }
    buf = io.BytesIO()
    # ONNX protobuf barely compresses once weights are int8/sparse; STORED keeps loading cheap.
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
        for name, p in parsed.items():
            zf.writestr(f"{name}.onnx", p.data)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(path)
    return path


def _check_tiers(source: str, contracts: dict) -> None:
    names = list(contracts)
    first = contracts[names[0]]
    for name, c in contracts.items():
        if c.tier != name:
            raise ArtifactError(
                f"{source}: tier {name!r} holds an artifact whose contract says tier {c.tier!r}; "
                "re-export it with the matching tier"
            )
        if not c.same_io(first):
            raise ArtifactError(
                f"{source}: tier {name!r} does not share the observations/actions/limits of tier {names[0]!r}; "
                "all tiers of a bundle must have the same I/O contract"
            )
        if c.version != first.version:
            raise ArtifactError(
                f"{source}: tier {name!r} is version {c.version} but tier {names[0]!r} is {first.version}; "
                "all tiers of a bundle carry the same version"
            )


def load_bundle(path: str | Path, engine: str = "auto") -> PolicyBundle:
    """Validate and load every tier of a bundle (or a plain .onnx as tier "full").

    Raises:
        ArtifactError: naming the file, the problem and the fix.
    """
    path = Path(path)
    data = read_artifact_bytes(path)
    digest = hashlib.sha256(data).hexdigest()
    if not is_bundle_file(data):
        policy = build_policy(parse_artifact(data, str(path)), engine, path=path)
        return PolicyBundle({"full": policy}, policy.contract.version, path, digest)
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        manifest = json.loads(zf.read(MANIFEST))
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError, OSError, EOFError) as exc:
        raise ArtifactError(
            f"{path}: not a readable bundle ({type(exc).__name__}: {exc}); rebuild it with save_bundle()"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise ArtifactError(f"{path}: {MANIFEST} is not a {BUNDLE_FORMAT} manifest; rebuild it with save_bundle()")
    if manifest.get("format_version") != BUNDLE_FORMAT_VERSION:
        raise ArtifactError(
            f"{path}: bundle format_version {manifest.get('format_version')!r} is not supported "
            f"(this lowrl reads {BUNDLE_FORMAT_VERSION}); update lowrl_ros or rebuild the bundle"
        )
    tiers = manifest.get("tiers")
    if not isinstance(tiers, dict) or not tiers:
        raise ArtifactError(f"{path}: the manifest lists no tiers; rebuild it with save_bundle()")
    parsed = {}
    for name, entry in tiers.items():
        source = f"{path}!{name}"
        try:
            blob = zf.read(entry["file"])
        except (KeyError, TypeError, zipfile.BadZipFile) as exc:
            raise ArtifactError(f"{source}: tier file missing or unreadable ({exc}); rebuild the bundle") from None
        if hashlib.sha256(blob).hexdigest() != entry.get("sha256"):
            raise ArtifactError(
                f"{source}: sha256 does not match the manifest; the bundle is corrupt, fetch or rebuild it"
            )
        parsed[name] = parse_artifact(blob, source)
    _check_tiers(str(path), {n: p.contract for n, p in parsed.items()})
    version = next(iter(parsed.values())).contract.version
    if manifest.get("version") != version:
        raise ArtifactError(
            f"{path}: manifest version {manifest.get('version')!r} but the tiers are version {version}; "
            "rebuild the bundle"
        )
    policies = {name: build_policy(p, engine, path=path) for name, p in parsed.items()}
    return PolicyBundle(policies, version, path, digest)
