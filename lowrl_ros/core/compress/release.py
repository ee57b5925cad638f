"""Release: gate distilled students and write the policy bundle only when every gate passes.

Three gates stand between a student and the robot (docs/compression.md, `lowrl compress`), each measured, each
with a report that says what failed and what to do:

1. parity: the fp32 ONNX artifact computes what the torch student computes (max |Δaction| on a
   probe set ≤ ``parity_tol``, 1e-5 by default). Catches exporter bugs (transposes,
   normalisation, output scaling) and stale artifacts.
2. int8: the int8 artifact's actions stay within budget of the fp32 artifact's on the same probes,
   as a fraction of the action range: the mean error ≤ ``int8_mean_error`` and the worst probe ≤
   ``int8_max_error``. Both, because a near bang-bang policy (Pendulum) has states where a tiny
   input change flips the action, so one probe can be far off while the policy is fine, and a
   broken one (an outlier weight wrecking a channel's scale) is off everywhere.
3. return: the deployed int8 artifact, loaded through the robot's runtime (``load_artifact``),
   keeps ``return_fraction`` of the teacher's return on the same seeded episodes.

The bundle (``save_bundle``: int8, sparse compact, contract with version, parent version,
provenance, one file per tier) is written only after all gates of all tiers pass; the JSON and
markdown release reports are written next to it either way, so a stopped release explains itself.
No torch here: the torch side of the parity gate comes in as a function.
"""
from __future__ import annotations

import dataclasses
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from lowrl_ros.core.config import field as config_field, require
from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract, reference_action, save_artifact
from lowrl_ros.core.runtime.engines import load_artifact
from lowrl_ros.core.runtime.bundle import load_bundle, save_bundle
from lowrl_ros.core.sim.evaluate import EVAL_SEED, EvalResult, evaluate, kept_fraction, rollout_states
from lowrl_ros.core.compress.quantize import clip_outliers


@dataclass(frozen=True)
class ReleaseConfig:
    """Gate thresholds and release metadata; each field is also a `lowrl compress` flag."""

    version: int = config_field(1, "version of the released bundle (>= 1, monotonic)")
    parent_version: int | None = config_field(None, "version this release derives from")
    env_id: str = config_field("", "environment of the return gate (empty: the contract's)")
    parity_tol: float = config_field(1e-5, "max |torch - fp32 ONNX| action error")
    int8_mean_error: float = config_field(0.02, "mean |int8 - fp32| action error over the probes, as a fraction of the "
                                                "action range")
    int8_max_error: float = config_field(0.10, "worst-probe |int8 - fp32| action error, as a fraction of the action "
                                               "range (high - low)")
    return_fraction: float = config_field(0.97, "deployed return must keep this fraction of the teacher's "
                                                "(1 - (T - S)/|T|)")
    probe_count: int = config_field(512, "probe observations for the parity and int8 gates")
    probe_episodes: int = config_field(3, "teacher rollouts the probes are drawn from")
    eval_episodes: int = config_field(10, "episodes of the return gate")
    eval_seed: int = config_field(EVAL_SEED, "seed of the first return-gate episode")
    clip_percentile: float = config_field(100.0, "clip int8 weight outliers at this percentile per channel (100: none)")
    seed: int = config_field(0, "seed of the probe rollouts")

    def __post_init__(self) -> None:
        require(isinstance(self.version, int) and self.version >= 1,
                f"version={self.version!r} must be an integer >= 1; give --version N")
        parent = self.parent_version
        require(parent is None or (isinstance(parent, int) and 1 <= parent < self.version),
                f"parent_version={parent!r} must be >= 1 and below version={self.version} (versions only go up)")
        require(0 < self.parity_tol < 1, f"parity_tol={self.parity_tol} must be in (0, 1); the contract asks for 1e-5")
        for name in ("int8_mean_error", "int8_max_error"):
            require(0 < getattr(self, name) <= 1,
                    f"{name}={getattr(self, name)} must be in (0, 1]; e.g. 0.05 = 5% of the action range")
        require(self.int8_mean_error <= self.int8_max_error,
                f"int8_mean_error={self.int8_mean_error} exceeds int8_max_error={self.int8_max_error}; "
                "a mean cannot exceed the maximum, lower it")
        require(0 < self.return_fraction <= 1.5,
                f"return_fraction={self.return_fraction} must be in (0, 1.5]; e.g. 0.97")
        for name in ("probe_count", "probe_episodes", "eval_episodes"):
            require(int(getattr(self, name)) >= 1, f"{name}={getattr(self, name)} must be >= 1")
        require(50.0 <= self.clip_percentile <= 100.0, f"clip_percentile={self.clip_percentile} must be in [50, 100]")

    @property
    def percentile(self) -> float | None:
        return None if self.clip_percentile >= 100.0 else float(self.clip_percentile)


