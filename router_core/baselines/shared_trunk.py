"""SharedTrunkNet ([Prefill]; docs/references.md): one multi-output MLP predicting P(correct) for every model.

A shared trunk Φ(x) → 256 → 128 (ReLU, dropout) feeds one logit per model; the loss is
binary cross-entropy over the observed cells only (missing outcomes masked), so every
model's labels shape the trunk (cross-model context: what makes a prompt hard for one model
is evidence for the others). A small seeded ensemble: ``n_members`` nets with different
seeds, each early-stopped on the validation rows; the ``keep`` best by validation BCE are
averaged. It routes like every quality-predicting baseline: argmax_h p̂_h − λ·c̃_h
(``router_core.baselines.choice``).
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from router_core.baselines.threads import single_thread


def _net(d: int, m: int, hidden: tuple[int, int], dropout: float) -> nn.Module:
    h1, h2 = hidden
    return nn.Sequential(
        nn.Linear(d, h1),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(h1, h2),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(h2, m),
    )


def _masked_bce(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(logits[mask], y[mask])


class SharedTrunkNet:
    def __init__(
        self,
        hidden: tuple[int, int] = (256, 128),
        dropout: float = 0.2,
        lr: float = 1e-3,
        weight_decay: float = 1e-4,
        epochs: int = 400,
        patience: int = 25,
        n_members: int = 5,
        keep: int = 3,
        holdout: float = 0.15,
        seed: int = 0,
    ) -> None:
        self.hidden, self.dropout, self.lr, self.weight_decay = hidden, dropout, lr, weight_decay
        self.epochs, self.patience = epochs, patience
        self.n_members, self.keep, self.holdout, self.seed = n_members, keep, holdout, seed
        self.members: list[nn.Module] = []
        self.val_losses: list[float] = []

    def fit(
        self,
        X: np.ndarray,
        quality: np.ndarray,
        X_val: np.ndarray | None = None,
        quality_val: np.ndarray | None = None,
    ) -> SharedTrunkNet:
        """Fit on (X, quality); early-stop on (X_val, quality_val), or on a seeded
        ``holdout`` share of the fit rows when no validation rows are given."""
        X = np.asarray(X, dtype=np.float32)
        Q = np.asarray(quality, dtype=np.float32)
        if X_val is None or quality_val is None or len(X_val) == 0:
            perm = np.random.default_rng(self.seed).permutation(len(X))
            n_hold = max(1, round(self.holdout * len(X)))
            X_val, quality_val = X[perm[:n_hold]], Q[perm[:n_hold]]
            X, Q = X[perm[n_hold:]], Q[perm[n_hold:]]
        Xv = np.asarray(X_val, dtype=np.float32)
        Qv = np.asarray(quality_val, dtype=np.float32)
        with single_thread():
            fits = [
                self._fit_one(X, Q, Xv, Qv, self.seed * 1000 + i) for i in range(self.n_members)
            ]
        fits.sort(key=lambda t: t[0])
        kept = fits[: max(1, min(self.keep, len(fits)))]
        self.val_losses = [v for v, _ in kept]
        self.members = [net for _, net in kept]
        return self

    def _fit_one(
        self, X: np.ndarray, Q: np.ndarray, Xv: np.ndarray, Qv: np.ndarray, seed: int
    ) -> tuple[float, nn.Module]:
        torch.manual_seed(seed)
        Xt, Yt, Mt = (
            torch.as_tensor(X),
            torch.as_tensor(np.nan_to_num(Q, nan=0.0)),
            torch.as_tensor(np.isfinite(Q)),
        )
        Xvt, Yvt, Mvt = (
            torch.as_tensor(Xv),
            torch.as_tensor(np.nan_to_num(Qv, nan=0.0)),
            torch.as_tensor(np.isfinite(Qv)),
        )
        net = _net(X.shape[1], Q.shape[1], self.hidden, self.dropout)
        opt = torch.optim.AdamW(net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        best = (float("inf"), copy.deepcopy(net.state_dict()), 0)
        for epoch in range(self.epochs):
            net.train()
            loss = _masked_bce(net(Xt), Yt, Mt)
            opt.zero_grad()
            loss.backward()
            opt.step()
            net.eval()
            with torch.no_grad():
                v = float(_masked_bce(net(Xvt), Yvt, Mvt))
            if v < best[0] - 1e-6:
                best = (v, copy.deepcopy(net.state_dict()), epoch)
            elif epoch - best[2] >= self.patience:
                break
        net.load_state_dict(best[1])
        return best[0], net.eval()

    def predict(self, X: np.ndarray) -> np.ndarray:
        """(n, d) → (n, m) P(correct), the mean of the kept members' probabilities."""
        Xt = torch.as_tensor(np.asarray(X, dtype=np.float32))
        with torch.no_grad(), single_thread():
            probs = [torch.sigmoid(net(Xt)).numpy() for net in self.members]
        return np.mean(probs, axis=0).astype(np.float64)
