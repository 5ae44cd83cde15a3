"""The training objective: what the head is fitted to, and the loss of a batch.

Kept apart from the fit loop (router_core.training.fit) so the equations can be read against
the papers without the optimiser around them. Objective per batch (CSCR §3.4 with
EquiRouter's ranking term and a learned scale):
    L = L_CS(Eq. 8)  [or vanilla InfoNCE, Eq. 6]
      + w_caro · L_CARO(s·scale, u, c)                 (EquiRouter Eq. 6-7; off for no_caro)
      + w_cal  · BCE(σ(a_h s_ih + b_h), u_ih)          (puts s on the scale of quality)
with s_ih = q_i·e_h, q_i = g_θ(Φ(x_i))/‖·‖, e_h the descriptors (frozen).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from router_core.data.combined import NAME as COMBINED_NAME
from router_core.data.combined import row_datasets
from router_core.data.table import RoutingTable
from router_core.descriptors.base import ProbeSet
from router_core.losses import CaroRanking, CostSpectrumInfoNCE
from router_core.training.config import TrainConfig
from router_core.training.head import HeadModule


@dataclass(frozen=True)
class FitTargets:
    """What the head is fitted to: the supervised models' qualities and normalised costs."""

    fit_rows: np.ndarray  # training rows used for the fit (probes left out if configured)
    cols: np.ndarray  # the supervised (train) models' columns among the described models
    U: np.ndarray
    U_cal: np.ndarray  # the quality term's target: U, or U mixed with a teacher's p̂
    W: np.ndarray  # (n,) row weights in the quality term (TrainConfig.balance), mean 1
    C_rows: np.ndarray  # per-row cost c̃ (the model's mean where unobserved)
    X: np.ndarray
    mean_cost: np.ndarray  # (m,) USD per query
    top: float  # c̃ = c / top, the dearest supervised model's mean cost
    c_norm: np.ndarray


def build_targets(train: RoutingTable, phi_train: np.ndarray, probes: ProbeSet,
                  models: tuple[str, ...], train_models: tuple[str, ...], cfg: TrainConfig,
                  teacher: np.ndarray | None = None) -> FitTargets:
    """``teacher``: (len(train), len(models)) p̂ of another router, NaN where it has none."""
    fit_rows = (
        ~np.isin(np.asarray(train.prompt_ids, dtype=str), probes.ids)
        if cfg.exclude_probes
        else np.ones(len(train), dtype=bool)
    )
    cols = np.array([models.index(m) for m in train_models])
    U = train.quality[fit_rows][:, cols]
    U_cal = U
    if teacher is not None and cfg.distill > 0:  # ũ = (1 − β)·u + β·p̂ (BAM!, Clark 2019)
        T = teacher[fit_rows][:, cols]
        U_cal = np.where(np.isfinite(T), (1 - cfg.distill) * U + cfg.distill * T, U)
    C_rows = train.cost[fit_rows][:, cols]
    X = phi_train[fit_rows]
    mean_cost = np.nanmean(train.cost, axis=0)  # (m,) USD per query
    mean_cost = np.where(np.isfinite(mean_cost), mean_cost, np.nanmean(mean_cost))
    top = mean_cost[cols].max()  # c̃ = c / max over the supervised models
    c_norm = mean_cost / top
    C_rows = np.where(np.isfinite(C_rows), C_rows, mean_cost[cols]) / top
    W = balance_weights(train.rows(fit_rows), U, cfg.balance)
    return FitTargets(fit_rows, cols, U, U_cal, W, C_rows, X, mean_cost, top, c_norm)


def balance_weights(rows: RoutingTable, U: np.ndarray, balance: float) -> np.ndarray:
    """(n,) weight of each row's cells: ∝ its dataset's observed cells^(−balance), so that
    the cells weigh 1 on average (all 1 for one dataset or ``balance`` 0)."""
    if balance == 0 or rows.name != COMBINED_NAME:
        return np.ones(len(U))
    source = row_datasets(rows).astype(str)
    cells = np.isfinite(U).sum(axis=1).astype(float)
    w = np.ones(len(U))
    for name in np.unique(source):
        w[source == name] = cells[source == name].sum() ** (-balance)
    return w * cells.sum() / (w * cells).sum()


