"""Dynamic sparse training: Erdős–Rényi allocation and RigL/SET topology evolution (RLx2 part 1).

``SparseMasker`` owns the masks of one network (an actor, or both fused critics) and enforces
the invariants RLx2 relies on (Tan et al. 2023, §4.1, following RigL, Evci et al. 2020):

* masks multiply the gradients before, and the weights after, every optimizer step;
* target networks are re-masked with the online masks after every Polyak update;
* every ``interval`` updates of *this* network (its own counter) the optimizer step is skipped
  and the topology changes instead: drop the ζ_t fraction of active weights with the smallest
  magnitude, grow the same number of inactive ones (largest |dense gradient| for RigL/RLx2,
  uniformly at random for SET), with ζ_t = ζ0/2·(1 + cos(π t / T_end));
* grown weights start at exactly 0.

The initial weights of a sparse layer (``init``): "topk" keeps the top-k |w| of the dense
initialisation (the paper's and reference code's); "scaled" draws the active weights afresh from
U(±1/√a) with a the output unit's active fan-in. Top-k of U(±1/√n) at density d gives a unit a
pre-activation standard deviation of about √(2.7·d) of the dense layer's (0.41 at d = 0.06, a
90 % sparse 256×256 layer), shrinking with every sparse layer; "scaled" keeps it at the dense
layer's (the sparsity-aware initialisation of Evci et al. 2022, "Gradient flow in sparse neural
networks"). Dense layers (density 1) keep their initialisation either way.

Adam's moments (our documented choice): the first and second moments of every dropped *and*
grown entry are reset to 0. A dropped entry thereby carries no stale momentum into a later
regrowth, and a grown entry starts from a known state: with Adam's shared step counter its first
update is lr·(1−β1)/√(1−β2) ≈ 3.2·lr in the direction of its gradient, the same bounded step the
reference code's unmasked moments give a never-active entry, but without history from an
earlier life of that connection.
"""
from __future__ import annotations

import math

import torch

from lowrl_ros.core.train.config import SPARSE_INITS

METHODS = ("static", "set", "rigl")


def erdos_renyi_densities(shapes: list[tuple[int, int]], sparsity: float) -> list[float]:
    """Per-layer densities with density ∝ (in+out)/(in·out), jointly hitting ``1 - sparsity``.

    Layers whose density would exceed 1 are made dense and the rest re-solved (RigL's ER
    allocation). Biases are not counted: they stay dense.

    Args:
        shapes: (in, out) of each weight matrix of one network.
        sparsity: target fraction of zero weights over all of them, in [0, 1).

    Returns:
        Density (fraction of non-zero weights) of each layer, in (0, 1].
    """
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"sparsity={sparsity} must be in [0, 1)")
    sizes = [i * o for i, o in shapes]
    raw = [(i + o) / (i * o) for i, o in shapes]
    target = (1.0 - sparsity) * sum(sizes)
    dense: set[int] = set()
    while True:
        budget = target - sum(sizes[j] for j in dense)
        denom = sum(raw[j] * sizes[j] for j in range(len(shapes)) if j not in dense)
        if denom <= 0:
            return [1.0] * len(shapes)
        eps = budget / denom
        over = [j for j in range(len(shapes)) if j not in dense and eps * raw[j] > 1.0]
        if not over:
            return [1.0 if j in dense else eps * raw[j] for j in range(len(shapes))]
        dense.update(over)


def cosine_drop_fraction(zeta0: float, t: int, t_end: int) -> float:
    """ζ_t = ζ0/2·(1 + cos(π t / T_end)), 0 from T_end on (RigL's schedule)."""
    if t >= t_end:
        return 0.0
    return 0.5 * zeta0 * (1.0 + math.cos(math.pi * t / t_end))


