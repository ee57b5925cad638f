"""core/config.py (documented fields, require, coerce) and commands/_config_flags.py (flags over a preset)."""
from __future__ import annotations

import argparse
import dataclasses
import math

import pytest

from lowrl_ros.commands._config_flags import add_config_flags, config_from, read_preset
from lowrl_ros.core.config import coerce, field, help_of, require


@dataclasses.dataclass(frozen=True)
class Example:
    steps: int = field(10, "steps to run", range=(1, 100), live=True)
    rate: float = field(0.5, "a rate")
    fast: bool = field(False, "go fast")
    names: tuple[str, ...] = field(("a",), "names")
    items: list = field([1], "a list, copied per instance")
    parent: int | None = field(None, "optional")

    def __post_init__(self) -> None:
        require(self.steps >= 1, f"steps={self.steps} must be >= 1", owner="Example")


def test_field_keeps_help_range_and_live_and_copies_lists():
    f = {x.name: x for x in dataclasses.fields(Example)}
    assert help_of(f["steps"]) == "steps to run" and f["steps"].metadata["range"] == (1, 100)
    assert f["steps"].metadata["live"] and not f["rate"].metadata["live"]
    a, b = Example(), Example()
    assert a.items == [1] and a.items is not b.items


def test_require_raises_with_the_owner():
    with pytest.raises(ValueError, match=r"^Example: steps=0 must be >= 1$"):
        Example(steps=0)
    require(True, "never")


@pytest.mark.parametrize("name,value,want", [("steps", "1e2", 100), ("rate", "nan", math.nan), ("fast", "off", False),
                                             ("names", ["x", "y"], ("x", "y")), ("parent", "3", 3)])
def test_coerce_converts_to_the_default_type(name, value, want):
    got = coerce(next(f for f in dataclasses.fields(Example) if f.name == name), value)
    assert (math.isnan(got) and math.isnan(want)) if isinstance(want, float) else got == want


@pytest.mark.parametrize("value", ["ten", "1.5", 1.5])
def test_coerce_names_the_field_on_failure(value):
    with pytest.raises(ValueError, match=r"Example: steps=.* is not a valid int"):
        coerce(dataclasses.fields(Example)[0], value, owner="Example")


def test_flags_override_the_preset_which_overrides_the_defaults(tmp_path):
    parser = argparse.ArgumentParser()
    add_config_flags(parser, Example, skip=("items",))
    assert "--items" not in parser.format_help() and "steps to run (default 10)" in parser.format_help()
    preset = tmp_path / "p.yaml"
    preset.write_text("example:\n  steps: 20\n  rate: 0.1\n")
    args = parser.parse_args(["--steps", "30", "--fast", "--names", "b", "c"])
    cfg = config_from(Example, args, read_preset(preset, "example"))
    assert (cfg.steps, cfg.rate, cfg.fast, cfg.names) == (30, 0.1, True, ("b", "c"))
    assert config_from(Example, parser.parse_args([]), {}) == Example()
    with pytest.raises(ValueError, match="unknown keys"):
        config_from(Example, parser.parse_args([]), {"stepz": 1})
    with pytest.raises(ValueError, match="no such file"):
        read_preset(tmp_path / "missing.yaml", "example")
