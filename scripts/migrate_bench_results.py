#!/usr/bin/env python3
"""Move bench_results/ to the layout of lowrl_ros/bench/record.py, from ONE explicit mapping.

    python3 scripts/migrate_bench_results.py --check          every tracked file mapped, no target taken twice
    python3 scripts/migrate_bench_results.py --apply          git mv each file, write the archive NOTE.md files
                                                              and regenerate bench_results/README.md
    python3 scripts/migrate_bench_results.py --rewrite FILES  rewrite references to old paths inside text files

Old names left out the environment (a one-environment run reused a two-environment run's name: 43b0215
overwrote f843a89's train_mujoco_td3.json), seed 0 had no suffix and each sub-folder had its own rule.
Settings are named as record.setting_of() names them from the recorded command (train/mujoco: as
bench/train.py's _mujoco_setting); several environments in one result share a folder ``A+B``.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OLD, NEW = "bench_results/", "bench_results/"

_HC, _HOP, _BOTH = "HalfCheetah-v5", "Hopper-v5", "HalfCheetah-v5+Hopper-v5"
_NSTEP = "archive/2026-11-25_nstep_at_30pct/"
_SPEED_AVX2 = "archive/2026-11-25_train_speed_on_an_avx2_machine/"
_EXAMPLE_GAP = "archive/2026-11-25_sim2real_gap_without_encoder_offset/"
_DISTILL_HC = ("bc_steps20000_dagger_rounds5_dagger_steps2000_eval_episodes10_qat_steps0_"
               "students_lite-64x2at0.9_small-48x2at0.8_micro-32x2at0.8")
_S2R = "Pendulum-v1+InvertedPendulum-v5"


def _stem(old: str, new: str, exts: tuple[str, ...] = ("json", "md")) -> dict[str, str]:
    return {f"{old}.{e}": f"{new}.{e}" for e in exts}


# old path (relative to bench_results/) -> new path. Every tracked file appears once.
MAPPING: dict[str, str] = {
    **_stem("actorq", "actorq/Pendulum-v1/seed0", ("json", "md", "png")),
    **_stem("inference", "inference/seed0", ("json", "md", "png")),
    **_stem("loop", "loop/result", ("json", "md", "png")),
    **_stem("budget", "budget/seconds12/result"),
    **_stem("budget_cpu/budget", "budget/only_cpu_repeats3_seconds10/result"),
    **_stem("distill", f"distill/preset/{'Pendulum-v1+InvertedPendulum-v5'}/seed0"),
    "distill_Pendulum-v1.png": "distill/preset/Pendulum-v1+InvertedPendulum-v5/seed0_Pendulum-v1.png",
    "distill_InvertedPendulum-v5.png": "distill/preset/Pendulum-v1+InvertedPendulum-v5/seed0_InvertedPendulum-v5.png",
    **_stem("distill_halfcheetah/distill", f"distill/{_DISTILL_HC}/{_HC}/seed0"),
    "distill_halfcheetah/distill_HalfCheetah-v5.png": f"distill/{_DISTILL_HC}/{_HC}/seed0_{_HC}.png",
    **_stem("sim2real", f"sim2real/all_versions/{_S2R}/result"),
    **_stem("sim2real_pendulum_b256/sim2real", "sim2real/all_versions_train_set_batch_size256/Pendulum-v1/result"),
    **_stem("sim2real_pendulum_offset_50ep/sim2real", "sim2real/all_versions_eval_episodes50/Pendulum-v1/result"),
    **_stem("sim2real_pendulum_oracle/sim2real",
            "sim2real/all_versions_eval_episodes50_oracle_oracle_steps30000/Pendulum-v1/result"),
    **_stem("sim2real_pendulum_plain/sim2real",
            "sim2real/all_versions_eval_episodes50_plain_judging/Pendulum-v1/result"),
    # `lowrl bench sim2real` before 7822216 gave Pendulum-v1's gap the 0.3 rad encoder offset
    **_stem("sim2real_example_gap/sim2real", f"{_EXAMPLE_GAP}sim2real/preset/{_S2R}/result"),
    **_stem("train_kernels", "train/kernels/result"),
    **_stem("train_pendulum", "train/pendulum/result"),
    **_stem("train_speed", "train/speed/preset/result"),
    **_stem("train_speed_threads2", "train/speed/threads2/result"),
    # the same command on the earlier (AVX2) machine; 1c1f5d9 reran it on the AVX-512 one
    **_stem("train_speed_avx2_2026-11-23", f"{_SPEED_AVX2}train/speed/preset/result"),
    # train --part mujoco / seeds
    **_stem("train_mujoco", f"train/mujoco/sac_preset/{_BOTH}/seed0"),
    **_stem("train_mujoco_td3", f"train/mujoco/td3_preset/{_HC}/seed0"),
    **_stem("train_mujoco_td3_s1", f"train/mujoco/td3_preset/{_HC}/seed1"),
    **_stem("train_mujoco_td3_s2", f"train/mujoco/td3_preset/{_HC}/seed2"),
    **{k: v for s in range(3, 8) for k, v in
       _stem(f"train_mujoco_td3_s{s}", f"train/mujoco/td3_preset/{_HC}/seed{s}", ("json", "md", "png")).items()},
    **_stem("train_mujoco_td3_seeds_halfcheetah", f"train/mujoco/td3_preset/{_HC}/summary", ("json", "md", "png")),
    **_stem("train_mujoco_td3_a0.9_c0.85", f"train/mujoco/td3_a0.9_c0.85/{_HOP}/seed0"),
    **_stem("train_mujoco_td3_a0.9_c0.85_s1", f"train/mujoco/td3_a0.9_c0.85/{_HOP}/seed1"),
    **_stem("train_mujoco_td3_a0.9_c0.85_s2", f"train/mujoco/td3_a0.9_c0.85/{_HOP}/seed2", ("json", "md", "png")),
    **_stem("train_mujoco_td3_a0.9_c0.85_s3", f"train/mujoco/td3_a0.9_c0.85/{_HOP}/seed3", ("json", "md", "png")),
    **_stem("train_mujoco_td3_a0.9_c0.85_seeds_hopper", f"train/mujoco/td3_a0.9_c0.85/{_HOP}/summary",
            ("json", "md", "png")),
    **_stem("train_mujoco_td3_sparse_initscaled_s3", f"train/mujoco/td3_sparse_initscaled/{_HC}/seed3",
            ("json", "md", "png")),
    **_stem("train_mujoco_td3_sparse_initscaled_s4", f"train/mujoco/td3_sparse_initscaled/{_HC}/seed4",
            ("json", "md", "png")),
    **_stem("train_mujoco_td3_mask_interval10000/train_mujoco_td3", f"train/mujoco/td3_mask_interval10000/{_HC}/seed0"),
    # the n-step-at-30 % schedule (43b0215, fd8cce5 reran them); train_mujoco_td3.json is f843a89's
    # HalfCheetah + Hopper result that 43b0215 overwrote at the top level
    **_stem("train_mujoco_td3_nstep_at_30pct/train_mujoco_td3", f"{_NSTEP}train/mujoco/td3_preset/{_BOTH}/seed0"),
    **_stem("train_mujoco_td3_nstep_at_30pct/train_mujoco_td3_s1", f"{_NSTEP}train/mujoco/td3_preset/{_HC}/seed1"),
    **_stem("train_mujoco_td3_nstep_at_30pct/train_mujoco_td3_s2", f"{_NSTEP}train/mujoco/td3_preset/{_HC}/seed2"),
    **_stem("train_mujoco_td3_nstep_at_30pct/train_mujoco_td3_a0.9_c0.85",
            f"{_NSTEP}train/mujoco/td3_a0.9_c0.85/{_HOP}/seed0"),
    **_stem("train_mujoco_td3_nstep_at_30pct/train_mujoco_td3_a0.9_c0.85_s1",
            f"{_NSTEP}train/mujoco/td3_a0.9_c0.85/{_HOP}/seed1"),
}

# Old folders as a whole (references such as `bench_results/sim2real_pendulum_oracle/`).
FOLDERS: dict[str, str] = {
    "budget_cpu": "budget/only_cpu_repeats3_seconds10",
    "distill_halfcheetah": f"distill/{_DISTILL_HC}/{_HC}",
    "sim2real_example_gap": f"{_EXAMPLE_GAP}sim2real/preset/{_S2R}",
    "sim2real_pendulum_b256": "sim2real/all_versions_train_set_batch_size256/Pendulum-v1",
    "sim2real_pendulum_offset_50ep": "sim2real/all_versions_eval_episodes50/Pendulum-v1",
    "sim2real_pendulum_oracle": "sim2real/all_versions_eval_episodes50_oracle_oracle_steps30000/Pendulum-v1",
    "sim2real_pendulum_plain": "sim2real/all_versions_eval_episodes50_plain_judging/Pendulum-v1",
    "train_mujoco_td3_mask_interval10000": f"train/mujoco/td3_mask_interval10000/{_HC}",
    "train_mujoco_td3_nstep_at_30pct": _NSTEP.rstrip("/"),
}

NOTES: dict[str, str] = {
    _NSTEP: """# Superseded 2026-11-25: nstep_at_30pct

