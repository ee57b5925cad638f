"""`lowrl distill TEACHER -o DIR`: small sparse int8 students from a teacher actor (BC + DAgger).

TEACHER is an artifact (.onnx), a `lowrl train` run directory (its actor.onnx) or a
Stable-Baselines3 SAC/TD3 zip. Every DistillConfig field is a flag; ``--config YAML`` reads the
``distill:`` section of a preset (config/compress_*.yaml) first. Each student is written as
``<tier>_int8.onnx`` (evaluated in that deployed form), ``<tier>_fp32.onnx`` and ``<tier>.pt``;
``distill.json`` and ``distill.png`` compare teacher and students. `lowrl compress DIR` releases them.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any


def add_config_flags(parser: argparse.ArgumentParser, cls: Any, skip: set[str] = frozenset()) -> None:
    """One flag per dataclass field (``--bc-steps`` for ``bc_steps``), defaulting to None (= config/preset)."""
    group = parser.add_argument_group(f"{cls.__name__} fields")
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        help_text = f"{f.metadata.get('help', '')} (default {f.default})"
        if isinstance(f.default, bool):
            group.add_argument(flag, dest=f.name, default=None, action=argparse.BooleanOptionalAction, help=help_text)
        elif isinstance(f.default, tuple):
            group.add_argument(flag, dest=f.name, default=None, nargs="+", help=help_text)
        else:
            kind = type(f.default) if f.default is not None else int
            group.add_argument(flag, dest=f.name, default=None, type=kind, help=help_text)


def config_from(cls: Any, args: argparse.Namespace, preset: dict | None) -> Any:
    """``cls`` from a preset section, then the flags that were given."""
    data = dict(preset or {})
    unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)} for {cls.__name__}; "
                         f"known: {[f.name for f in dataclasses.fields(cls)]}")
    for f in dataclasses.fields(cls):
        value = getattr(args, f.name, None)
        if value is not None:
            data[f.name] = tuple(value) if isinstance(f.default, tuple) else value
    if "students" in data and isinstance(data["students"], list):
        data["students"] = tuple(data["students"])
    return cls(**data)


def read_preset(path: str | None, section: str) -> dict:
    if not path:
        return {}
    import yaml

    try:
        doc = yaml.safe_load(Path(path).read_text()) or {}
    except FileNotFoundError:
        raise ValueError(f"--config {path}: no such file; see config/compress_pendulum.yaml for an example") from None
    if not isinstance(doc, dict) or not isinstance(doc.get(section, {}), dict):
        raise ValueError(f"--config {path}: expected a mapping with a '{section}:' section")
    return doc.get(section) or {}


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
