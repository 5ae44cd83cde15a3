"""MLP router: per-model quality regression on the frozen embeddings.

One network Φ(x) → hidden → m outputs, the h-th output σ(·) estimating model h's quality
on x; trained with binary cross-entropy on the observed cells only (missing outcomes are
masked), AdamW, full-batch, seeded, early-stopped on a held-out slice of its training data.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from router_core.baselines.threads import single_thread


class MLPRouter:
    def __init__(
        self,
        hidden: int = 128,
        epochs: int = 300,
        lr: float = 1e-3,
        weight_decay: float = 1e-2,
        dropout: float = 0.1,
        patience: int = 20,
        holdout: float = 0.1,
        seed: int = 0,
    ) -> None:
        self.hidden, self.epochs, self.lr = hidden, epochs, lr
        self.weight_decay, self.dropout, self.patience = weight_decay, dropout, patience
        self.holdout, self.seed = holdout, seed

    def fit(self, X: np.ndarray, quality: np.ndarray) -> MLPRouter:
        with single_thread():
            return self._fit(X, quality)

    def _fit(self, X: np.ndarray, quality: np.ndarray) -> MLPRouter:
        torch.manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        n, m = quality.shape
        perm = rng.permutation(n)
        n_hold = round(self.holdout * n) if n >= 20 else 0
        hold, fit = perm[:n_hold], perm[n_hold:]
        Xt = torch.as_tensor(np.asarray(X, dtype=np.float32))
        Q = np.asarray(quality, dtype=np.float32)
        Yt = torch.as_tensor(np.nan_to_num(Q, nan=0.0))
        Mt = torch.as_tensor(np.isfinite(Q))
        self._net = nn.Sequential(
            nn.Linear(Xt.shape[1], self.hidden),
            nn.ReLU(),
            nn.Dropout(self.dropout),
            nn.Linear(self.hidden, m),
        )
        opt = torch.optim.AdamW(self._net.parameters(), lr=self.lr, weight_decay=self.weight_decay)

        def loss_on(rows: np.ndarray) -> torch.Tensor:
            logits = self._net(Xt[rows])
            mask = Mt[rows]
            return F.binary_cross_entropy_with_logits(logits[mask], Yt[rows][mask])

        best = (float("inf"), copy.deepcopy(self._net.state_dict()), 0)
        for epoch in range(self.epochs):
            self._net.train()
            loss = loss_on(fit)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if n_hold:
                self._net.eval()
                with torch.no_grad():
                    v = float(loss_on(hold))
                if v < best[0] - 1e-6:
                    best = (v, copy.deepcopy(self._net.state_dict()), epoch)
                elif epoch - best[2] >= self.patience:
                    break
        if n_hold:
            self._net.load_state_dict(best[1])
        self._net.eval()
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        with torch.no_grad(), single_thread():
            logits = self._net(torch.as_tensor(np.asarray(X, dtype=np.float32)))
        return torch.sigmoid(logits).numpy().astype(np.float64)
