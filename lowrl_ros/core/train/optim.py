"""Adam for small networks on a CPU: torch's fused kernel without the Python around it.

At the sizes the trainer runs (a few 256x256 layers, batch 256) an update is ~12 ms, and
``torch.optim.Adam(fused=True).step()`` spends ~0.2 ms of each call in Python before its one
kernel runs: the profiler hook, step hooks, gathering each parameter's state, grouping tensors by
device and dtype. Three such calls per SAC update (actor, critics, temperature) are ~4 % of it
(measured: ``lowrl bench train --part kernels``, "Adam step" rows).

``LeanAdam`` is ``torch.optim.Adam(fused=True)`` (same state, same ``state_dict``, same numbers bit
for bit: test/test_train_optim.py) whose ``step`` gathers those lists once and afterwards calls
the fused kernel directly. It falls back to the ordinary step whenever the shortcut's assumptions
do not hold (first step, a closure, a parameter without a gradient, more than one parameter group,
or options the shortcut does not pass on). It relies on ``torch._fused_adam_``, a private op;
torch is pinned exactly (requirements), and the test compares the two paths.
"""
from __future__ import annotations

import torch


class LeanAdam(torch.optim.Adam):
    """``torch.optim.Adam(params, lr, fused=True)`` with a cheaper ``step`` (see the module docstring).

    Optimizer step hooks (``register_step_pre_hook``) are not called on the shortcut; nothing in
    this project registers any.
    """

    def __init__(self, params, lr: float) -> None:
        super().__init__(params, lr=lr, fused=True)
        self._lists: tuple | None = None

    def _gather(self) -> tuple | None:
        if len(self.param_groups) != 1:
            return None
        group = self.param_groups[0]
        if group["amsgrad"] or group["maximize"] or group["differentiable"] or group.get("decoupled_weight_decay"):
            return None
        params = list(group["params"])
        states = [self.state.get(p) for p in params]
        if any(not s or "exp_avg" not in s for s in states):
            return None
        return (group, params, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
                [s["step"] for s in states])

    def step(self, closure=None):  # noqa: D102 (torch.optim.Adam.step)
        if closure is None and self._lists is not None:
            group, params, exp_avgs, exp_avg_sqs, steps = self._lists
            grads = [p.grad for p in params]
            if all(g is not None for g in grads):
                beta1, beta2 = group["betas"]
                with torch.no_grad():
                    torch._foreach_add_(steps, 1)
                    torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False,
                                       lr=group["lr"], beta1=beta1, beta2=beta2,
                                       weight_decay=group["weight_decay"], eps=group["eps"], maximize=False,
                                       grad_scale=None, found_inf=None)
                return None
        loss = super().step(closure)
        self._lists = self._gather()
        return loss

    # Tell Optimizer.__init__ not to wrap this step in its profiling/hook wrapper (the cost above).
    step.hooked = True

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._lists = None  # the state tensors were replaced
