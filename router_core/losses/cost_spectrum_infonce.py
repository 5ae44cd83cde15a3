"""Cost-spectrum InfoNCE ([CSCR] Eq. 7-8; docs/references.md).

Expects:
    sim        (B, M) cosine similarities q_i·e_m (q and e unit vectors)
    positives  (B, M) bool, P(i): the experts that answered query i correctly
    cost       (M,) normalised costs c̃_m ∈ [0, 1]
    available  (B, M) bool, optional: the experts observed on query i (default: all). An
               expert not observed on a query (another dataset's model, a missing cell) is
               left out of its denominator: unobserved is not wrong.

Idea: plain InfoNCE (Eq. 6) lets the cheap, plentiful correct experts absorb all the pull, so
the router never learns where the pricier but needed experts live ("cost collapse"). Eq. 8
splits the experts into K_b cost-percentile bands and averages one InfoNCE term per band
that holds a positive, with a band temperature τ_k = τ_min + α·c̄_k (Eq. 7; flatter for
costly bands, which have few positives) and a price penalty γ·c̃_m on every expert in the
denominator:

    ℓ_i = −1/|K_i| Σ_{k∈K_i} log( Σ_{m∈P_ik} exp(s_im/τ_k) / Σ_m exp((s_im − γ c̃_m)/τ_k) )

With one band and γ = 0 it is InfoNCE with τ = τ_min + α·mean(c̃).

Example::

    loss_fn = CostSpectrumInfoNCE(n_bands=5, tau_min=0.05, alpha=0.25, gamma=0.2)
    loss = loss_fn(q @ E.T, quality > 0.5, cost_norm)
    loss.backward()
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def cost_bands(cost: np.ndarray, n_bands: int) -> np.ndarray:
    """(M,) band index of each expert: equal-count cost-percentile bands, cheapest = 0."""
    cost = np.asarray(cost, dtype=float)
    n_bands = max(1, min(n_bands, len(cost)))
    rank = np.argsort(np.argsort(cost, kind="stable"), kind="stable")
    return (rank * n_bands // len(cost)).astype(np.int64)


class CostSpectrumInfoNCE(nn.Module):
    """Eq. 8; ``n_bands=1, gamma=0`` is vanilla InfoNCE (Eq. 6)."""

    def __init__(
        self, n_bands: int = 5, tau_min: float = 0.05, alpha: float = 0.25, gamma: float = 0.2
    ) -> None:
        super().__init__()
        self.n_bands, self.tau_min, self.alpha, self.gamma = n_bands, tau_min, alpha, gamma

    def temperatures(self, cost: torch.Tensor, bands: torch.Tensor) -> torch.Tensor:
        """τ_k = τ_min + α·c̄_k (Eq. 7), c̄_k the mean normalised cost of band k."""
        n = int(bands.max()) + 1
        mean = torch.zeros(n, dtype=cost.dtype).index_add_(0, bands, cost)
        mean = mean / torch.bincount(bands, minlength=n).to(cost.dtype)
        return self.tau_min + self.alpha * mean

    def forward(
        self,
        sim: torch.Tensor,
        positives: torch.Tensor,
        cost: torch.Tensor,
        available: torch.Tensor | None = None,
    ) -> torch.Tensor:
        bands = torch.as_tensor(cost_bands(cost.detach().cpu().numpy(), self.n_bands))
        taus = self.temperatures(cost, bands)
        penalised = sim - self.gamma * cost  # (B, M), the denominator's logits
        if available is not None:
            penalised = penalised.masked_fill(~available, float("-inf"))
        total = torch.zeros(sim.shape[0], dtype=sim.dtype)
        count = torch.zeros(sim.shape[0], dtype=sim.dtype)
        for k, tau in enumerate(taus):
            pos = positives & (bands == k)
            has = pos.any(dim=1)
            if not has.any():
                continue
            num = torch.logsumexp((sim / tau).masked_fill(~pos, float("-inf")), dim=1)
            den = torch.logsumexp(penalised / tau, dim=1)
            total = total + torch.where(has, den - num, torch.zeros_like(den))
            count = count + has.to(sim.dtype)
        used = count > 0
        if not used.any():
            return sim.sum() * 0.0
        return (total[used] / count[used]).mean()
