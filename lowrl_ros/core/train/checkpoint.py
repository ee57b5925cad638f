"""Checkpoints: everything a run needs to continue where it stopped.

One file, ``RUN_DIR/checkpoint.pt``, written atomically (temp file + rename) so a crash while
saving never leaves a half-written checkpoint. It holds the config, the agent (weights, target
networks, masks and their counters, optimizer states with Adam's moments), the replay buffer,
the loop's counters and every random generator (numpy, torch, Python). The environment's
internal state cannot be saved through gymnasium's API: a resumed run starts a fresh episode.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

CHECKPOINT_NAME = "checkpoint.pt"


def save_checkpoint(run_dir: Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` plus the global RNG states to ``run_dir/checkpoint.pt``."""
    path = Path(run_dir) / CHECKPOINT_NAME
    state = dict(payload)
    state["rng"] = {"torch": torch.get_rng_state(), "python": random.getstate(),
                    "numpy_global": np.random.get_state()}
    tmp = path.with_suffix(".pt.tmp")
    torch.save(state, tmp)
    tmp.replace(path)
    return path


def load_checkpoint(run_dir: Path) -> dict[str, Any]:
    """Read a checkpoint and restore the global RNG states; raises ValueError if there is none."""
    path = Path(run_dir) / CHECKPOINT_NAME
    if not path.is_file():
        raise ValueError(f"no checkpoint at {path}; train into that directory first "
                         "(or drop --resume to start a new run)")
    # weights_only=False: the file holds numpy arrays and RNG tuples; it is our own, local output.
    state = torch.load(path, map_location="cpu", weights_only=False)
    rng = state["rng"]
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy_global"])
    return state