TD3 RLx2 results of the earlier schedule (n-step returns from 30 % of training), kept by hand in
`bench_results/train_mujoco_td3_nstep_at_30pct/` until this archive existed.

- `train/mujoco/td3_preset/HalfCheetah-v5+Hopper-v5/seed0.*` is f843a89's HalfCheetah + Hopper result
  (`lowrl bench train --part mujoco --algo td3 --steps 300000`). 43b0215 overwrote it at the top level with a
  HalfCheetah-only run because the old file name left out the environment. Its dense HalfCheetah score is the
  `--dense-from` of the current `train/mujoco/td3_preset/HalfCheetah-v5/seed0.json`, and `--dense-from`
  of the current Hopper seed 0 and 1 files names the `td3_a0.9_c0.85` files here.
- Replaced by (current code: n-step after the paper's 300k gradient steps, the reference's buffer rule):
  HalfCheetah seeds 0-2 by `train/mujoco/td3_preset/HalfCheetah-v5/seed{0,1,2}.*` (43b0215); Hopper 90/85 %
  seeds 0-1 by `train/mujoco/td3_a0.9_c0.85/Hopper-v5/seed{0,1}.*` (fd8cce5). Hopper at the paper's
  sparsities (in the two-environment file) has no replacement.

Paths inside the files (commands, `recorded_in`) are as recorded, with the old names.
""",
    _SPEED_AVX2: """# Superseded 2026-11-25: train_speed_on_an_avx2_machine