class SparseMasker:
    """Masks of one network's weight matrices and their evolution.

    Args:
        weights: the network's weight tensors, each ``[members, in, out]``.
        sparsity: target fraction of zero weights (Erdős–Rényi over the layers).
        method: "static" (never changes), "set" (random grow) or "rigl" (gradient grow).
        interval: optimizer updates of this network between topology updates (ΔT).
        zeta0: initial drop fraction of the cosine schedule.
        t_end: update count after which the topology is frozen (ζ reaches 0).
        generator: torch RNG used for SET's random growth.
        init: the sparse layers' initial weights, "topk" or "scaled" (see the module docstring).
    """

    def __init__(self, weights: list[torch.nn.Parameter], sparsity: float, method: str, interval: int,
                 zeta0: float, t_end: int, generator: torch.Generator | None = None, init: str = "topk") -> None:
        if method not in METHODS:
            raise ValueError(f"method={method!r} is unknown; use one of {METHODS}")
        if init not in SPARSE_INITS:
            raise ValueError(f"init={init!r} is unknown; use one of {SPARSE_INITS}")
        self.weights = list(weights)
        self.method = method
        self.interval = int(interval)
        self.zeta0 = float(zeta0)
        self.t_end = max(1, int(t_end))
        self.generator = generator
        self.updates = 0  # optimizer iterations of this network, including skipped ones
        self.topology_updates = 0
        shapes = [(w.shape[1], w.shape[2]) for w in self.weights]
        self.densities = erdos_renyi_densities(shapes, sparsity)
        self.masks: list[torch.Tensor] = []
        with torch.no_grad():
            for w, d in zip(self.weights, self.densities):
                members, n = w.shape[0], w.shape[1] * w.shape[2]
                k = max(1, int(round(d * n)))
                # Initial mask: top-k |w| of the fresh (random) initialisation, per member.
                flat = w.detach().abs().reshape(members, n)
                idx = flat.topk(k, dim=1).indices
                mask = torch.zeros(members, n, dtype=w.dtype)
                mask.scatter_(1, idx, 1.0)
                mask = mask.reshape_as(w)
                self.masks.append(mask)
                if init == "scaled" and d < 1.0:
                    # per output unit: U(±1/√(active fan-in)); the global RNG, as the dense init
                    fan_in = mask.sum(dim=1, keepdim=True).clamp_min(1.0)  # [members, 1, out]
                    w.copy_(torch.empty_like(w).uniform_(-1.0, 1.0) / fan_in.sqrt())
            self.apply_to_weights()

    # --- invariants -------------------------------------------------------------------------
    @torch.no_grad()
    def apply_to_weights(self, weights: list[torch.Tensor] | None = None) -> None:
        """Zero the masked entries of ``weights`` (default: the online weights; pass target weights too)."""
        torch._foreach_mul_(self.weights if weights is None else list(weights), self.masks)

    @torch.no_grad()
    def apply_to_grads(self) -> None:
        """Zero the gradient of masked entries so Adam never moves them."""
        grads = [w.grad for w in self.weights]
        torch._foreach_mul_(grads, self.masks)

    def nonzero_counts(self) -> list[int]:
        """Active weights per layer (all members together)."""
        return [int(m.sum().item()) for m in self.masks]

    def layer_densities(self) -> list[float]:
        return [float(m.mean().item()) for m in self.masks]

    # --- evolution ----------------------------------------------------------------------------
    def due(self) -> bool:
        """True when the update about to happen is a topology update instead of an optimizer step."""
        nxt = self.updates + 1
        return self.method != "static" and nxt % self.interval == 0 and nxt < self.t_end

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """One update of this network, after ``backward`` left dense gradients in ``.grad``.

        Either evolves the topology (and skips the optimizer step, as RLx2 does) or masks the
        gradients, steps the optimizer and re-masks the weights.

        Returns:
            True if this was a topology update.
        """
        topology = self.due()
        self.updates += 1
        if topology:
            self.update_topology(optimizer)
            return True
        self.apply_to_grads()
        optimizer.step()
        self.apply_to_weights()
        return False

    @torch.no_grad()
    def update_topology(self, optimizer: torch.optim.Optimizer | None) -> None:
        """Drop ζ_t of the active weights by magnitude, grow as many (by |grad| or at random)."""
        zeta = cosine_drop_fraction(self.zeta0, self.updates, self.t_end)
        self.topology_updates += 1
        for w, mask in zip(self.weights, self.masks):
            members = w.shape[0]
            flat_m = mask.reshape(members, -1)
            active = int(flat_m[0].sum().item())  # equal in every member by construction
            inactive = flat_m.shape[1] - active
            k = min(int(zeta * active), inactive)
            if k <= 0:
                continue
            flat_w = w.reshape(members, -1)
            # Drop: smallest |w| among active entries.
            drop_score = torch.where(flat_m > 0, flat_w.abs(), torch.full_like(flat_w, math.inf))
            drop_idx = drop_score.topk(k, dim=1, largest=False).indices
            # Grow among entries inactive before the drop, so the count is kept exactly.
            if self.method == "rigl" and w.grad is not None:
                score = w.grad.reshape(members, -1).abs()
            else:  # SET: uniform random growth
                score = torch.rand(flat_w.shape, generator=self.generator, dtype=flat_w.dtype)
            grow_score = torch.where(flat_m > 0, torch.full_like(score, -1.0), score)
            grow_idx = grow_score.topk(k, dim=1).indices
            new_m = flat_m.clone()
            new_m.scatter_(1, drop_idx, 0.0)
            new_m.scatter_(1, grow_idx, 1.0)
            mask.copy_(new_m.reshape_as(mask))
            changed = torch.zeros_like(flat_m)
            changed.scatter_(1, drop_idx, 1.0)
            changed.scatter_(1, grow_idx, 1.0)
            keep = (1.0 - changed).reshape_as(w)
            w.mul_(mask)  # dropped -> 0; grown were already 0 and start at 0
            if optimizer is not None:
                state = optimizer.state.get(w, {})
                for key in ("exp_avg", "exp_avg_sq"):
                    if key in state:
                        state[key].mul_(keep)
        # No optimizer step on a topology update: clear the dense gradients it used.
        for w in self.weights:
            w.grad = None

    def state_dict(self) -> dict:
        return {"masks": [m.clone() for m in self.masks], "updates": self.updates,
                "topology_updates": self.topology_updates}

    def load_state_dict(self, state: dict) -> None:
        for m, saved in zip(self.masks, state["masks"]):
            m.copy_(saved)
        self.updates = int(state["updates"])
        self.topology_updates = int(state["topology_updates"])