def make_objective(cfg: TrainConfig, head: HeadModule, E: np.ndarray, tg: FitTargets,
                   a_param: nn.Parameter, b_param: nn.Parameter) -> Callable[..., Any]:
    """The loss of a batch: Eq. 8 (or 6), CARO and the calibrated quality term."""
    vanilla = cfg.loss == "vanilla"
    cs_loss = CostSpectrumInfoNCE(
        n_bands=1 if vanilla else cfg.n_bands,
        tau_min=cfg.tau_min,
        alpha=cfg.alpha,
        gamma=0.0 if vanilla else cfg.gamma,
    )
    caro = CaroRanking(
        delta=cfg.caro_delta,
        rho=cfg.caro_rho,
        scale=cfg.caro_scale if cfg.caro_on == "similarity" else 1.0,
    )
    E_t = torch.as_tensor(E[tg.cols])
    c_t = torch.as_tensor(tg.c_norm[tg.cols], dtype=torch.float32)

    def objective(x, u, pos, avail, c, u_cal, w, train_mode, groups=None
                  ) -> tuple[torch.Tensor, dict[str, float]]:
        head.train(train_mode)
        s = head(x) @ E_t.T
        parts = {"cs": cfg.cs_weight * cs_loss(s, pos, c_t, avail)}
        if cfg.use_caro and cfg.caro_weight > 0:
            # rank on the routing score itself (calibrated logit) or on the raw similarity
            z = a_param * s + b_param if cfg.caro_on == "logit" else s
            parts["caro"] = cfg.caro_weight * caro_by_pattern(caro, z, u, c, avail)
        if cfg.calib_weight > 0:
            ok = torch.isfinite(u)
            logits = (a_param * s + b_param)[ok]
            weight = w[:, None].expand_as(u)[ok]
            parts["cal"] = cfg.calib_weight * (F.binary_cross_entropy_with_logits(
                logits, u_cal[ok], weight=weight, reduction="sum") / weight.sum())
        out = {k: float(v.detach()) for k, v in parts.items()}
        if groups is not None and cfg.calib_weight > 0:  # each dataset's own error, averaged
            with torch.no_grad():
                cell = F.binary_cross_entropy_with_logits(
                    a_param * s + b_param, torch.nan_to_num(u), reduction="none")
                ok = torch.isfinite(u)
                errs = [cell[(groups == g)[:, None] & ok].mean() for g in torch.unique(groups)]
                out["cal_by_dataset"] = float(torch.stack(errs).mean())
        return sum(parts.values()), out

    return objective


def caro_by_pattern(caro: CaroRanking, z, u, c, avail) -> torch.Tensor:
    """CARO over the experts each query was observed with: pairs need two outcomes, so rows
    are grouped by their pattern of observed experts and each group ranks only its columns
    (the same pairs as the full (B, M, M) product, at a fraction of its cost when datasets
    with different models are trained together); the groups' losses are averaged by size."""
    patterns, group = torch.unique(avail, dim=0, return_inverse=True)
    if len(patterns) == 1:
        return caro(z, u, c)
    total = z.sum() * 0.0
    for g, pattern in enumerate(patterns):
        rows = torch.nonzero(group == g).squeeze(1)
        cols = torch.nonzero(pattern).squeeze(1)
        if len(cols) < 2:
            continue
        sub = caro(z[rows][:, cols], u[rows][:, cols], c[rows][:, cols])
        total = total + sub * (len(rows) / len(z))
    return total


def val_groups(cfg: TrainConfig, val: RoutingTable) -> torch.Tensor | None:
    """(n_val,) dataset codes of a combined table's val rows when stopping per dataset."""
    if cfg.stop_on != "per-dataset" or val.name != COMBINED_NAME or not len(val):
        return None
    _, codes = np.unique(row_datasets(val).astype(str), return_inverse=True)
    return torch.as_tensor(codes)
