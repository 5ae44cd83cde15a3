"""The trained head g_θ as a torch module, and its probe-kernel initialisation."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from router_core.runtime.router import Head


class HeadModule(nn.Module):
    """g_θ: Linear → act → dropout → Linear, then ℓ2 (the numpy Head mirrors it)."""

    def __init__(self, d_in: int, hidden: int, d_out: int, activation: str, dropout: float):
        super().__init__()
        self.l1 = nn.Linear(d_in, hidden)
        self.l2 = nn.Linear(hidden, d_out)
        self.act = {"relu": nn.ReLU(), "gelu": nn.GELU(), "tanh": nn.Tanh()}[activation]
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.l2(self.drop(self.act(self.l1(x)))), dim=-1)

    def to_numpy(self, activation: str) -> Head:
        layers = tuple(
            (lin.weight.detach().numpy().copy(), lin.bias.detach().numpy().copy())
            for lin in (self.l1, self.l2)
        )
        return Head(layers=layers, activation=activation)


def probe_kernel_init(
    head: HeadModule, phi_probes: np.ndarray, phi_train: np.ndarray, top: float
) -> None:
    """Start g_θ as a kernel over the probes: unit j fires when x is near probe j.

    h_j = relu(β(x·p_j − t_j)), t_j the (1 − top) quantile of probe j's similarity to the
    training prompts, and the second layer the identity into probe coordinates, so that
    q·e_h starts as a similarity-weighted average of model h's (normalised) probe outcomes:
    a kNN over the probes, which the losses then refine. Needs d = N ≤ hidden and ReLU.
    """
    n = phi_probes.shape[0]
    hidden, d_out = head.l1.out_features, head.l2.out_features
    if n != d_out or n > hidden:
        raise ValueError(f"probe-kernel init needs hidden ≥ N = d; got N={n}, hidden={hidden}")
    sims = phi_train @ phi_probes.T  # (n_train, N)
    t = np.quantile(sims, 1.0 - top, axis=0)
    beta = 10.0
    with torch.no_grad():
        head.l1.weight[:n] = torch.as_tensor(beta * phi_probes)
        head.l1.bias[:n] = torch.as_tensor(-beta * t)
        head.l2.weight.zero_()
        head.l2.weight[:, :n] = torch.eye(n)
        head.l2.bias.zero_()