@dataclass
class Candidate:
    """One tier up for release.

    Attributes:
        tier: tier name ("full", "lite", ...).
        weights: what gets exported (the fp32 student).
        torch_act: obs [n, obs_dim] -> actions [n, act] as torch computes them (parity reference).
        provenance: extra provenance strings for this tier.
    """

    tier: str
    weights: MlpWeights
    torch_act: Callable[[np.ndarray], np.ndarray]
    provenance: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Redistill:
    """Where the distillation flags a gate's fix names belong, so that the fix runs as written.

    ``lowrl compress TEACHER`` distils and releases in one go: ``--qat-steps`` is its own flag.
    ``lowrl compress STUDENTS_DIR`` releases students that are already trained: a distillation flag
    only acts through ``lowrl distill``, so the fix names that command line (the one that made the
    students, from their ``distill.json``) with the change, and says to run compress again.

    Attributes:
        command: the `lowrl distill ...` line that re-makes the students ("" when the running
            command distils them itself).
        qat_steps: quantization-aware steps the students already had (a fix asks for more).
        dagger_rounds: DAgger rounds they already had.
    """

    command: str = ""
    qat_steps: int = 0
    dagger_rounds: int = 3

    def flags(self, flags: str) -> str:
        """``flags`` as the user can act on them here: the flags alone, or the re-distil line carrying them."""
        if not self.command:
            return f"`{flags}`"
        return f"re-distil with `{self.with_flags(flags)}`, then run this compress again"

    def with_flags(self, flags: str) -> str:
        """The re-distil line with ``flags`` in place of its own values of the same flags."""
        changed = {w for w in flags.split() if w.startswith("--")}
        kept, skipping = [], False
        for word in self.command.split(" "):
            if word.startswith("--"):
                skipping = word in changed
            if not skipping:
                kept.append(word)
        return " ".join(kept + [flags])

    @property
    def more_qat(self) -> int:
        return max(500, 2 * self.qat_steps)


