"""The cascade's static head: the static encoder's Φ_s → Φ̂ in MiniLM's space, trained on the
routing objective (router_core/losses/estimate_match.py) with the router frozen.

One hidden layer (ReLU) into MiniLM's width, ℓ2 at the end: the numpy ``Head`` serving runs
(~0.1 ms a request). Measured on the packaged router's validation prompts
(scripts/route_cascade.py; share of (prompt, λ) decisions that still ran MiniLM at agreement
0.98): ridge on 2.5k prompts 0.69, ridge on 12k 0.58, this head on 12k 0.54 with 512 hidden
units, 0.52 with 1024; a second hidden layer or 2048 units moved it by under 0.01. More prompts
are what helped most. 512 units in float16 (router_core.runtime.router.CASCADE_DTYPE) keep the
packaged arrays.npz under 2 MB; 1024 in float32 took it to 3.7 MB.

Example::

    head = train_static_head(router, X_static_train, X_minilm_train)
    phi_hat = head(X_static)  # (n, 384), unit length
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from router_core.losses.estimate_match import EstimateMatch, router_quality
from router_core.runtime.router import Head, Router

HIDDEN = 512
WEIGHT = 10.0  # of the p̂ term against the cosine term (EstimateMatch)
EPOCHS = 40
BATCH = 256
LR = 2e-3
WEIGHT_DECAY = 1e-4


def train_static_head(router: Router, X_static: np.ndarray, X_full: np.ndarray, *,
                      hidden: int = HIDDEN, weight: float = WEIGHT, epochs: int = EPOCHS,
                      seed: int = 0) -> Head:
    """Fit Φ̂ = ℓ2(W₂·relu(W₁Φ_s + b₁) + b₂) to MiniLM's ``X_full`` of the same prompts; the
    same inputs and seed give the same head."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    X = torch.as_tensor(np.asarray(X_static, dtype=np.float32))
    Y = torch.as_tensor(np.asarray(X_full, dtype=np.float32))
    l1, l2 = nn.Linear(X.shape[1], hidden), nn.Linear(hidden, Y.shape[1])
    params = [*l1.parameters(), *l2.parameters()]
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)
    loss_fn = EstimateMatch(router_quality(router), weight)
    for _ in range(epochs):
        order = torch.randperm(len(X), generator=gen)
        for start in range(0, len(X), BATCH):
            rows = order[start:start + BATCH]
            loss = loss_fn(F.normalize(l2(torch.relu(l1(X[rows]))), dim=-1), Y[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
    layers = tuple((lin.weight.detach().numpy().copy(), lin.bias.detach().numpy().copy())
                   for lin in (l1, l2))
    return Head(layers=layers, activation="relu")
