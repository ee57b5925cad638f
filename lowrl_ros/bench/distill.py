"""Deployed int8 sparse students vs their teacher: return kept and size, per environment.

For each ENV=TEACHER case the teacher is distilled (BC + DAgger, lowrl_ros.core.compress.distill) into the
given students; each student is scored as its int8 artifact through ``load_artifact`` on the same
seeded episodes as the teacher (fp32). Sizes: ``torch.save`` of the teacher's fp32 actor
state_dict vs the bytes of the student's artifact file. Targets: keeps >= 97% of the teacher's
return, >= 40x smaller (docs/compression.md, "Benchmark: `lowrl bench distill`"). It also measures,
on held-out states, the action error of the int8 graph with dynamic activations (what the artifact
runs) against static activations calibrated on teacher rollouts (what a static graph would add).
No timings: nothing here is a speed.

    lowrl bench distill                                  # Pendulum-v1 (shipped teacher) + InvertedPendulum-v5
    lowrl bench distill --case Pendulum-v1=models/pendulum_sac_int8.onnx --eval-episodes 5   # quick look

The InvertedPendulum-v5 teacher is a `lowrl train` run:
    lowrl train --env-id InvertedPendulum-v5 --variant dense --algo sac --total-steps 20000 \\
        --eval-interval 2500 --eval-episodes 5 --stop-return 1000 --run-dir runs/e1_invpend_teacher
"""
from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
from pathlib import Path

import numpy as np

DEFAULT_CASES = ["Pendulum-v1=models/pendulum_sac_int8.onnx", "InvertedPendulum-v5=runs/e1_invpend_teacher"]
KEEP_TARGET, SIZE_TARGET = 0.97, 40.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--case", action="append", default=None, metavar="ENV=TEACHER",
                        help="environment and teacher (artifact, run dir or SB3 zip); repeatable "
                             f"(default {DEFAULT_CASES})")
    parser.add_argument("--students", nargs="+", default=["full:256x2@0.9", "lite:64x2@0.8", "micro:32x2@0.8"],
                        help="students NAME:WIDTHxDEPTH@SPARSITY")
    parser.add_argument("--eval-episodes", type=int, default=20, help="seeded episodes for teacher and students")
    parser.add_argument("--bc-steps", type=int, default=3000)
    parser.add_argument("--dagger-rounds", type=int, default=3)
    parser.add_argument("--dagger-steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--qat-student", default="micro:32x2@0.8",
                        help="student distilled twice more, without and with quantization-aware fine-tuning")
    parser.add_argument("--qat-steps", type=int, default=1000,
                        help="fake-quant fine-tuning steps of the QAT run (0: skip)")
    parser.add_argument("--out", type=Path, default=None,
                        help="results root (default bench_results/); the result goes to "
                             "<root>/distill/<setting>/<envs>/seed<N>.*")
    parser.add_argument("--work-dir", type=Path, default=Path("runs/bench_distill"),
                        help="where the students (artifacts, torch states) are kept")


def quantization_analysis(student, teacher, env_id: str, seed: int) -> dict[str, float]:
    """Action error (fraction of the range) of dynamic vs static int8 activations on held-out states."""
    from lowrl_ros.core.compress.distill import collect_teacher_states
    from lowrl_ros.core.compress.quantize import calibrate_activation_ranges, int8_forward
    from lowrl_ros.core.runtime.artifact import reference_action

    c = student.contract or teacher.contract  # the student's own (its output's action transform)
    calib = collect_teacher_states(teacher, env_id, 3, 0.2, seed + 1)
    held_out = collect_teacher_states(teacher, env_id, 3, 0.2, seed + 2)[::4]
    ref = reference_action(student.weights, c, held_out)
    low, high = np.array(c.action_low), np.array(c.action_high)
    span = high - low
    out = {}
    dyn = int8_forward(student.weights, c, held_out, activations="dynamic")
    out["dynamic_max"] = float((np.abs(dyn - ref) / span).max())
    out["dynamic_mean"] = float((np.abs(dyn - ref) / span).mean())
    for p in (100.0, 99.9):
        ranges = calibrate_activation_ranges(student.weights, c, calib, percentile=p)
        st = int8_forward(student.weights, c, held_out, activations="static", ranges=ranges)
        out[f"static_p{p:g}_max"] = float((np.abs(st - ref) / span).max())
        out[f"static_p{p:g}_mean"] = float((np.abs(st - ref) / span).mean())
    return out


def headline(r: dict) -> str:
    """The bench_results headline: per environment, the smallest student that keeps the return target."""
    out = []
    for env_id, e in r.items():
        kept = [s for s in e["students"].values() if s.get("meets_return_target")]
        best = min(kept, key=lambda s: s["artifact_bytes"]) if kept else None
        out.append(f"{env_id}: " + (f"{best['spec']} keeps {100 * best['kept']:.1f} % at {best['smaller_x']:.1f}x "
                                    "smaller" if best else "no student meets the return target"))
    return "; ".join(out)


