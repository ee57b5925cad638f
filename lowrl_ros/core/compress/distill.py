"""Policy distillation: a big teacher actor becomes small sparse int8 students (off-board, torch).

The students learn by behaviour cloning on states the teacher visits, then by DAgger (Ross,
Gordon & Bagnell 2011, "A Reduction of Imitation Learning and Structured Prediction to No-Regret
Online Learning"): roll out the student, let the teacher label the states the *student* reaches,
aggregate, retrain. Pure cloning only sees the teacher's own state distribution, so a student's
small mistakes compound into states it never saw (the covariate shift DAgger fixes); Rusu et al.
2016 ("Policy Distillation") show such students can be far smaller than their teachers.

Sparse students use the trainer's own machinery (``lowrl_ros.core.train.sparse.SparseMasker``
over a one-member ``FusedMLP``): Erdős–Rényi layer densities and, by default, RigL topology
updates (Evci et al. 2020) during distillation, exactly as RLx2 trains its sparse actors.

Quantization-aware fine-tuning (Jacob et al. 2018), on by default (``qat_steps``): a few extra steps
where the forward pass uses fake-quantized int8 weights (per output channel) and dynamically
quantized uint8 activations (as ONNX Runtime's DynamicQuantizeLinear does at run time), with
straight-through gradients, so the int8 artifact acts like the student it was distilled into;
post-training quantization alone moves a small student's actions past the release's int8 gate.

Every student is scored in its deployed form: the int8 artifact, loaded with ``load_artifact``,
in the gymnasium environment. Never only in fp32.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from lowrl_ros.core.config import field as config_field, require
from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract, reference_action, save_artifact
from lowrl_ros.core.runtime.engines import load_artifact
from lowrl_ros.core.sim.evaluate import EVAL_SEED, EvalResult, evaluate, kept_fraction, rollout_states
from lowrl_ros.core.sim.plot import pyplot
from lowrl_ros.core.compress.quantize import clip_outliers, fake_quantize
from lowrl_ros.core.compress.teacher import Teacher, collect_teacher_states, load_teacher, normalise  # noqa: F401
from lowrl_ros.core.train.networks import FusedMLP
from lowrl_ros.core.train.sparse import METHODS, SparseMasker

_SPEC = re.compile(r"^(?P<name>[A-Za-z][\w-]*):(?P<hidden>\d+)x(?P<depth>\d+)(@(?P<sparsity>0?\.\d+|0))?$")


@dataclass(frozen=True)
class StudentSpec:
    """One student: the tier it serves, its width and depth, and its sparsity.

    Written ``NAME:WIDTHxDEPTH@SPARSITY`` on the command line, e.g. ``lite:64x2@0.8``.
    """

    name: str
    hidden: int
    depth: int
    sparsity: float = 0.0

    def __post_init__(self) -> None:
        if not self.name or not re.match(r"^[A-Za-z][\w-]*$", self.name):
            raise ValueError(f"student name {self.name!r} must be a tier name such as 'full' or 'lite'")
        if self.hidden < 1 or self.depth < 1:
            raise ValueError(f"student {self.name}: width {self.hidden} and depth {self.depth} must be >= 1")
        if not 0.0 <= self.sparsity < 1.0:
            raise ValueError(f"student {self.name}: sparsity {self.sparsity} must be in [0, 1); 0.9 = 90% zeros")

    @classmethod
    def parse(cls, text: str) -> "StudentSpec":
        m = _SPEC.match(text.strip())
        if not m:
            raise ValueError(f"student spec {text!r} is not NAME:WIDTHxDEPTH[@SPARSITY], e.g. 'lite:64x2@0.8'")
        return cls(m["name"], int(m["hidden"]), int(m["depth"]), float(m["sparsity"] or 0.0))

    def __str__(self) -> str:
        return f"{self.name}:{self.hidden}x{self.depth}@{self.sparsity:g}"


@dataclass(frozen=True)
class DistillConfig:
    """Everything one distillation needs; each field is also a `lowrl distill` flag."""

    students: tuple[str, ...] = config_field(("full:256x2@0.9", "lite:64x2@0.8"),
                                          "students NAME:WIDTHxDEPTH@SPARSITY, one per tier")
    env_id: str = config_field("", "gymnasium id to distil in (empty: the teacher contract's env_id)")
    teacher_episodes: int = config_field(20, "teacher rollouts whose states start the dataset")
    teacher_noise: float = config_field(0.2, "Gaussian action noise on teacher rollouts, fraction of the half action "
                                             "range")
    bc_steps: int = config_field(3000, "gradient steps of behaviour cloning before DAgger")
    dagger_rounds: int = config_field(3, "DAgger rounds (student rollouts relabelled by the teacher)")
    dagger_episodes: int = config_field(5, "student rollouts per DAgger round")
    dagger_steps: int = config_field(1000, "gradient steps after each DAgger round")
    # On by default: post-training int8 of a small student misses the release's int8 gate on some seeds
    # (Pendulum lite:32x2@0.8, worst probe 14.7 % of the action range against a 10 % budget; 5.1 % after
    # 500 QAT steps, docs/compression.md), and 500 steps cost seconds.
    qat_steps: int = config_field(500, "quantization-aware fine-tuning steps at the end (0: off, post-training "
                                       "int8 only)")
    batch_size: int = config_field(256, "minibatch size")
    lr: float = config_field(1e-3, "Adam learning rate")
    mask_method: str = config_field("rigl", "sparse topology: static, set or rigl (the trainer's SparseMasker)")
    mask_interval: int = config_field(250, "gradient steps between topology updates")
    zeta0: float = config_field(0.3, "initial drop/grow fraction of the cosine schedule")
    clip_percentile: float = config_field(100.0, "clip int8 weight outliers at this percentile of |w| per channel "
                                                 "(100: none)")
    eval_episodes: int = config_field(10, "episodes to evaluate teacher and deployed students")
    eval_seed: int = config_field(EVAL_SEED, "seed of the first evaluation episode")
    seed: int = config_field(0, "seed of rollouts, initialisation and minibatches")
    student_output: str = config_field("auto", "students' output activation: auto (the teacher's), tanh (bounded, "
                                               "[-1, 1] mapped onto the action limits) or none (linear)")
    threads: int = config_field(1, "torch intra-op threads")
    progress: bool = config_field(True, "draw a progress line on stderr")

    def __post_init__(self) -> None:
        students = (self.students,) if isinstance(self.students, str) else tuple(self.students)
        require(len(students) >= 1, "students is empty; give at least one, e.g. 'lite:64x2@0.8'")
        specs = [s if isinstance(s, StudentSpec) else StudentSpec.parse(str(s)) for s in students]
        names = [s.name for s in specs]
        require(len(set(names)) == len(names), f"student names {names} repeat; each tier needs its own name")
        object.__setattr__(self, "students", tuple(str(s) for s in specs))
        for name in ("teacher_episodes", "batch_size", "eval_episodes", "threads", "mask_interval"):
            require(int(getattr(self, name)) >= 1, f"{name}={getattr(self, name)} must be >= 1")
        for name in ("bc_steps", "dagger_rounds", "dagger_episodes", "dagger_steps", "qat_steps"):
            require(int(getattr(self, name)) >= 0, f"{name}={getattr(self, name)} must be >= 0")
        require(self.bc_steps + self.dagger_rounds * self.dagger_steps > 0, "bc_steps and dagger_steps are all 0; "
                "the students would never train")
        require(self.teacher_noise >= 0, f"teacher_noise={self.teacher_noise} must be >= 0")
        require(self.lr > 0, f"lr={self.lr} must be > 0")
        require(self.mask_method in METHODS, f"mask_method={self.mask_method!r}: use one of {METHODS}")
        require(self.student_output in ("auto", "tanh", "none"),
                f"student_output={self.student_output!r}: use auto, tanh or none")
        require(0.0 < self.zeta0 <= 1.0, f"zeta0={self.zeta0} must be in (0, 1]")
        require(50.0 <= self.clip_percentile <= 100.0,
                f"clip_percentile={self.clip_percentile} must be in [50, 100]; 100 means no clipping")

    @property
    def specs(self) -> list[StudentSpec]:
        return [StudentSpec.parse(s) for s in self.students]

    @property
    def percentile(self) -> float | None:
        return None if self.clip_percentile >= 100.0 else float(self.clip_percentile)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["students"] = list(self.students)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DistillConfig":
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            known = [f.name for f in dataclasses.fields(cls)]
            raise ValueError(f"unknown distill keys {sorted(unknown)}; known: {known}")
        return cls(**data)


# --- students ----------------------------------------------------------------------------------

def _fake_quant_weight(w: torch.Tensor) -> torch.Tensor:
    """Per-output-channel symmetric int8 (w is [in, out]: a channel is a column), straight-through."""
    scale = w.detach().abs().amax(dim=0, keepdim=True).clamp_min(1e-12) / 127.0
    q = torch.clamp(torch.round(w / scale), -127, 127) * scale
    return w + (q - w).detach()


def _fake_quant_act(x: torch.Tensor) -> torch.Tensor:
    """Asymmetric uint8 over each row's range including 0 (DynamicQuantizeLinear at batch 1)."""
    lo = x.detach().amin(dim=-1, keepdim=True).clamp(max=0.0)
    hi = x.detach().amax(dim=-1, keepdim=True).clamp(min=0.0)
    scale = ((hi - lo) / 255.0).clamp_min(1e-12)
    zp = torch.round(-lo / scale)
    q = (torch.clamp(torch.round(x / scale) + zp, 0, 255) - zp) * scale
    return x + (q - x).detach()