@dataclass
class GateResult:
    gate: str
    tier: str
    passed: bool
    measured: float
    threshold: float
    detail: str
    fix: str = ""

    def line(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        text = f"[{verdict}] {self.tier}: {self.gate}: {self.detail}"
        return text if self.passed else f"{text}\n        fix: {self.fix}"


@dataclass
class ReleaseReport:
    released: bool
    bundle: Path
    version: int
    parent_version: int | None
    teacher_return: EvalResult | None
    gates: list[GateResult]
    tiers: dict[str, dict[str, Any]]
    report_json: Path | None = None
    report_md: Path | None = None

    @property
    def failures(self) -> list[GateResult]:
        return [g for g in self.gates if not g.passed]


def probe_observations(act: Callable[[np.ndarray], np.ndarray], env_id: str, count: int, episodes: int,
                       seed: int, contract: PolicyContract) -> np.ndarray:
    """``count`` observations from noisy rollouts of ``act``: where the policy will be asked to act."""
    rng = np.random.default_rng(seed)
    low, high = np.array(contract.action_low), np.array(contract.action_high)

    def noisy(obs: np.ndarray) -> np.ndarray:
        return np.clip(act(obs) + rng.normal(0, 0.2 * (high - low) / 2), low, high)

    states = rollout_states(env_id, noisy, episodes, seed + 90_000)
    return states[rng.choice(len(states), size=min(count, len(states)), replace=False)]


def _batch_act(policy, obs: np.ndarray) -> np.ndarray:
    return np.stack([policy.act(o) for o in obs])


def gate_parity(tier: str, torch_act: Callable[[np.ndarray], np.ndarray], fp32_artifact: Path,
                probes: np.ndarray, tol: float, redistill: Redistill = Redistill()) -> GateResult:
    """fp32 ONNX (ONNX Runtime) vs torch on the probes: max abs action error ≤ ``tol``."""
    onnx_a = _batch_act(load_artifact(fp32_artifact, engine="ort"), probes)
    err = float(np.max(np.abs(onnx_a - np.asarray(torch_act(probes), np.float64))))
    if redistill.command:
        fix = (f"the students dir's fp32 artifact does not compute what its torch student (<tier>.pt) does: a stale "
               f"or hand-edited file; re-distil with `{redistill.command}` (it writes both together), then run "
               "this compress again")
    else:
        fix = ("the fp32 artifact was exported from this very student, so this is an exporter bug: report it; "
               f"--parity-tol above {err:.0e} releases anyway")
    return GateResult("fp32 ONNX vs torch parity", tier, err <= tol, err, tol,
                      f"max |Δaction| {err:.2e} on {len(probes)} probes (limit {tol:.0e})", fix)


def gate_int8(tier: str, fp32_artifact: Path, int8_artifact: Path, probes: np.ndarray,
              max_error: float, contract: PolicyContract, mean_error: float = 1.0,
              redistill: Redistill = Redistill(), clip_percentile: float = 100.0) -> GateResult:
    """int8 vs fp32 artifact on the probes, |Δaction| / (high - low): mean ≤ ``mean_error``, max ≤ ``max_error``."""
    a32 = _batch_act(load_artifact(fp32_artifact, engine="ort"), probes)
    a8 = _batch_act(load_artifact(int8_artifact, engine="ort"), probes)
    span = np.array(contract.action_high) - np.array(contract.action_low)
    rel = np.abs(a8 - a32) / span
    worst, mean = float(rel.max()), float(rel.mean())
    # Each remedy is one the running command (or the distill line named) acts on, in the order they help most.
    remedies = [f"more quantization-aware distillation ({redistill.flags(f'--qat-steps {redistill.more_qat}')})"]
    if clip_percentile >= 100.0:
        remedies.append("clip int8 weight outliers (`--clip-percentile 99.9` on this compress)")
    remedies.append("or accept more error (`--int8-max-error`, `--int8-mean-error` on this compress)")
    return GateResult("int8 vs fp32 action error", tier, worst <= max_error and mean <= mean_error, worst, max_error,
                      f"|Δaction| mean {mean:.2%} (budget {mean_error:.2%}), worst {worst:.2%} (budget "
                      f"{max_error:.2%}) of the action range on {len(probes)} probes",
                      "post-training int8 loses too much here: " + ", ".join(remedies))


def gate_return(tier: str, int8_artifact: Path, teacher: EvalResult, cfg: ReleaseConfig,
                env_id: str, redistill: Redistill = Redistill()) -> tuple[GateResult, EvalResult]:
    """Deployed (int8, load_artifact) return keeps ``return_fraction`` of the teacher's, same seeds."""
    deployed = evaluate(load_artifact(int8_artifact).act, env_id, cfg.eval_episodes, cfg.eval_seed)
    kept = kept_fraction(deployed.mean, teacher.mean)
    more = redistill.flags(f"--dagger-rounds {redistill.dagger_rounds + 2}")
    gate = GateResult("deployed return vs teacher", tier, kept >= cfg.return_fraction, kept, cfg.return_fraction,
                      f"int8 artifact {deployed.mean:.1f} ± {deployed.std:.1f} vs teacher {teacher.mean:.1f} "
                      f"± {teacher.std:.1f}: keeps {kept:.1%} (needs {cfg.return_fraction:.0%})",
                      f"distil longer ({more}; or more --bc-steps, a wider student, lower sparsity there), or "
                      "`--return-fraction` lower on this compress if this tier is meant to trade return for compute")
    return gate, deployed


def release(candidates: list[Candidate], teacher_weights: MlpWeights, contract: PolicyContract,
            cfg: ReleaseConfig, bundle_path: str | Path, provenance: dict[str, str] | None = None,
            log: Callable[[str], None] = print, redistill: Redistill = Redistill()) -> ReleaseReport:
    """Export every candidate, run the gates, and write the bundle only if all pass.

    Args:
        candidates: the tiers (distinct names).
        teacher_weights: the teacher (its fp32 return is the reference of the return gate).
        contract: the teacher's contract; tiers inherit its I/O (observation side and limits; the action
            transform is the one for each candidate's output activation, ``PolicyContract.retargeted``).
        cfg: thresholds, version and parent version.
        bundle_path: where the bundle goes; untouched when a gate fails.
        provenance: extra provenance for every tier.
        log: where progress lines go.
        redistill: where the distillation flags a fix names belong (see :class:`Redistill`).

    Returns:
        The report (``released`` False when any gate failed); JSON/markdown written beside the bundle.
    """
    bundle_path = Path(bundle_path)
    names = [c.tier for c in candidates]
    if not candidates or len(set(names)) != len(names):
        raise ValueError(f"release needs at least one candidate with distinct tier names, got {names}")
    env_id = cfg.env_id or contract.env_id
    if not env_id:
        raise ValueError("no environment for the return gate: the contract has no env_id; pass --env-id")
    _check_version_goes_up(bundle_path, cfg.version)
    # The reports go beside the bundle either way; `-o releases/v2.lowrl` on a fresh clone names a new dir.
    bundle_path.parent.mkdir(parents=True, exist_ok=True)
    teacher_act = lambda o: reference_action(teacher_weights, contract, np.atleast_2d(o))[0]  # noqa: E731
    log(f"teacher: evaluating {cfg.eval_episodes} episodes of {env_id}")
    teacher_eval = evaluate(teacher_act, env_id, cfg.eval_episodes, cfg.eval_seed)
    probes = probe_observations(teacher_act, env_id, cfg.probe_count, cfg.probe_episodes, cfg.seed, contract)
    gates: list[GateResult] = []
    tiers: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="lowrl-release-") as tmp:
        tmp = Path(tmp)
        int8_paths = {}
        for cand in candidates:
            # The teacher's provenance describes the teacher (its sparsity, its training steps): keep it, prefixed.
            teacher_prov = {f"teacher.{k}": v for k, v in contract.provenance.items() if not k.startswith("teacher")}
            prov = {**teacher_prov, **(provenance or {}), **cand.provenance, "tool": "lowrl compress",
                    "int8": "true", "clip_percentile": str(cfg.clip_percentile)}
            # The candidate's own output activation decides its action transform (a tanh student of a linear
            # PPO teacher maps [-1, 1] onto the limits); the observation side is the teacher's.
            base = contract.retargeted(teacher_weights.output_activation, cand.weights.output_activation)
            c = dataclasses.replace(base, tier=cand.tier, version=cfg.version, parent_version=cfg.parent_version,
                                    env_id=env_id, provenance=prov)
            fp32 = save_artifact(tmp / f"{cand.tier}_fp32.onnx", cand.weights, c)
            int8 = save_artifact(tmp / f"{cand.tier}.onnx", clip_outliers(cand.weights, cfg.percentile), c, int8=True)
            int8_paths[cand.tier] = int8
            tier_gates = [gate_parity(cand.tier, cand.torch_act, fp32, probes, cfg.parity_tol, redistill),
                          gate_int8(cand.tier, fp32, int8, probes, cfg.int8_max_error, c,
                                    cfg.int8_mean_error, redistill, cfg.clip_percentile)]
            deployed = None
            if all(g.passed for g in tier_gates):  # returns are slow; skip them when a tier already failed
                g, deployed = gate_return(cand.tier, int8, teacher_eval, cfg, env_id, redistill)
                tier_gates.append(g)
            for g in tier_gates:
                log(g.line())
            gates += tier_gates
            policy = load_artifact(int8)
            tiers[cand.tier] = {"bytes": policy.nbytes, "macs": policy.macs, "nnz_weights": cand.weights.nnz,
                                "weights": cand.weights.macs, "sparsity": cand.weights.sparsity,
                                "deployed_return_mean": deployed.mean if deployed else None,
                                "deployed_return_std": deployed.std if deployed else None,
                                "sha256": policy.sha256}
        released = all(g.passed for g in gates)
        if released:
            save_bundle(bundle_path, int8_paths)  # atomic (temp file + rename)
            load_bundle(bundle_path)  # validate what was written, the way the robot will
    report = ReleaseReport(released, bundle_path, cfg.version, cfg.parent_version, teacher_eval, gates, tiers)
    report.report_json, report.report_md = write_reports(report, cfg, env_id)
    return report


