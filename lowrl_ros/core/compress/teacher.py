"""The teacher of a distillation: an actor from an artifact, a `lowrl train` run or an SB3 zip (off-board).

Whatever its source, a teacher is float ``MlpWeights`` plus its ``PolicyContract``, labels states
with the contract's reference forward pass (numpy float64, no framework in the loop), and knows
the size of its fp32 ``torch.save(state_dict)``: the baseline the students' bytes are compared with.

Any artifact works, whatever made it (``lowrl import`` of an rsl_rl / Isaac Lab PPO actor: ELU hidden
layers, a linear output, ``action_scale``/``action_offset`` and ``obs_clip``); name the environment
(``--env-id``) when its contract has none. Students read observations exactly as the teacher does
(offset, scale and clip), and :meth:`Teacher.student_contract` / :meth:`Teacher.student_targets`
give each student the action transform and regression targets that suit its own output activation.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
import numpy as np
import torch

from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract, load_weights, reference_action
from lowrl_ros.core.sim.evaluate import rollout_states


@dataclass
class Teacher:
    """A teacher actor as float weights plus its contract.

    Attributes:
        weights: the deterministic actor (normalised obs -> output activation).
        contract: its I/O contract (students inherit it).
        source: where it came from (path).
        kind: "artifact", "run" (a `lowrl train` run directory) or "sb3".
        state_dict_bytes: size of the teacher's fp32 actor ``torch.save(state_dict)``, the
            baseline the students' artifact sizes are compared with.
    """

    weights: MlpWeights
    contract: PolicyContract
    source: str
    kind: str
    state_dict_bytes: int

    def actions(self, obs: np.ndarray) -> np.ndarray:
        """float64 actions [n, act] (the contract's reference forward pass)."""
        return reference_action(self.weights, self.contract, np.atleast_2d(obs))

    def targets(self, obs: np.ndarray) -> np.ndarray:
        """The teacher's network output (after its output activation) for raw observations [n, obs_dim]."""
        return self.weights.forward(normalise(self.contract, np.atleast_2d(obs)))

    def student_contract(self, student_output: str) -> PolicyContract:
        """The contract of a student with output activation ``student_output`` (see PolicyContract.retargeted)."""
        return self.contract.retargeted(self.weights.output_activation, student_output)

    def student_targets(self, obs: np.ndarray, student: PolicyContract, student_output: str) -> np.ndarray:
        """What a student's output should be for ``obs`` so that ``student`` maps it to the teacher's action.

        With the teacher's own transform that is the teacher's output itself; otherwise the teacher's
        (clamped) action taken back through the student's transform: (action - offset) / scale, which
        for a tanh student lies in [-1, 1].
        """
        s_scale, s_offset = student.action_transform(student_output)
        t_scale, t_offset = self.contract.action_transform(self.weights.output_activation)
        if np.array_equal(s_scale, t_scale) and np.array_equal(s_offset, t_offset):
            return self.targets(obs)
        return (self.actions(obs) - s_offset) / s_scale


def normalise(contract: PolicyContract, obs: np.ndarray) -> np.ndarray:
    """Observations as the network reads them (float64): clip((obs - obs_offset) * obs_scale, +-obs_clip)."""
    return contract.normalise(obs)


def _state_dict_bytes(state: dict[str, torch.Tensor]) -> int:
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getbuffer().nbytes


def weights_state_dict(weights: MlpWeights) -> dict[str, torch.Tensor]:
    """An ``nn.Linear``-style fp32 state_dict of the actor (what a torch user would save)."""
    state = {}
    for i, (w, b) in enumerate(weights.layers):
        state[f"{i}.weight"] = torch.from_numpy(w.copy())
        state[f"{i}.bias"] = torch.from_numpy(b.copy())
    return state


def load_teacher(source: str | Path, env_id: str | None = None) -> Teacher:
    """A teacher from an fp32 (or int8, dequantised) artifact, a `lowrl train` run dir, or an SB3 zip.

    Raises:
        ValueError: the source does not exist or is none of these, with what to give instead.
    """
    path = Path(source)
    if path.is_dir():
        actor = path / "actor.onnx"  # what `lowrl train` exports (fp32)
        if not actor.is_file():
            raise ValueError(f"{path} is a directory without actor.onnx; give a `lowrl train` run directory "
                             "that finished (it exports actor.onnx), an artifact or an SB3 zip")
        weights, contract = load_weights(actor)
        return Teacher(weights, contract, str(path), "run", _state_dict_bytes(weights_state_dict(weights)))
    if not path.is_file():
        raise ValueError(f"teacher {path}: no such file or directory; give an artifact (.onnx), a run directory "
                         "or an SB3 model zip")
    if path.suffix == ".zip":
        from lowrl_ros.core.importers.sb3 import load_sb3_model, sb3_actor, sb3_actor_module, sb3_contract

        model, algo = load_sb3_model(path)
        weights = sb3_actor(model, algo)
        contract = sb3_contract(model, algo=algo, source=path, version=1, tier="full", env_id=env_id or None,
                                control_period_s=None, extra={})
        # The SB3 actor's own state_dict (latent_pi, mu, log_std): the real fp32 teacher on disk.
        actor = sb3_actor_module(model, algo)
        return Teacher(weights, contract, str(path), "sb3", _state_dict_bytes(actor.state_dict()))
    weights, contract = load_weights(path)
    return Teacher(weights, contract, str(path), "artifact", _state_dict_bytes(weights_state_dict(weights)))


def collect_teacher_states(teacher: Teacher, env_id: str, episodes: int, noise: float, seed: int) -> np.ndarray:
    """States the teacher visits, with Gaussian action noise so states just off its path are covered."""
    c = teacher.contract
    low, high = np.array(c.action_low), np.array(c.action_high)
    rng = np.random.default_rng(seed)

    def act(obs: np.ndarray) -> np.ndarray:
        a = teacher.actions(obs)[0]
        return np.clip(a + rng.normal(0.0, noise * (high - low) / 2), low, high)

    return rollout_states(env_id, act, episodes, seed + 50_000)
