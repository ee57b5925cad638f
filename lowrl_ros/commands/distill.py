"""`lowrl distill TEACHER -o DIR`: small sparse int8 students from a teacher actor (BC + DAgger).

TEACHER is an artifact (.onnx), a `lowrl train` run directory (its actor.onnx) or a
Stable-Baselines3 SAC/TD3 zip. Every DistillConfig field is a flag; ``--config YAML`` reads the
``distill:`` section of a preset (config/compress_*.yaml) first. Each student is written as
``<tier>_int8.onnx`` (evaluated in that deployed form), ``<tier>_fp32.onnx`` and ``<tier>.pt``;
``distill.json`` and ``distill.png`` compare teacher and students. `lowrl compress DIR` releases them.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lowrl_ros.commands._config_flags import add_config_flags, config_from, read_preset


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lowrl_ros.core.compress.distill import DistillConfig

    parser.add_argument("teacher", help="teacher: artifact .onnx, `lowrl train` run dir, or SB3 SAC/TD3 .zip")
    parser.add_argument("-o", "--output", type=Path, required=True, help="output directory for the students")
    parser.add_argument("--config", default=None, help="preset YAML (its distill: section); flags override it")
    add_config_flags(parser, DistillConfig)


def run(args: argparse.Namespace) -> int:
    try:
        from lowrl_ros.core.compress.distill import DistillConfig, distill, load_teacher
    except ImportError as exc:
        print(f"lowrl distill: needs torch (an off-board extra): {exc}", file=sys.stderr)
        return 2
    try:
        cfg = config_from(DistillConfig, args, read_preset(args.config, "distill"))
        teacher = load_teacher(args.teacher, env_id=cfg.env_id or None)
        result = distill(teacher, cfg, args.output)
    except (ValueError, ImportError) as exc:
        print(f"lowrl distill: {exc}", file=sys.stderr)
        return 2
    t = result.teacher_eval
    print(f"teacher {teacher.source}: {t} (fp32 state_dict {teacher.state_dict_bytes} bytes)")
    for s in result.students:
        print(f"  {s.spec}: deployed int8 {s.deployed} -> keeps {s.kept:.1%}; {s.artifact_bytes} bytes "
              f"({teacher.state_dict_bytes / s.artifact_bytes:.0f}x smaller), {s.nnz} non-zero weights")
    plot = result.plot_path.name if result.plot_path else "no plot: matplotlib is missing"
    print(f"wrote {result.out_dir} ({result.report_path.name}, {plot})")
    return 0
