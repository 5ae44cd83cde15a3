"""Cost-aware ranking objective, CARO ([EquiRouter] Eq. 6-7; docs/references.md).

Expects:
    scores   (B, M) the router's score of each expert for each query (here s = q·e,
             multiplied by ``scale`` because cosines live in [−1, 1])
    utility  (B, M) observed quality u (NaN = not observed: no pairs)
    cost     (B, M) or (M,) cost of each expert (per query when known)

Idea: pointwise or utility-only objectives leave a model-level preference for premium
experts, which overpays whenever a cheaper expert is equally good. CARO supervises ordered
pairs only where the order is meaningful:

    P_δ = {(i,j): u_i − u_j > δ}  ∪  {(i,j): |u_i − u_j| ≤ δ, c_i < c_j}
    L   = Σ_{P_δ} w_ij log(1 + exp(−(s_i − s_j))) / Σ_{P_δ} w_ij,

per query, averaged over queries with at least one pair; w = 1 for utility pairs and ρ for
cost pairs (EquiRouter Table A1: ρ = 0.1 on RouterBench, δ = 0 for 0/1 utilities). It teaches
"cheaper wins among equals" without pushing down strong experts that are needed.

Example::

    caro = CaroRanking(delta=0.0, rho=0.1, scale=20.0)
    loss = caro(q @ E.T, quality, cost_norm)
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class CaroRanking(nn.Module):
    def __init__(self, delta: float = 0.0, rho: float = 0.1, scale: float = 20.0) -> None:
        super().__init__()
        self.delta, self.rho, self.scale = delta, rho, scale

    def forward(
        self, scores: torch.Tensor, utility: torch.Tensor, cost: torch.Tensor
    ) -> torch.Tensor:
        if cost.dim() == 1:
            cost = cost.expand_as(utility)
        du = utility[:, :, None] - utility[:, None, :]  # u_i − u_j, (B, M, M); NaN → no pair
        dc = cost[:, :, None] - cost[:, None, :]
        better = du > self.delta
        cheaper_tie = (du.abs() <= self.delta) & (dc < 0)
        w = better.to(scores.dtype) + self.rho * cheaper_tie.to(scores.dtype)
        ds = self.scale * (scores[:, :, None] - scores[:, None, :])
        per_query_w = w.sum(dim=(1, 2))
        used = per_query_w > 0
        if not used.any():
            return scores.sum() * 0.0
        per_query = (w * F.softplus(-ds)).sum(dim=(1, 2))
        return (per_query[used] / per_query_w[used]).mean()
