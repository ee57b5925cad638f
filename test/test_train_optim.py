"""LeanAdam (optim.py) computes what torch.optim.Adam(fused=True) computes, bit for bit, on its shortcut."""
from __future__ import annotations

import torch

from lowrl_ros.core.train.optim import LeanAdam

torch.set_num_threads(1)


def _params(seed: int) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=gen)) for shape in ((2, 5, 7), (2, 1, 7), (3,))]


def _grads(step: int, params) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    return [torch.randn(p.shape, generator=gen) for p in params]


def test_lean_step_matches_torch_fused_adam_bit_for_bit(monkeypatch):
    slow_calls: dict[str, int] = {"ref": 0, "lean": 0}
    original = torch.optim.Adam.step

    def counting_step(self, *args, **kwargs):
        slow_calls["lean" if isinstance(self, LeanAdam) else "ref"] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", counting_step)
    ref_params, lean_params = _params(0), _params(0)
    ref, lean = torch.optim.Adam(ref_params, lr=1e-3, fused=True), LeanAdam(lean_params, lr=1e-3)
    for step in range(12):
        for p, q, g in zip(ref_params, lean_params, _grads(step, ref_params)):
            p.grad, q.grad = g.clone(), g.clone()
        if step == 6:  # a learning-rate change is picked up
            for group in (*ref.param_groups, *lean.param_groups):
                group["lr"] = 3e-4
        ref.step()
        lean.step()
        for p, q in zip(ref_params, lean_params):
            assert torch.equal(p, q), f"step {step}: parameters differ"
            for key in ("exp_avg", "exp_avg_sq", "step"):
                assert torch.equal(ref.state[p][key], lean.state[q][key]), f"step {step}: {key} differs"
    # Only the first step (which creates the state) went through torch's step.
    assert slow_calls == {"ref": 12, "lean": 1}


def test_missing_gradient_and_resume_fall_back_to_torch_step():
    ref_params, lean_params = _params(1), _params(1)
    ref, lean = torch.optim.Adam(ref_params, lr=1e-3, fused=True), LeanAdam(lean_params, lr=1e-3)

    def step(i: int, skip: int | None = None) -> None:
        for k, (p, q, g) in enumerate(zip(ref_params, lean_params, _grads(i, ref_params))):
            p.grad, q.grad = (None, None) if k == skip else (g.clone(), g.clone())
        ref.step()
        lean.step()

    for i in range(3):
        step(i)
    step(3, skip=1)  # torch skips a parameter whose grad is None; so must LeanAdam
    for p, q in zip(ref_params, lean_params):
        assert torch.equal(p, q)
    # Resume: a new LeanAdam loaded from the state_dict continues exactly where the old one was.
    resumed = LeanAdam(lean_params, lr=1e-3)
    resumed.load_state_dict(lean.state_dict())
    lean = resumed
    for i in range(4, 8):
        step(i)
    for p, q in zip(ref_params, lean_params):
        assert torch.equal(p, q)
        assert torch.equal(ref.state[p]["exp_avg_sq"], lean.state[q]["exp_avg_sq"])