def run(args: argparse.Namespace) -> int:
    from lowrl_ros.bench import record
    from lowrl_ros.core.compress.distill import DistillConfig, distill, load_teacher

    # The environments are a path level of their own; another teacher for the same environment and flags is
    # another command, which write_result refuses to put over this one.
    cases = args.case or DEFAULT_CASES
    where = {"setting": record.setting_of(args, add_arguments, skip=("case", "out", "work_dir", "seed")),
             "env": [c.partition("=")[0] for c in cases], "seed": args.seed, "root": args.out}
    stem = record.result_path("distill", **where)
    try:  # a result of another command there: refused before the measurement, not after
        record.check_free(stem, record.command_line())
    except record.ResultExists as exc:
        print(f"lowrl bench distill: {exc}", file=sys.stderr)
        return 2
    results, rows, qat_rows = {}, [], []
    for case in cases:
        env_id, _, source = case.partition("=")
        if not source:
            print(f"lowrl bench distill: --case {case!r} is not ENV=TEACHER", file=sys.stderr)
            return 2
        try:
            teacher = load_teacher(source, env_id=env_id)
        except (ValueError, ImportError) as exc:
            print(f"lowrl bench distill: {env_id}: {exc}\n(see `lowrl bench distill -h` for how the teacher is made)",
                  file=sys.stderr)
            return 2
        cfg = DistillConfig(students=tuple(args.students), env_id=env_id, eval_episodes=args.eval_episodes,
                            bc_steps=args.bc_steps, dagger_rounds=args.dagger_rounds, dagger_steps=args.dagger_steps,
                            seed=args.seed, qat_steps=0)  # post-training int8; the QAT table below compares both
        print(f"{env_id}: distilling {source} into {', '.join(cfg.students)}", file=sys.stderr)
        res = distill(teacher, cfg, args.work_dir / env_id)
        plot = stem.parent / f"{stem.name}_{env_id}.png"
        if res.plot_path:
            plot.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(res.plot_path, plot)
        t = res.teacher_eval
        case_res = {"teacher": {"source": source, "kind": teacher.kind, "return_mean": t.mean, "return_std": t.std,
                                "state_dict_bytes": teacher.state_dict_bytes, "weights": teacher.weights.macs},
                    "students": {}, "plot": str(plot),
                    "students_dir": str(res.out_dir)}
        for s in res.students:
            ratio = teacher.state_dict_bytes / s.artifact_bytes
            q = quantization_analysis(s, teacher, env_id, args.seed)
            case_res["students"][s.spec.name] = {
                "spec": str(s.spec), "deployed_return_mean": s.deployed.mean, "deployed_return_std": s.deployed.std,
                "kept": s.kept, "action_error": s.action_error, "artifact_bytes": s.artifact_bytes,
                "smaller_x": ratio, "nnz_weights": s.nnz,
                "meets_return_target": s.kept >= KEEP_TARGET, "meets_size_target": ratio >= SIZE_TARGET,
                "int8_action_error": q}
            rows.append(f"| {env_id} | {s.spec} | {t.mean:.1f} ± {t.std:.1f} "
                        f"| {s.deployed.mean:.1f} ± {s.deployed.std:.1f} "
                        f"| {s.kept:.1%} {'✓' if s.kept >= KEEP_TARGET else '✗'} | {teacher.state_dict_bytes} "
                        f"| {s.artifact_bytes} | {ratio:.1f}x {'✓' if ratio >= SIZE_TARGET else '✗'} | {s.nnz} "
                        f"| {s.action_error['vs_teacher_mean']:.2%} / {s.action_error['vs_teacher_max']:.1%} "
                        f"| {q['dynamic_max']:.2%} / {q['static_p100_max']:.2%} / {q['static_p99.9_max']:.2%} |")
        if args.qat_steps:
            # PTQ vs QAT on the same student: identical seeds and data up to the QAT phase.
            for qat in (0, args.qat_steps):
                qcfg = dataclasses.replace(cfg, students=(args.qat_student,), qat_steps=qat)
                qres = distill(teacher, qcfg, args.work_dir / f"{env_id}-qat{qat}")
                s = qres.students[0]
                e = s.action_error
                case_res.setdefault("qat", {})[f"qat_steps={qat}"] = {
                    "spec": str(s.spec), "deployed_return_mean": s.deployed.mean, "kept": s.kept, **e}
                qat_rows.append(f"| {env_id} | {s.spec} | {qat} | {s.deployed.mean:.1f} ± {s.deployed.std:.1f} "
                                f"| {s.kept:.1%} | {e['int8_vs_fp32_mean']:.3%} / {e['int8_vs_fp32_max']:.2%} "
                                f"| {e['vs_teacher_mean']:.3%} / {e['vs_teacher_max']:.2%} |")
        results[env_id] = case_res
    md = ("Teacher: fp32 (reference forward); students: int8 sparse artifacts through `load_artifact`, "
          f"same seeded episodes. Targets: keeps >= {KEEP_TARGET:.0%} of the teacher's return, artifact >= "
          f"{SIZE_TARGET:.0f}x smaller than the teacher's fp32 actor state_dict (torch.save bytes).\n\n"
          "| env | student | teacher return | deployed return | kept | teacher state_dict B | artifact B | smaller "
          "| non-zero weights | deployed vs teacher action error, mean / max | int8 max action error vs own fp32: "
          "dynamic / static p100 / static p99.9 |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\nPlots: " +
          ", ".join(f"`{r['plot']}`" for r in results.values()) + "\n")
    if qat_rows:
        md += ("\n## Post-training int8 vs quantization-aware fine-tuning\n\nThe same student (same seeds and data), "
               "without and with fake-quant fine-tuning steps; action errors on held-out teacher states, "
               "fraction of the action range (mean / max).\n\n"
               "| env | student | QAT steps | deployed return | kept | int8 vs own fp32 | int8 vs teacher |\n"
               "|---|---|---|---|---|---|---|\n" + "\n".join(qat_rows) + "\n")
    path = record.write_result("distill", results, md, **where)
    print(md)
    print(f"wrote {path}")
    return 0
