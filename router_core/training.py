"""Training the router: g_θ on frozen MiniLM embeddings, Eq. 8 + CARO, then calibration.

``train_router(table, TrainConfig(...))`` reads only ``train`` rows to fit and ``val`` rows to
stop early and to calibrate (a seeded slice of ``train`` becomes ``val`` when the table has
none). It returns a ``Router`` in the runtime format (router_core.router), so what the
gateway routes with is exactly what was measured here.

Objective per batch (CSCR §3.4 with EquiRouter's ranking term and a learned scale):
    L = L_CS(Eq. 8)  [or vanilla InfoNCE, Eq. 6]
      + w_caro · L_CARO(s·scale, u, c)                 (EquiRouter Eq. 6-7; off for no_caro)
      + w_cal  · BCE(σ(a_h s_ih + b_h), u_ih)          (puts s on the scale of quality)
with s_ih = q_i·e_h, q_i = g_θ(Φ(x_i))/‖·‖, e_h the descriptors (frozen).

What was measured on dev folds to choose these settings, and what was tried and not
kept, is in docs/training-record.md.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from router_core.data.combined import NAME as COMBINED_NAME
from router_core.data.combined import row_datasets
from router_core.data.table import RoutingTable
from router_core.descriptors.base import DescriptorKind, ProbeSet
from router_core.descriptors.probe_outcome import ProbeOutcome
from router_core.encoders import encoder_for_router
from router_core.losses import CaroRanking, CostSpectrumInfoNCE
from router_core.router import Expert, Router
from router_core.train_calibration import _brier, _calibration, _readout_on_probes, _router
from router_core.train_config import TrainConfig, TrainResult
from router_core.train_data import (
    _embed,
    _positives,
    _probe_set,
    _Prompts,
    _prompts,
    aggregate_prompts,
    data_hash,
    fit_encoder,
)
from router_core.train_head import _HeadModule, _probe_kernel_init

# re-exported: what other code imports from router_core.training
__all__ = [
    "TrainConfig",
    "TrainResult",
    "_HeadModule",
    "_Prompts",
    "_brier",
    "_calibration",
    "_caro_by_pattern",
    "_embed",
    "_positives",
    "_probe_kernel_init",
    "_probe_set",
    "_prompts",
    "_readout_on_probes",
    "_router",
    "aggregate_prompts",
    "data_hash",
    "fit_encoder",
    "train_router",
]


def train_router(
    table: RoutingTable,
    config: TrainConfig | None = None,
    descriptor: DescriptorKind | None = None,
    init: Router | None = None,
    *,
    models: Sequence[str] | None = None,
    train_models: Sequence[str] | None = None,
    encoder: Any = None,
    embeddings: np.ndarray | None = None,
    probes: ProbeSet | None = None,
) -> TrainResult:
    """Train g_θ and calibrate it; return the runtime ``Router`` and training metrics.

    Args:
        table: a RoutingTable; rows with split ``train`` fit, ``val`` rows stop early and
            calibrate (carved from train when absent); ``test`` rows are never read.
        config: hyperparameters (``TrainConfig()``: validated defaults, see its docstring).
        descriptor: the descriptor kind (default: probe-outcome footprints).
        init: warm start: its head weights (when shapes match) and probe set.
        models: the router's pool (default: ``table.deployable_models``: all models, or the
            held-out ones on the unseen-models split, which it knows only by descriptor).
        train_models: models whose outcomes supervise the head (default:
            ``table.train_models``, i.e. the seen ones).
        encoder: Φ (default: ``init``'s encoder when warm-starting, else
            ``router_core.encoders.bulk_encoder()``, the default kind; with its disk cache).
            Recorded in the router, so pass it with ``embeddings`` made by another encoder.
        embeddings: precomputed Φ(x) for every row of ``table`` (skips the encoder).
        probes: the probe set (training prompts of ``table``) to describe the experts on;
            default: a seeded sample of ``config.n_probes`` training prompts (or ``init``'s).
    """
    cfg = config or TrainConfig()
    kind = descriptor or ProbeOutcome()
    t0 = time.perf_counter()
    models = tuple(models or getattr(table, "deployable_models", None) or table.models)
    train_models = tuple(train_models or getattr(table, "train_models", None) or models)
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        return _train(
            table, cfg, kind, init, models, train_models, encoder, embeddings, t0, probes
        )
    finally:
        torch.set_num_threads(threads)


def _train(
    table: RoutingTable,
    cfg: TrainConfig,
    kind: DescriptorKind,
    init: Router | None,
    models: tuple[str, ...],
    train_models: tuple[str, ...],
    encoder: Any,
    embeddings: np.ndarray | None,
    t0: float,
    probes: ProbeSet | None = None,
) -> TrainResult:
    torch.manual_seed(cfg.seed)
    pool = models
    models = tuple(dict.fromkeys((*train_models, *pool)))  # every model we describe
    if encoder is None and init is not None:  # a warm start stays in its router's Φ space
        encoder = encoder_for_router(init.config, cache=True)
    data = _prompts(table, cfg, models, encoder, embeddings)
    train, val = data.train, data.val
    # probe set and descriptors (from train rows; a warm start keeps its probes)
    probes = _probe_set(probes, init, train, cfg)
    E = kind.describe(train, probes, models)  # (m, d) unit rows
    level = kind.level(train, probes, models)
    tg = _targets(train, data.phi_train, probes, models, train_models, cfg)
    fit = _fit_head(cfg, tg, E, data, probes, init)
    np_head = fit.head.to_numpy(cfg.activation)
    calibration = _calibration(cfg, fit, np_head, E, data, models, train_models, tg.cols, level)

    def kind_of(m: str) -> str:  # mixed pools name a kind per model
        return kind.kind_of(m) if hasattr(kind, "kind_of") else kind.name

    if cfg.calibrate_unseen == "readout":
        E, calibration = _readout_on_probes(
            calibration, np_head, E, train, data.phi_train, probes, models, train_models,
            cfg.readout_c, kind_of, cfg.readout_fingerprints,
        )
    experts = tuple(
        Expert(
            name=m,
            descriptor=E[models.index(m)].astype(np.float32),
            cost_usd=float(tg.mean_cost[models.index(m)]),
            kind=kind_of(m),
        )
        for m in pool
    )
    router = _router(cfg, kind, data, encoder, np_head, experts, calibration, train_models,
                     probes)
    metrics = {
        "best_epoch": fit.best_epoch,
        "epochs_run": len(fit.history),
        "val_criterion": fit.best_criterion,
        "n_train": int(tg.fit_rows.sum()),
        "n_val": len(val),
        "n_probes": len(probes),
        "train_seconds": round(time.perf_counter() - t0, 2),
        "val_brier": _brier(router, data.phi_val, val.with_models(pool).quality)
        if len(val) else None,
    }
    return TrainResult(
        router=router, metrics=metrics, probes=probes, data_hash=data.dhash, history=fit.history
    )


@dataclass(frozen=True)
class _Targets:
    """What the head is fitted to: the supervised models' qualities and normalised costs."""

    fit_rows: np.ndarray  # training rows used for the fit (probes left out if configured)
    cols: np.ndarray  # the supervised (train) models' columns among the described models
    U: np.ndarray
    C_rows: np.ndarray  # per-row cost c̃ (the model's mean where unobserved)
    X: np.ndarray
    mean_cost: np.ndarray  # (m,) USD per query
    top: float  # c̃ = c / top, the dearest supervised model's mean cost
    c_norm: np.ndarray


def _targets(train: RoutingTable, phi_train: np.ndarray, probes: ProbeSet,
             models: tuple[str, ...], train_models: tuple[str, ...], cfg: TrainConfig
             ) -> _Targets:
    fit_rows = (
        ~np.isin(np.asarray(train.prompt_ids, dtype=str), probes.ids)
        if cfg.exclude_probes
        else np.ones(len(train), dtype=bool)
    )
    cols = np.array([models.index(m) for m in train_models])
    U = train.quality[fit_rows][:, cols]
    C_rows = train.cost[fit_rows][:, cols]
    X = phi_train[fit_rows]
    mean_cost = np.nanmean(train.cost, axis=0)  # (m,) USD per query
    mean_cost = np.where(np.isfinite(mean_cost), mean_cost, np.nanmean(mean_cost))
    top = mean_cost[cols].max()  # c̃ = c / max over the supervised models
    c_norm = mean_cost / top
    C_rows = np.where(np.isfinite(C_rows), C_rows, mean_cost[cols]) / top
    return _Targets(fit_rows, cols, U, C_rows, X, mean_cost, top, c_norm)


def _init_head(cfg: TrainConfig, tg: _Targets, d: int, data: _Prompts, probes: ProbeSet,
               init: Router | None) -> _HeadModule:
    """A fresh head (probe-kernel initialised if configured), or a warm start's weights."""
    head = _HeadModule(tg.X.shape[1], cfg.hidden, d, cfg.activation, cfg.dropout)
    if cfg.init_head == "probe-kernel" and init is None:
        pos = {p: i for i, p in enumerate(map(str, data.train.prompt_ids))}
        _probe_kernel_init(head, data.phi_train[[pos[p] for p in probes.ids]], tg.X,
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
class _Fit:
    """The fitted head and per-model logistic (a_h, b_h), restored to the best epoch."""

    head: _HeadModule
    a: nn.Parameter
    b: nn.Parameter
    best_criterion: float
    best_epoch: int
    history: list[dict]


def _fit_head(cfg: TrainConfig, tg: _Targets, E: np.ndarray, data: _Prompts, probes: ProbeSet,
              init: Router | None) -> _Fit:
    """Minimise the objective (module docstring) with early stopping on val."""
    head = _init_head(cfg, tg, E.shape[1], data, probes, init)
    a_param = nn.Parameter(torch.full((len(tg.cols),), 5.0))
    prior = np.clip(np.nanmean(tg.U, axis=0), 0.02, 0.98)  # b_h starts at each logit level
    b_param = nn.Parameter(torch.as_tensor(np.log(prior / (1 - prior)), dtype=torch.float32))
    params = list(head.parameters()) + ([a_param, b_param] if cfg.calib_weight > 0 else [])
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    objective = _objective(cfg, head, E, tg, a_param, b_param)
    cols, val = tg.cols, data.val
    batch = (torch.as_tensor(tg.X),
             torch.as_tensor(np.nan_to_num(tg.U, nan=np.nan), dtype=torch.float32),
             torch.as_tensor(_positives(tg.U, cfg.positive_tolerance)),
             torch.as_tensor(np.isfinite(tg.U)),  # observed cells: the rest are no negatives
             torch.as_tensor(tg.C_rows, dtype=torch.float32))
    val_batch = (
        torch.as_tensor(data.phi_val),
        torch.as_tensor(val.quality[:, cols], dtype=torch.float32),
        torch.as_tensor(_positives(val.quality[:, cols], cfg.positive_tolerance)),
        torch.as_tensor(np.isfinite(val.quality[:, cols])),
        torch.as_tensor(
            np.where(np.isfinite(val.cost[:, cols]), val.cost[:, cols], tg.mean_cost[cols])
            / tg.top,
            dtype=torch.float32,
        ),
    )
    fit = _Fit(head, a_param, b_param, float("inf"), 0, [])
    groups = _val_groups(cfg, val)
    best_state = _epochs(cfg, fit, opt, objective, batch, val_batch, data.table.name, groups)
    head.load_state_dict(best_state[0])
    with torch.no_grad():
        a_param.copy_(best_state[1])
        b_param.copy_(best_state[2])
    head.eval()
    return fit


def _objective(cfg: TrainConfig, head: _HeadModule, E: np.ndarray, tg: _Targets,
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

    def objective(x, u, pos, avail, c, train_mode, groups=None
                  ) -> tuple[torch.Tensor, dict[str, float]]:
        head.train(train_mode)
        s = head(x) @ E_t.T
        parts = {"cs": cfg.cs_weight * cs_loss(s, pos, c_t, avail)}
        if cfg.use_caro and cfg.caro_weight > 0:
            # rank on the routing score itself (calibrated logit) or on the raw similarity
            z = a_param * s + b_param if cfg.caro_on == "logit" else s
            parts["caro"] = cfg.caro_weight * _caro_by_pattern(caro, z, u, c, avail)
        if cfg.calib_weight > 0:
            ok = torch.isfinite(u)
            logits = (a_param * s + b_param)[ok]
            parts["cal"] = cfg.calib_weight * F.binary_cross_entropy_with_logits(logits, u[ok])
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


def _val_groups(cfg: TrainConfig, val: RoutingTable) -> torch.Tensor | None:
    """(n_val,) dataset codes of a combined table's val rows when stopping per dataset."""
    if cfg.stop_on != "per-dataset" or val.name != COMBINED_NAME or not len(val):
        return None
    _, codes = np.unique(row_datasets(val).astype(str), return_inverse=True)
    return torch.as_tensor(codes)


def _epochs(cfg: TrainConfig, fit: _Fit, opt: Any, objective: Callable[..., Any],
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


def _caro_by_pattern(caro: CaroRanking, z, u, c, avail) -> torch.Tensor:
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


def _progress(total: int, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, desc=desc, unit="epoch", leave=False)
