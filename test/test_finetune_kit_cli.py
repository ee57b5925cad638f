"""`lowrl kit`'s warm-up flags come from one function, add_warmup_arguments, that other commands making a kit
on the way reuse with a prefix (lowrl bench sim2real --start sb3-ppo: --kit-warmup-steps ...)."""
from __future__ import annotations

import argparse

import pytest

from lowrl_ros.commands.kit import add_arguments, add_warmup_arguments


def test_lowrl_kit_parses_its_warmup_flags_as_before():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["a.onnx", "-o", "kit"])
    assert (args.warmup_steps, args.critic_updates, args.explore_noise) == (5000, 5000, 0.1)
    args = parser.parse_args(["a.onnx", "-o", "kit", "--warmup-steps", "64", "--critic-updates", "3",
                              "--explore-noise", "0.2"])
    assert (args.warmup_steps, args.critic_updates, args.explore_noise) == (64, 3, 0.2)


def test_a_prefix_names_the_flags_of_another_command():
    parser = argparse.ArgumentParser()
    add_warmup_arguments(parser, prefix="kit-", help_prefix="--start sb3-ppo: lowrl kit ")
    args = parser.parse_args(["--kit-warmup-steps", "100"])
    assert (args.kit_warmup_steps, args.kit_critic_updates, args.kit_explore_noise) == (100, 5000, 0.1)
    assert "--start sb3-ppo: lowrl kit with --env" in " ".join(parser.format_help().split())
    with pytest.raises(SystemExit):
        parser.parse_args(["--kit-warmup-steps", "many"])