def _check_version_goes_up(bundle_path: Path, version: int) -> None:
    """Refuse to overwrite a bundle with one whose version is not higher (versions are monotonic)."""
    if not bundle_path.exists():
        return
    try:
        old = load_bundle(bundle_path, engine="numpy").version
    except ValueError:
        return  # an unreadable file will simply be replaced
    if version <= old:
        raise ValueError(f"{bundle_path} already holds version {old}; give --version {old + 1} or higher "
                         f"(and --parent-version {old} if this release derives from it)")


def write_reports(report: ReleaseReport, cfg: ReleaseConfig, env_id: str) -> tuple[Path, Path]:
    """``<bundle>.release.json`` and ``<bundle>.release.md`` beside the bundle."""
    json_path = report.bundle.with_name(report.bundle.name + ".release.json")
    md_path = report.bundle.with_name(report.bundle.name + ".release.md")
    t = report.teacher_return
    doc = {
        "released": report.released,
        "bundle": str(report.bundle) if report.released else None,
        "version": report.version,
        "parent_version": report.parent_version,
        "env_id": env_id,
        "teacher_return": {"mean": t.mean, "std": t.std, "returns": list(t.returns)} if t else None,
        "gates": [dataclasses.asdict(g) for g in report.gates],
        "tiers": report.tiers,
        "config": dataclasses.asdict(cfg),
    }
    json_path.write_text(json.dumps(doc, indent=2, default=float) + "\n")
    lines = [f"# Release of {report.bundle.name}: {'RELEASED' if report.released else 'STOPPED'}", "",
             f"- version {report.version}, parent version {report.parent_version}, environment {env_id}",
             f"- teacher return (fp32): {t.mean:.1f} ± {t.std:.1f} over {len(t.returns)} episodes" if t else "", "",
             "| tier | gate | result | measured | threshold |", "|---|---|---|---|---|"]
    for g in report.gates:
        verdict = "pass" if g.passed else "**FAIL**"
        lines.append(f"| {g.tier} | {g.gate} | {verdict} | {g.measured:.3g} | {g.threshold:.3g} |")
    lines += ["", "| tier | bytes | MACs | non-zero weights | sparsity | deployed return |",
              "|---|---|---|---|---|---|"]
    for name, info in report.tiers.items():
        ret = "not run" if info["deployed_return_mean"] is None else \
            f"{info['deployed_return_mean']:.1f} ± {info['deployed_return_std']:.1f}"
        lines.append(f"| {name} | {info['bytes']} | {info['macs']} | {info['nnz_weights']} | "
                     f"{info['sparsity']:.1%} | {ret} |")
    if report.failures:
        lines += ["", "## Why it stopped", ""]
        lines += [f"- {g.tier}, {g.gate}: {g.detail}. Fix: {g.fix}" for g in report.failures]
    md_path.write_text("\n".join(lines) + "\n")
    return json_path, md_path
