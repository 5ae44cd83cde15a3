"""Fitting the head: initialisation, the optimiser and the early-stopped epoch loop.

Kept apart from the objective (router_core.training.objective), which it minimises, and from
the orchestration in router_core.training, which calls it once per training run.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from router_core.descriptors.base import ProbeSet
from router_core.runtime.router import Router
from router_core.training.config import TrainConfig
from router_core.training.head import HeadModule, probe_kernel_init
from router_core.training.objective import FitTargets, make_objective, val_groups
from router_core.training.prompts import TrainingPrompts, positive_mask


def _init_head(cfg: TrainConfig, tg: FitTargets, d: int, data: TrainingPrompts,
               probes: ProbeSet, init: Router | None) -> HeadModule:
    """A fresh head (probe-kernel initialised if configured), or a warm start's weights."""
    head = HeadModule(tg.X.shape[1], cfg.hidden, d, cfg.activation, cfg.dropout)
    if cfg.init_head == "probe-kernel" and init is None:
        pos = {p: i for i, p in enumerate(map(str, data.train.prompt_ids))}
        probe_kernel_init(head, data.phi_train[[pos[p] for p in probes.ids]], tg.X,
                           cfg.kernel_top)
    if (
        init is not None
        and init.head.out_dim == d
        and len(init.head.layers) == 2
        and init.head.layers[0][0].shape == tuple(head.l1.weight.shape)
    ):
        with torch.no_grad():
            for lin, (w, b) in zip((head.l1, head.l2), init.head.layers):
                lin.weight.copy_(torch.as_tensor(w))
                lin.bias.copy_(torch.as_tensor(b))
    return head


@dataclass
class HeadFit:
    """The fitted head and per-model logistic (a_h, b_h), restored to the best epoch."""

    head: HeadModule
    a: nn.Parameter
    b: nn.Parameter
    best_criterion: float
    best_epoch: int
    history: list[dict]


def fit_head(cfg: TrainConfig, tg: FitTargets, E: np.ndarray, data: TrainingPrompts,
             probes: ProbeSet, init: Router | None) -> HeadFit:
    """Minimise the objective (router_core.training.objective) with early stopping on val."""
    head = _init_head(cfg, tg, E.shape[1], data, probes, init)
    a_param = nn.Parameter(torch.full((len(tg.cols),), 5.0))
    prior = np.clip(np.nanmean(tg.U, axis=0), 0.02, 0.98)  # b_h starts at each logit level
    b_param = nn.Parameter(torch.as_tensor(np.log(prior / (1 - prior)), dtype=torch.float32))
    params = list(head.parameters()) + ([a_param, b_param] if cfg.calib_weight > 0 else [])
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    objective = make_objective(cfg, head, E, tg, a_param, b_param)
    cols, val = tg.cols, data.val
    batch = (torch.as_tensor(tg.X),
             torch.as_tensor(np.nan_to_num(tg.U, nan=np.nan), dtype=torch.float32),
             torch.as_tensor(positive_mask(tg.U, cfg.positive_tolerance)),
             torch.as_tensor(np.isfinite(tg.U)),  # observed cells: the rest are no negatives
             torch.as_tensor(tg.C_rows, dtype=torch.float32),
             torch.as_tensor(np.nan_to_num(tg.U_cal, nan=np.nan), dtype=torch.float32),
             torch.as_tensor(tg.W, dtype=torch.float32))
    val_u = torch.as_tensor(val.quality[:, cols], dtype=torch.float32)
    val_batch = (  # the criterion is always against the observed (gold) outcomes
        torch.as_tensor(data.phi_val),
        val_u,
        torch.as_tensor(positive_mask(val.quality[:, cols], cfg.positive_tolerance)),
        torch.as_tensor(np.isfinite(val.quality[:, cols])),
        torch.as_tensor(
            np.where(np.isfinite(val.cost[:, cols]), val.cost[:, cols], tg.mean_cost[cols])
            / tg.top,
            dtype=torch.float32,
        ),
        val_u,
        torch.ones(len(val_u)),
    )
    fit = HeadFit(head, a_param, b_param, float("inf"), 0, [])
    groups = val_groups(cfg, val)
    best_state = _epochs(cfg, fit, opt, objective, batch, val_batch, data.table.name, groups)
    head.load_state_dict(best_state[0])
    with torch.no_grad():
        a_param.copy_(best_state[1])
        b_param.copy_(best_state[2])
    head.eval()
    return fit


def _epochs(cfg: TrainConfig, fit: HeadFit, opt: Any, objective: Callable[..., Any],
            batch: tuple, val_batch: tuple, name: str,
            groups: torch.Tensor | None = None) -> tuple:
    """The epochs until ``patience`` runs out; fills ``fit``'s best criterion, epoch and
    history, and returns the best (head state, a, b)."""
    X_t = batch[0]
    has_val = len(val_batch[0])
    gen = torch.Generator().manual_seed(cfg.seed)
    best = (copy.deepcopy(fit.head.state_dict()), fit.a.detach().clone(), fit.b.detach().clone())
    bar = _progress(cfg.epochs, cfg.progress, f"train {name}")
    for epoch in range(cfg.epochs):
        perm = torch.randperm(len(X_t), generator=gen)
        losses = []
        step = cfg.batch_size or len(perm)
        for start in range(0, len(perm), step):
            idx = perm[start : start + step]
            loss, _ = objective(*(t[idx] for t in batch), True)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        with torch.no_grad():
            vloss, vparts = (
                objective(*val_batch, False, groups) if has_val else (torch.tensor(0.0), {})
            )
        fit.history.append(
            {
                "epoch": epoch + 1,
                "train_loss": float(np.mean(losses)),
                "val_loss": float(vloss),
                **{f"val_{k}": v for k, v in vparts.items()},
            }
        )
        # stop on the quality-estimate error when it is trained (what routing reads)
        crit = vparts.get("cal_by_dataset", vparts.get("cal", float(vloss))) if has_val \
            else float(vloss)
        if crit < fit.best_criterion - 1e-5:
            fit.best_criterion, fit.best_epoch = crit, epoch + 1
            best = (copy.deepcopy(fit.head.state_dict()), fit.a.detach().clone(),
                    fit.b.detach().clone())
        bar.update(1)
        bar.set_postfix(train=f"{np.mean(losses):.3f}", val=f"{float(vloss):.3f}")
        if epoch + 1 - fit.best_epoch >= cfg.patience:
            break
    bar.close()
    return best


def _progress(total: int, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, desc=desc, unit="epoch", leave=False)