`lowrl bench train --part speed` of 2026-11-23 on the AVX2 AMD EPYC machine (was
`bench_results/train_speed_avx2_2026-11-23.*`). Replaced by the same command on the AVX-512 AMD EPYC machine
(1c1f5d9): `train/speed/preset/result.*`.
""",
    _EXAMPLE_GAP: """# Superseded 2026-11-25: sim2real_gap_without_encoder_offset

`lowrl bench sim2real` of 2026-11-24, when Pendulum-v1's gap was the example gap alone (was
`bench_results/sim2real_example_gap/`). 7822216 added a 0.3 rad encoder zero offset to Pendulum-v1's gap;
replaced by `sim2real/all_versions/Pendulum-v1+InvertedPendulum-v5/result.*`.
""",
}


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "bench_results"], cwd=REPO, check=True, capture_output=True, text=True)
    return [line[len(OLD):] for line in out.stdout.splitlines()]


def check(files: list[str]) -> list[str]:
    """What is wrong with MAPPING against ``files`` (tracked, relative to bench_results/): empty when all is well."""
    problems = [f"not mapped: {f}" for f in files if f not in MAPPING]
    problems += [f"mapped but not tracked: {f}" for f in MAPPING if f not in files]
    targets = list(MAPPING.values())
    problems += [f"target taken twice: {t}" for t in sorted(set(targets)) if targets.count(t) > 1]
    return problems


def apply() -> int:
    files = [f for f in tracked() if f != "README.md"]  # the index is regenerated, never moved
    problems = check(files)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    for old, new in MAPPING.items():
        dest = REPO / NEW / new
        dest.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "mv", OLD + old, NEW + new], cwd=REPO, check=True)
    for folder, text in NOTES.items():
        (REPO / NEW / folder / "NOTE.md").write_text(text)
    sys.path.insert(0, str(REPO))
    from lowrl_ros.bench.record import write_index

    write_index(REPO / "bench_results")
    after = [f for f in tracked()]
    print(f"moved {len(MAPPING)} files; bench_results/ holds {len(files)} result files before, "
          f"{len([f for f in after if f in set(MAPPING.values())])} after (+ NOTE.md and README.md files to add)")
    return 0


def _rewrites() -> list[tuple[str, str]]:
    pairs = [(OLD + o, NEW + n) for o, n in MAPPING.items()]
    pairs += [(OLD + o + "/", NEW + n + "/") for o, n in FOLDERS.items()]
    pairs += [(OLD + o, NEW + n) for o, n in FOLDERS.items()]
    return sorted(pairs, key=lambda p: -len(p[0]))  # longest first: a file inside a folder before the folder


def rewrite_text(text: str) -> str:
    """``text`` with every old bench_results/ path (file or folder) replaced by its new one."""
    pairs = _rewrites()
    pattern = re.compile("|".join(re.escape(o) + r"(?![A-Za-z0-9_-]|\.[A-Za-z0-9])" for o, _ in pairs))
    table = dict(pairs)
    return pattern.sub(lambda m: table[m.group(0)], text)


def rewrite(paths: list[Path]) -> int:
    changed = 0
    for path in paths:
        if path.resolve() == Path(__file__).resolve():  # the mapping itself names the old paths
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, IsADirectoryError):
            continue
        new = rewrite_text(text)
        if new != text:
            path.write_text(new)
            changed += 1
            print(f"rewrote {path}")
    print(f"{changed} file(s) changed")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--check", action="store_true")
    group.add_argument("--apply", action="store_true")
    group.add_argument("--rewrite", nargs="+", type=Path, metavar="FILE")
    args = parser.parse_args(argv)
    if args.check:
        files = [f for f in tracked() if f != "README.md"]
        if set(MAPPING.values()) <= set(files):
            print(f"already applied: all {len(MAPPING)} targets are tracked")
            return 0
        problems = check(files)
        print("\n".join(problems) or f"ok: {len(MAPPING)} files mapped")
        return 1 if problems else 0
    if args.apply:
        return apply()
    return rewrite(args.rewrite)


if __name__ == "__main__":
    sys.exit(main())
