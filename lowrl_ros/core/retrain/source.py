"""The training checkpoint a deployed policy came from, as the start of its retraining's critic and exploration.

PPO continued from a deployed actor with a *fresh* critic barely moves: the critic's first advantages are noise, so
the actor must stay frozen until the critic has learned, and by then a small learning rate is all a good actor
survives (bench_results/sim2real_session/HISTORY.md: the legged policy's simulated return stayed flat over 200,000
steps). The checkpoint the policy was trained in already holds a critic of this very policy and the exploration std
its training ended with; continuing from both is what the in-process `lowrl bench sim2real --methods sysid` does
with SB3 (78-85 % of the legged gap recovered).

:func:`load_source_critic` reads an SB3 PPO/A2C zip or an rsl_rl ``model_*.pt`` (either layout) through the
importers' own readers and checks it against the deployed artifact's contract: the critic reads the policy's
observation (a privileged critic is refused: its inputs are not on the robot's log), the std has one entry per
action. Off-board only (torch, SB3): never imported by the robot's runtime.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract


class SourceRefused(ValueError):
    """The source checkpoint cannot start this artifact's retraining; the message says why and what to do."""


@dataclass
class SourceCritic:
    """A trained critic and exploration std.

    Attributes:
        weights: V's MLP (hidden layers, then Linear to one value; output activation "none").
        norm_a, norm_b, norm_clip: the critic's input, ``clip(norm_a * obs + norm_b, -norm_clip, norm_clip)``
            (``norm_clip`` None: no clip), as its training normalised it.
        action_std: the Gaussian's std per action, in action units (the network's std times the contract's
            action scale).
        kind: "sb3" or "rsl_rl".
    """

    weights: MlpWeights
    norm_a: np.ndarray
    norm_b: np.ndarray
    norm_clip: float | None
    action_std: np.ndarray
    kind: str

    def describe(self) -> str:
        sizes = "-".join(str(w.shape[0]) for w, _ in self.weights.layers[:-1])
        return (f"{self.kind} critic ({sizes}, {self.weights.hidden_activation}), exploration std "
                f"{float(self.action_std.min()):.3g}-{float(self.action_std.max()):.3g}")


def load_source_critic(path: str | Path, contract: PolicyContract, output_activation: str) -> SourceCritic:
    """The critic and std of ``path`` (an SB3 ``.zip`` or an rsl_rl ``.pt``) for the policy of ``contract``.

    ``output_activation``: the deployed network's (the std is on its output, scaled to action units by the
    contract's action transform for it). Raises :class:`SourceRefused` with the fix.
    """
    from lowrl_ros.core.importers.registry import ImportOptions, ImportRefused

    path = Path(path)
    if not path.is_file():
        raise SourceRefused(f"source_checkpoint {path}: no such file; give the SB3 zip or rsl_rl model_*.pt the "
                            "deployed policy was imported from, or '' for a fresh critic")
    try:
        if path.suffix == ".zip":
            from lowrl_ros.core.importers.sb3 import load_sb3_model, sb3_critic

            model, algo = load_sb3_model(path)
            weights, std = sb3_critic(model, algo)
            a = np.asarray(contract.obs_scale, np.float64)  # VecNormalize, folded into the contract, feeds both
            b = -np.asarray(contract.obs_offset, np.float64) * a
            clip, kind = contract.obs_clip, "sb3"
        elif path.suffix == ".pt":
            from lowrl_ros.core.importers.rsl_rl import load_rsl_rl_critic

            weights, norm, std = load_rsl_rl_critic(path, ImportOptions())
            n = weights.input_dim
            a, b, clip = (np.ones(n), np.zeros(n), None) if norm is None else (norm.a, norm.b, norm.clip)
            kind = "rsl_rl"
        else:
            raise SourceRefused(f"source_checkpoint {path}: not an SB3 .zip or an rsl_rl .pt checkpoint")
    except ImportRefused as exc:
        raise SourceRefused(f"source_checkpoint: {exc}") from None
    if weights.input_dim != contract.obs_dim:
        raise SourceRefused(f"source_checkpoint {path}: its critic reads {weights.input_dim} observations but the "
                            f"deployed policy {contract.obs_dim} (a privileged critic cannot be fed from the robot's "
                            "log); retrain with a fresh critic (source_checkpoint '')")
    if std.size != contract.action_dim:
        raise SourceRefused(f"source_checkpoint {path}: its Gaussian has {std.size} actions but the deployed policy "
                            f"{contract.action_dim}; is it the checkpoint this policy was imported from?")
    scale, _ = contract.action_transform(output_activation)
    action_std = np.asarray(std, np.float64) * np.abs(np.asarray(scale, np.float64))
    if not (np.isfinite(action_std).all() and (action_std > 0).all()):
        raise SourceRefused(f"source_checkpoint {path}: its exploration std is not finite and positive")
    return SourceCritic(weights, np.asarray(a, np.float64), np.asarray(b, np.float64), clip, action_std, kind)
