"""`lowrl kit ARTIFACT -o KIT_DIR (--env ENV_ID | --transitions LOG)`: a fine-tune kit from any artifact.

The artifact may come from anywhere (`lowrl import` of an SB3 PPO, an rsl_rl / Isaac Lab policy, ...).
The kit's actor is the artifact's network exactly; its critics learn first, with the actor held
still, from rollouts of the policy in a gymnasium environment (the env's reward) or from a
transition log the robot recorded (its rewards). Then finetune_node / the trainer node /
`lowrl bench sim2real` fine-tune it like any kit (docs/finetune.md, "Fine-tune an imported policy").
Refusals are one line on stderr with exit code 2, and leave nothing on disk.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


# The critics' warm-up of a kit: (flag, type, default, help). One place for `lowrl kit` and every command that
# makes a kit on the way (`lowrl bench sim2real --start sb3-ppo` takes them as --kit-<flag>).
WARMUP_ARGUMENTS = (
    ("warmup-steps", int, 5000, "with --env: steps of the policy (with exploration noise) the critics learn from "
                                "(5000)"),
    ("critic-updates", int, 5000, "critic updates before the kit is written; the actor does not move (5000)"),
    ("explore-noise", float, 0.1, "Gaussian exploration noise, a fraction of half the action range (0.1); also "
                                  "TD3's exploration and SAC's initial std while fine-tuning"),
)


def add_warmup_arguments(parser: argparse.ArgumentParser, prefix: str = "", help_prefix: str = "") -> None:
    """Add the kit's warm-up flags (``--warmup-steps``, ``--critic-updates``, ``--explore-noise``) to ``parser``.

    ``prefix`` goes before each flag name (``"kit-"``: ``--kit-warmup-steps``, read back as
    ``args.kit_warmup_steps``), ``help_prefix`` before each help text (e.g. ``"--start sb3-ppo: "``)."""
    for name, kind, default, text in WARMUP_ARGUMENTS:
        parser.add_argument(f"--{prefix}{name}", type=kind, default=default, help=help_prefix + text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("artifact", type=Path, help="the policy artifact (.onnx) the robot runs (lowrl import)")
    parser.add_argument("-o", "--output", type=Path, required=True, help="kit directory to write")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--env", dest="env_id", default=None,
                     help="gymnasium id whose spaces match the artifact: the critics learn from rollouts there")
    src.add_argument("--transitions", type=Path, default=None,
                     help="a transition log the robot recorded (finetune_node's WORK_DIR/transitions)")
    parser.add_argument("--gap-file", type=Path, default=None,
                        help="with --env: run the environment with this gap (a sim robot node params file's gap.* "
                             "entries, e.g. the gap the off-board identifier wrote): critics and prior data from "
                             "the identified simulator")
    parser.add_argument("--algo", choices=("td3", "sac"), default="td3",
                        help="learner: td3 (default: fits a deterministic imported actor) or sac (a learned "
                             "state-independent log-std)")
    add_warmup_arguments(parser)
    parser.add_argument("--hidden", type=int, default=256, help="critic hidden width (256)")
    parser.add_argument("--depth", type=int, default=2, help="critic hidden layers (2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of rollouts, networks and sampling (0)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1; more only on an otherwise idle machine)")


def run(args: argparse.Namespace) -> int:
    # torch is imported here, not at the top: `lowrl -h` stays light.
    from lowrl_ros.core.finetune.kit import KitRefused, remove_partial_kit, write_kit_from_artifact
    from lowrl_ros.core.finetune.transition_log import TransitionLogError
    from lowrl_ros.core.runtime.artifact import ArtifactError

    out: Path = args.output
    existed = out.exists()
    if existed and (out / "kit.json").exists():
        print(f"lowrl kit: {out} already holds a kit; give a new directory (or remove the old kit)", file=sys.stderr)
        return 2
    try:
        path, report = write_kit_from_artifact(
            args.artifact, out, env_id=args.env_id, transitions=args.transitions, algo=args.algo,
            warmup_steps=args.warmup_steps, critic_updates=args.critic_updates, seed=args.seed, hidden=args.hidden,
            depth=args.depth, explore_noise=args.explore_noise, threads=getattr(args, "threads", 1), progress=True,
            gap_file=args.gap_file)
    except (KitRefused, ArtifactError, TransitionLogError, ValueError, OSError) as exc:
        remove_partial_kit(out, existed)
        print(f"lowrl kit: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}: {args.algo} over the imported actor; critics warmed up on {report.transitions} transitions "
          f"({report.source}, mean reward {report.mean_reward:.3g}), {report.critic_updates} updates, "
          f"RMS TD error {report.td_error_before:.3g} -> {report.td_error_after:.3g}, {report.wall_s} s")
    return 0