class Student:
    """A (sparse) MLP student: a one-member FusedMLP with the trainer's SparseMasker.

    Args:
        spec: size and sparsity.
        obs_dim, act_dim: from the teacher's contract.
        output_activation: the teacher's ("tanh" or "none").
        cfg: masking and optimiser settings.
        total_steps: gradient steps planned (the cosine drop schedule ends there).
    """

    def __init__(self, spec: StudentSpec, obs_dim: int, act_dim: int, output_activation: str,
                 cfg: DistillConfig, total_steps: int) -> None:
        self.spec = spec
        self.output_activation = output_activation
        self.net = FusedMLP(1, [obs_dim] + [spec.hidden] * spec.depth + [act_dim])
        self.opt = torch.optim.Adam(self.net.parameters(), lr=cfg.lr)
        self.masker = None
        if spec.sparsity > 0:
            gen = torch.Generator().manual_seed(cfg.seed + 7)
            # Topology updates stop at 3/4 of training, as RigL does, so the final mask gets trained.
            self.masker = SparseMasker(list(self.net.weights), spec.sparsity, cfg.mask_method, cfg.mask_interval,
                                       cfg.zeta0, int(0.75 * total_steps), generator=gen)
        self.steps = 0

    def forward(self, x: torch.Tensor, fake_quant: bool = False) -> torch.Tensor:
        """Normalised obs [B, in] -> output after the output activation [B, act]."""
        last = len(self.net.weights) - 1
        for i, (w, b) in enumerate(zip(self.net.weights, self.net.biases)):
            w, b = w[0], b[0, 0]
            if fake_quant:
                w, x = _fake_quant_weight(w), _fake_quant_act(x)
            x = torch.addmm(b, x, w)
            if i < last:
                x = torch.relu(x)
        return torch.tanh(x) if self.output_activation == "tanh" else x

    def train_step(self, x: torch.Tensor, y: torch.Tensor, fake_quant: bool = False) -> float:
        loss = torch.nn.functional.mse_loss(self.forward(x, fake_quant), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.masker is not None:
            self.masker.step(self.opt)  # masks gradients and weights, or evolves the topology
        else:
            self.opt.step()
        self.steps += 1
        return float(loss.detach())

    def weights(self) -> MlpWeights:
        """The student as artifact weights (W[out, in]); masked weights are exact zeros."""
        layers = [(w.detach()[0].numpy().T.copy(), b.detach()[0, 0].numpy().copy())
                  for w, b in zip(self.net.weights, self.net.biases)]
        return MlpWeights(layers, "relu", self.output_activation)

    def snap_to_int8(self, percentile: float | None = None) -> None:
        """Replace the float weights by their int8 values (quantized, dequantized), in place.

        After quantization-aware training the student *is* its quantized weights: the loss of its
        last steps was measured through them, and the float "shadow" weights between grid points are
        a training device (Jacob et al. 2018 keep them only to accumulate small gradient steps).
        Snapping makes the fp32 artifact, the torch state and the int8 artifact one policy, so the
        release's int8 gate measures what int8 inference changes (the activations) rather than the
        distance between the shadow weights and the policy that was trained. Zeros stay zeros.
        """
        snapped = fake_quantize(self.weights(), percentile)
        with torch.no_grad():
            for (w, _), param in zip(snapped.layers, self.net.weights):
                param.copy_(torch.from_numpy(w.T.copy())[None])

    def state(self) -> dict[str, Any]:
        """What `lowrl compress` needs to rebuild the torch student (for its parity gate)."""
        return {"spec": str(self.spec), "sizes": self.net.sizes, "output_activation": self.output_activation,
                "net": self.net.state_dict()}


def state_from_weights(weights: MlpWeights) -> dict[str, Any]:
    """A student state (as :meth:`Student.state` saves) holding ``weights``: e.g. to gate a teacher as is."""
    if weights.hidden_activation != "relu":
        raise ValueError("only ReLU MLPs have a torch student form (FusedMLP); distil a tanh teacher instead")
    sizes = [weights.input_dim] + [w.shape[0] for w, _ in weights.layers]
    net = FusedMLP(1, sizes)
    with torch.no_grad():
        for (w, b), pw, pb in zip(weights.layers, net.weights, net.biases):
            pw.copy_(torch.from_numpy(w.T.copy())[None])
            pb.copy_(torch.from_numpy(b.copy())[None, None])
    return {"spec": "from-weights", "sizes": sizes, "output_activation": weights.output_activation,
            "net": net.state_dict()}


def torch_action_fn(state: dict[str, Any], contract: PolicyContract) -> Callable[[np.ndarray], np.ndarray]:
    """obs [n, obs_dim] -> action [n, act] computed by torch from a saved student state.

    This is the torch side of the release parity gate: normalisation (and obs clip), the FusedMLP
    layers, the output activation, the action transform and the clamp, all in float32 torch.
    ``contract`` must be the student's (``StudentResult.contract``, or its fp32 artifact's): its
    action transform is the one for the student's output activation.
    """
    net = FusedMLP(1, list(state["sizes"]))
    net.load_state_dict(state["net"])
    offset = torch.tensor(contract.obs_offset, dtype=torch.float32)
    scale = torch.tensor(contract.obs_scale, dtype=torch.float32)
    low = torch.tensor(contract.action_low, dtype=torch.float32)
    high = torch.tensor(contract.action_high, dtype=torch.float32)
    clip = contract.obs_clip
    tanh_out = state["output_activation"] == "tanh"
    a_scale, a_offset = (torch.tensor(v, dtype=torch.float32) for v in contract.action_transform(
        state["output_activation"]))

    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        x = (torch.as_tensor(np.atleast_2d(obs), dtype=torch.float32) - offset) * scale
        if clip is not None:
            x = torch.clamp(x, -clip, clip)
        y = net(x)[0]
        if tanh_out:
            y = torch.tanh(y)
        y = a_scale * y + a_offset
        return torch.minimum(torch.maximum(y, low), high).double().numpy()

    return act


# --- the distillation loop -----------------------------------------------------------------------

@dataclass
class StudentResult:
    """One distilled student and how its deployed form did."""

    spec: StudentSpec
    weights: MlpWeights
    state: dict[str, Any]
    int8_path: Path
    fp32_path: Path
    deployed: EvalResult
    kept: float
    artifact_bytes: int
    nnz: int
    losses: list[float]
    contract: PolicyContract | None = None  # the student's (its artifacts'); torch_action_fn needs this one
    action_error: dict[str, float] = field(default_factory=dict)


@dataclass
class DistillResult:
    teacher: Teacher
    teacher_eval: EvalResult
    students: list[StudentResult]
    dataset_size: int
    out_dir: Path
    report_path: Path | None = None
    plot_path: Path | None = None


def distill(teacher: Teacher, cfg: DistillConfig, out_dir: str | Path,
            contract_overrides: dict[str, Any] | None = None) -> DistillResult:
    """Distil ``teacher`` into ``cfg.students``, export each as int8 and evaluate it deployed.

    Writes into ``out_dir``: ``<tier>_fp32.onnx``, ``<tier>_int8.onnx``, ``<tier>.pt`` (the torch
    student, for the release parity gate), ``distill.json`` and ``distill.png``.

    Args:
        teacher: from :func:`load_teacher`.
        cfg: the distillation settings.
        out_dir: created if needed.
        contract_overrides: fields of the students' contracts (version, parent_version, provenance).
    """
    from lowrl_ros.core.train.progress import ProgressLine

    env_id = cfg.env_id or teacher.contract.env_id
    if not env_id:
        raise ValueError("the teacher's contract names no env_id; pass --env-id (e.g. Pendulum-v1)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    out_act = teacher.weights.output_activation if cfg.student_output == "auto" else cfg.student_output
    # The students' contract: the teacher's observation side, an action transform right for their output.
    c = teacher.student_contract(out_act)
    teacher_eval = evaluate(lambda o: teacher.actions(o)[0], env_id, cfg.eval_episodes, cfg.eval_seed)
    base_states = collect_teacher_states(teacher, env_id, cfg.teacher_episodes, cfg.teacher_noise, cfg.seed)
    # States no student trains on (other seeds): how far the deployed int8 student acts from the teacher.
    held_out = collect_teacher_states(teacher, env_id, 2, cfg.teacher_noise, cfg.seed + 1)[::2]
    total = cfg.bc_steps + cfg.dagger_rounds * cfg.dagger_steps + cfg.qat_steps
    bar = ProgressLine(total * len(cfg.specs), enabled=cfg.progress)
    results = []
    for si, spec in enumerate(cfg.specs):
        torch.manual_seed(cfg.seed + 1000 * si)
        rng = np.random.default_rng(cfg.seed + si)
        student = Student(spec, c.obs_dim, c.action_dim, out_act, cfg, total)
        states = base_states
        x = torch.as_tensor(normalise(c, states), dtype=torch.float32)
        y = torch.as_tensor(teacher.student_targets(states, c, out_act), dtype=torch.float32)
        losses: list[float] = []

        def fit(steps: int, fake_quant: bool = False) -> None:
            for _ in range(steps):
                idx = torch.as_tensor(rng.integers(0, len(x), cfg.batch_size))
                losses.append(student.train_step(x[idx], y[idx], fake_quant))
                done = si * total + student.steps
                bar.update(done, {"student": spec.name, "data": str(len(x)), "loss": f"{losses[-1]:.2e}"})

        fit(cfg.bc_steps)
        for r in range(cfg.dagger_rounds):
            # DAgger: the student drives; the teacher labels what it sees. beta_r = 0.5^(r+1) of the
            # steps still follow the teacher (Ross et al. 2011 mix in the expert early on).
            # The rollouts run the int8-rounded weights, so the states relabelled are the ones the
            # deployed student will reach (activations stay float here: their error is smaller).
            w = fake_quantize(student.weights(), cfg.percentile)
            beta = 0.5 ** (r + 1)

            def mixed(obs: np.ndarray) -> np.ndarray:
                if rng.random() < beta:
                    return teacher.actions(obs)[0]
                return reference_action(w, c, obs[None])[0]

            new = rollout_states(env_id, mixed, cfg.dagger_episodes, cfg.seed + 70_000 + 100 * r + 10_000 * si)
            states = np.concatenate([states, new])
            x = torch.as_tensor(normalise(c, states), dtype=torch.float32)
            y = torch.as_tensor(teacher.student_targets(states, c, out_act), dtype=torch.float32)
            fit(cfg.dagger_steps)
        if cfg.qat_steps:
            fit(cfg.qat_steps, fake_quant=True)
            student.snap_to_int8(cfg.percentile)
        weights = student.weights()
        overrides = dict(contract_overrides or {})
        # The teacher's provenance describes the teacher (its sparsity, its training steps): keep it, prefixed.
        provenance = {**{f"teacher.{k}": v for k, v in c.provenance.items() if not k.startswith("teacher")},
                      "tool": "lowrl distill", "teacher": Path(teacher.source).name,
                      "teacher_kind": teacher.kind, "student": str(spec), "mask_method": cfg.mask_method,
                      "dagger_rounds": str(cfg.dagger_rounds), "qat_steps": str(cfg.qat_steps),
                      "clip_percentile": str(cfg.clip_percentile), "seed": str(cfg.seed),
                      **overrides.pop("provenance", {})}
        contract = dataclasses.replace(c, tier=spec.name, env_id=env_id, provenance=provenance, **overrides)
        fp32_path = save_artifact(out / f"{spec.name}_fp32.onnx", weights, contract)
        int8_path = save_artifact(out / f"{spec.name}_int8.onnx", clip_outliers(weights, cfg.percentile), contract,
                                  int8=True)
        torch.save(student.state(), out / f"{spec.name}.pt")
        deployed_policy = load_artifact(int8_path)  # the robot's runtime, int8
        deployed = evaluate(deployed_policy.act, env_id, cfg.eval_episodes, cfg.eval_seed)
        span = np.array(c.action_high) - np.array(c.action_low)
        a8 = np.stack([deployed_policy.act(o) for o in held_out])
        fp32_policy = load_artifact(fp32_path, engine="ort")
        gap = np.abs(a8 - teacher.actions(held_out)) / span  # distillation + quantization error
        qgap = np.abs(a8 - np.stack([fp32_policy.act(o) for o in held_out])) / span  # quantization alone
        results.append(StudentResult(spec, weights, student.state(), int8_path, fp32_path, deployed,
                                     kept_fraction(deployed.mean, teacher_eval.mean), deployed_policy.nbytes,
                                     weights.nnz, losses, contract, {"vs_teacher_max": float(gap.max()),
                                                           "vs_teacher_mean": float(gap.mean()),
                                                           "int8_vs_fp32_max": float(qgap.max()),
                                                           "int8_vs_fp32_mean": float(qgap.mean()),
                                                           "states": len(held_out)}))
    bar.close()
    result = DistillResult(teacher, teacher_eval, results, len(x), out)
    result.report_path = write_report(result, cfg, env_id)
    result.plot_path = plot(result, out / "distill.png")
    return result


def write_report(result: DistillResult, cfg: DistillConfig, env_id: str) -> Path:
    """``distill.json``: teacher and student returns (deployed int8), sizes, the config."""
    t = result.teacher
    doc = {
        "env_id": env_id,
        "teacher": {"source": t.source, "path": str(Path(t.source).resolve()), "kind": t.kind,
                    "state_dict_bytes": t.state_dict_bytes,
                    "return_mean": result.teacher_eval.mean, "return_std": result.teacher_eval.std,
                    "returns": list(result.teacher_eval.returns), "params": t.weights.macs},
        "students": [{
            "name": s.spec.name, "spec": str(s.spec), "output_activation": s.weights.output_activation,
            "int8_artifact": s.int8_path.name,
            "fp32_artifact": s.fp32_path.name,
            "torch_state": f"{s.spec.name}.pt", "deployed_return_mean": s.deployed.mean,
            "deployed_return_std": s.deployed.std, "returns": list(s.deployed.returns), "kept_fraction": s.kept,
            "artifact_bytes": s.artifact_bytes, "nnz_weights": s.nnz, "weights": s.weights.macs,
            "sparsity": s.weights.sparsity, "compression_vs_teacher_state_dict": t.state_dict_bytes / s.artifact_bytes,
            "final_loss": s.losses[-1] if s.losses else None,
            "action_error_vs_teacher": s.action_error,
        } for s in result.students],
        "dataset_states": result.dataset_size,
        "config": cfg.to_dict(),
        "evaluation": f"{cfg.eval_episodes} episodes, seeds {cfg.eval_seed}..{cfg.eval_seed + cfg.eval_episodes - 1}, "
                      "students as int8 artifacts through load_artifact",
    }
    path = result.out_dir / "distill.json"
    path.write_text(json.dumps(doc, indent=2, default=float) + "\n")
    return path


def plot(result: DistillResult, path: Path) -> Path | None:
    """PNG: deployed return against size on disk, teacher (fp32 state_dict) vs students (int8 artifact)."""
    try:
        plt = pyplot()
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    t = result.teacher_eval
    ax.errorbar([result.teacher.state_dict_bytes], [t.mean], yerr=[t.std], fmt="s", color="k", capsize=4,
                label="teacher (fp32 state_dict)")
    for s in result.students:
        ax.errorbar([s.artifact_bytes], [s.deployed.mean], yerr=[s.deployed.std], fmt="o", capsize=4,
                    label=f"{s.spec} int8 ({s.kept:.1%} kept)")
    ax.set_xscale("log")
    ax.set_xlabel("bytes on disk (log)")
    ax.set_ylabel(f"return, {len(t.returns)} episodes ({t.env_id})")
    ax.set_title("teacher vs deployed students")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
