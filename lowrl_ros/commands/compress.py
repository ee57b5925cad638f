"""`lowrl compress TEACHER_OR_STUDENTS -o BUNDLE.lowrl --version N [--parent-version M]`: gate and release.

TEACHER_OR_STUDENTS is either a `lowrl distill` output directory (students already trained; its
``distill.json`` names the teacher) or a teacher (artifact, `lowrl train` run dir, SB3 zip), which
is distilled first with the preset's ``distill:`` section. Then every tier passes three gates
(fp32 ONNX vs torch parity, int8 vs fp32 action error, deployed return vs the teacher's); only if
all pass is the bundle written (atomically). ``BUNDLE.release.json`` / ``.release.md`` say what
was measured either way. Exit status: 0 released, 1 a gate stopped the release, 2 bad input.

``--lite NAME:WIDTHxDEPTH@SPARSITY`` gives any policy a lite tier: the teacher itself (an imported
artifact, as it is) becomes the "full" tier and only the lite student is distilled, in the teacher's
environment, on the teacher's contract (same observation, rate and action transform). The gates run
on both; a student that fails them is not released and an existing bundle stays as it was.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import tempfile
from pathlib import Path

from lowrl_ros.commands._config_flags import add_config_flags, config_from, read_preset


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lowrl_ros.core.compress.distill import DistillConfig
    from lowrl_ros.core.compress.release import ReleaseConfig

    parser.add_argument("source", help="`lowrl distill` output dir, or a teacher (artifact, run dir, SB3 zip)")
    parser.add_argument("-o", "--output", type=Path, required=True, help="bundle to write (.lowrl)")
    parser.add_argument("--config", default=None,
                        help="preset YAML with distill: and release: sections (config/compress_pendulum.yaml)")
    parser.add_argument("--teacher", default=None,
                        help="teacher of a students dir (default: the one distill.json names)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where to keep the students when distilling a teacher (default: a temporary dir)")
    parser.add_argument("--lite", default=None, metavar="WIDTHxDEPTH@SPARSITY",
                        help="keep the teacher as the full tier and distil only a lite student, e.g. 64x2@0.8 "
                             "(a lite tier for any imported policy: docs/budget.md)")
    add_config_flags(parser, ReleaseConfig)
    add_config_flags(parser, DistillConfig, skip=SHARED, title="DistillConfig fields (only when SOURCE is a teacher)")


# Fields of both stages: one flag sets them for distillation and release alike.
SHARED = ("env_id", "eval_episodes", "eval_seed", "clip_percentile", "seed")
# DistillConfig fields a re-distil command line never needs to repeat.
_NOT_REPEATED = ("progress", "threads", "qat_steps")


def distill_flags_given(args: argparse.Namespace) -> list[str]:
    """The distillation flags on this command line, with their values: they only act when compress distils."""
    from lowrl_ros.core.compress.distill import DistillConfig

    given = []
    for f in dataclasses.fields(DistillConfig):
        value = None if f.name in SHARED else getattr(args, f.name, None)
        if value is not None:
            values = value if isinstance(value, (list, tuple)) else [value]
            flag = "--" + f.name.replace("_", "-") if not isinstance(value, bool) else \
                ("--" if value else "--no-") + f.name.replace("_", "-")
            given.append(" ".join([flag] + ([] if isinstance(value, bool) else [shlex.quote(str(v)) for v in values])))
    return given


def read_manifest(students_dir: Path) -> dict:
    """A students dir's ``distill.json``; ValueError saying how to make it when it cannot be read."""
    manifest = students_dir / "distill.json"
    try:
        return json.loads(manifest.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{manifest}: cannot read it ({exc}); run `lowrl distill` into {students_dir} first") from None


def redistill_for(students_dir: Path, teacher_arg: str | None):
    """The `lowrl distill` line that re-makes a students dir as it was made (every non-default field)."""
    from lowrl_ros.core.compress.distill import DistillConfig
    from lowrl_ros.core.compress.release import Redistill

    doc = read_manifest(students_dir)
    teacher = teacher_arg or doc["teacher"]["source"]
    if not Path(teacher).exists():  # made from another directory: the absolute path still names it
        teacher = doc["teacher"].get("path", teacher)
    made = doc.get("config", {})
    defaults = DistillConfig()
    parts = ["lowrl distill", shlex.quote(str(teacher)), "-o", shlex.quote(str(students_dir))]
    for f in dataclasses.fields(DistillConfig):
        value = made.get(f.name, getattr(defaults, f.name))
        if f.name in _NOT_REPEATED or f.name == "env_id" and not value:
            continue
        default = getattr(defaults, f.name)
        if isinstance(default, tuple):
            value = tuple(value)
        if value != default or f.name == "students":  # the students are always spelled out
            flag = "--" + f.name.replace("_", "-")
            parts += [flag] + [shlex.quote(str(v)) for v in (value if isinstance(value, tuple) else (value,))]
    return Redistill(" ".join(parts), int(made.get("qat_steps", 0)),
                     int(made.get("dagger_rounds", defaults.dagger_rounds)))


def candidates_from_dir(students_dir: Path, teacher_arg: str | None):
    """(teacher, candidates) from a `lowrl distill` output directory."""
    import torch

    from lowrl_ros.core.runtime.artifact import load_weights
    from lowrl_ros.core.compress.distill import load_teacher, torch_action_fn
    from lowrl_ros.core.compress.release import Candidate

    doc = read_manifest(students_dir)
    source = teacher_arg or doc["teacher"].get("path", doc["teacher"]["source"])
    teacher = load_teacher(source, env_id=doc.get("env_id"))
    cands = []
    for s in doc["students"]:
        weights, contract = load_weights(students_dir / s["fp32_artifact"])
        state = torch.load(students_dir / s["torch_state"], map_location="cpu", weights_only=False)
        cands.append(Candidate(s["name"], weights, torch_action_fn(state, contract),
                               {"student": s["spec"], "distill_dir": students_dir.name}))
    return teacher, cands


def run(args: argparse.Namespace) -> int:
    try:
        from lowrl_ros.core.compress.distill import DistillConfig, distill, load_teacher, torch_action_fn
        from lowrl_ros.core.compress.release import Candidate, Redistill, ReleaseConfig, release
    except ImportError as exc:
        print(f"lowrl compress: needs torch (an off-board extra): {exc}", file=sys.stderr)
        return 2
    try:
        rcfg = config_from(ReleaseConfig, args, read_preset(args.config, "release"))
        source = Path(args.source)
        with tempfile.TemporaryDirectory(prefix="lowrl-compress-") as tmp:
            if (source / "distill.json").is_file():
                redistill = redistill_for(source, args.teacher)
                given = " ".join(distill_flags_given(args))
                # Accepted by the parser for a teacher; with trained students they would change nothing: refuse.
                if given:
                    raise ValueError(f"{given}: distillation flags act only when compress distils a teacher, and "
                                     f"{source} holds students already distilled. Re-distil them with the change, "
                                     f"`{redistill.with_flags(given)}`, then run this compress again (or give "
                                     "compress the teacher to distil and release in one go)")
                if args.work_dir is not None:
                    raise ValueError(f"--work-dir keeps the students compress distils from a teacher; {source} is "
                                     "a students dir already: drop --work-dir")
                if args.lite:
                    raise ValueError(f"--lite distils a student from a teacher; {source} is a students dir already: "
                                     "give the teacher instead")
                teacher, cands = candidates_from_dir(source, args.teacher)
            else:
                dpreset = read_preset(args.config, "distill")
                for name in SHARED:
                    dpreset[name] = getattr(rcfg, name)  # one value for both stages
                if args.lite:
                    if getattr(args, "students", None):
                        raise ValueError("--lite names the one student to distil; drop --students")
                    dpreset["students"] = [f"lite:{args.lite.removeprefix('lite:')}"]
                dcfg = config_from(DistillConfig, args, dpreset)
                redistill = Redistill("", dcfg.qat_steps, dcfg.dagger_rounds)  # the flags are this command's
                teacher = load_teacher(source, env_id=dcfg.env_id or None)
                work = args.work_dir or Path(tmp)
                result = distill(teacher, dcfg, work)
                cands = [Candidate(s.spec.name, s.weights, torch_action_fn(s.state, s.contract),
                                   {"student": str(s.spec)}) for s in result.students]
                if args.lite:  # the teacher as it is: the full tier
                    cands.insert(0, Candidate("full", teacher.weights, teacher.actions, {"student": "teacher"}))
            report = release(cands, teacher.weights, teacher.contract, rcfg, args.output,
                             provenance={"teacher": Path(teacher.source).name, "teacher_kind": teacher.kind},
                             redistill=redistill)
    except (ValueError, ImportError, KeyError) as exc:
        print(f"lowrl compress: {exc}", file=sys.stderr)
        return 2
    if not report.released:
        print(f"lowrl compress: release STOPPED, {len(report.failures)} gate(s) failed; {args.output} not written. "
              f"See {report.report_md}", file=sys.stderr)
        return 1
    tiers = ", ".join(f"{n} {i['bytes']} B" for n, i in report.tiers.items())
    print(f"released {report.bundle} version {report.version} (parent {report.parent_version}), tiers "
          f"{tiers}; report {report.report_md}")
    return 0
