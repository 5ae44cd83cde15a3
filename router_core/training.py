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
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from router_core.calibration import calibration_from_params, fit_calibration
from router_core.data.splits import carve_val
from router_core.data.table import RoutingTable
from router_core.descriptors.base import DescriptorKind, ProbeSet
from router_core.descriptors.probe_outcome import ProbeOutcome
from router_core.encoders import bulk_encoder, encoder_for_router, make_encoder
from router_core.losses import CaroRanking, CostSpectrumInfoNCE
from router_core.readout import fit_readout
from router_core.router import Calibration, Expert, Head, Router


@dataclass(frozen=True)
class TrainConfig:
    """Hyperparameters: the papers' values (CSCR App. D, EquiRouter Table A1) where they
    survived validation; the rest were chosen on dev folds carved from RouterBench's train
    rows (never its test rows): see the validation record in the module docstring."""

    seed: int = 0
    # descriptors
    n_probes: int = 192  # CSCR: 192 probes from the training set ...
    exclude_probes: bool = False  # CSCR excludes them from training; keeping them validated
    # no worse (RouterBench dev 0.854 either way, LLMRouter 0.622 vs 0.619)
    # head g_θ: 384 → hidden → d (= descriptor dimension)
    hidden: int = 256
    init_head: Literal["random", "probe-kernel"] = "random"  # probe-kernel: kNN over probes
    kernel_top: float = 0.05  # probe-kernel: share of training prompts each probe unit fires on
    activation: str = "relu"
    dropout: float = 0.1
    # optimisation (CSCR: AdamW, lr 5e-4, batch 512, 10 epochs; full-batch steps with early
    # stopping on val validated better here)
    epochs: int = 300
    batch_size: int = 0  # 0 = full batch (one step per epoch)
    lr: float = 1e-3
    weight_decay: float = 0.01
    patience: int = 20  # epochs without a better validation criterion before stopping
    # Eq. 8 (CSCR: K_b = 5, τ_min = 0.05, α = 0.25, γ = 0.2); "vanilla" = one band, γ = 0
    loss: Literal["cscr", "vanilla"] = "cscr"
    cs_weight: float = 0.02  # weight of Eq. 8 (or 6) beside the calibrated quality term
    n_bands: int = 5
    tau_min: float = 0.05
    alpha: float = 0.25
    gamma: float = 0.2
    positive_tolerance: float = 0.0  # P(i) = {h: u_ih ≥ max_h u_ih − tol, u_ih > 0}
    # CARO (EquiRouter: δ = 0 for 0/1 utilities, ρ = 0.1 on RouterBench, λ_CARO = 1)
    use_caro: bool = True
    caro_weight: float = 0.1
    caro_delta: float = 0.0
    caro_rho: float = 0.1
    caro_scale: float = 20.0  # cosines are in [−1, 1]; 1/τ_min puts pairs on a logit scale
    caro_on: Literal["similarity", "logit"] = "logit"  # rank a_h·s + b_h (routed) or s = q·e
    # learned scale: joint per-model logistic on s (0 = off)
    calib_weight: float = 1.0
    calib_c: float = 1.0  # inverse L2 strength of the post-hoc calibration fit
    # where p̂'s (a_h, b_h) come from: the jointly learned ones, or a post-hoc logistic fit
    # on val rows, train rows, or both
    calibrate: Literal["learned", "val", "train", "train+val"] = "train+val"
    # models without training rows (unseen) where the table has their probe outcomes:
    # "readout" fits each one's own direction and scale in the head's space on its probes
    # (router_core.readout, replacing its footprint, or refining its fingerprint: below);
    # "level" (and any model without probe outcomes) is placed by its probe level through
    # the seen models' fit. (Refitting only (a_h, b_h) validated worse than both.)
    calibrate_unseen: Literal["level", "readout"] = "readout"
    readout_c: float = 1.0  # inverse L2 strength of the "readout" fit
    # "readout" for fingerprinted unseen models too, where their probe outcomes are known:
    # the fingerprint, times its level-rule slope (a_h·e_h), is the readout's prior mean
    readout_fingerprints: bool = True
    # decision rule stored in the artifact. k = 0 scores every expert: top-k by raw
    # similarity (CSCR's k = 4) drops experts whose calibrated p̂ would win
    k: int = 0
    delta: float = 0.01
    # data
    val_fraction: float = 0.1  # carved from train when the table has no val rows
    threads: int = 1  # torch CPU threads (fixed, for determinism)
    progress: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class TrainResult:
    router: Router
    metrics: dict[str, Any]
    probes: ProbeSet
    data_hash: str
    history: list[dict] = field(default_factory=list)

    def save(self, path: str | Path) -> Path:
        """Write the versioned artifact (router_core.artifact) with metrics, hash, probes."""
        from router_core.artifact import save_router

        return save_router(
            self.router,
            path,
            metrics=self.metrics,
            data_hash=self.data_hash,
            probes=self.probes.to_json(),
            extra={
                "probe_set": {
                    "n": len(self.probes),
                    "kind": self.router.experts[0].kind if self.router.experts else None,
                }
            },
        )


class _HeadModule(nn.Module):
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


def _probe_kernel_init(
    head: _HeadModule, phi_probes: np.ndarray, phi_train: np.ndarray, top: float
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


def data_hash(table: RoutingTable) -> str:
    """sha256 over what training reads: ids, text, models, quality, cost, split."""
    h = hashlib.sha256()
    h.update("\x1f".join(map(str, table.prompt_ids)).encode())
    h.update("\x1f".join(map(str, table.prompts)).encode("utf-8", "surrogatepass"))
    h.update("\x1f".join(table.models).encode())
    h.update(np.ascontiguousarray(table.quality, dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(table.cost, dtype=np.float64).tobytes())
    h.update("\x1f".join(map(str, table.split)).encode())
    return h.hexdigest()


def aggregate_prompts(table: RoutingTable) -> RoutingTable:
    """One row per prompt_id: mean quality and cost over repeated samples (DARS q̄, c̄)."""
    ids, first, inv = np.unique(
        np.asarray(table.prompt_ids, dtype=str), return_index=True, return_inverse=True
    )
    if len(ids) == len(table):
        return table
    order = np.argsort(first)  # keep first-appearance order
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    grp = rank[inv]
    n = len(ids)

    def mean(x: np.ndarray) -> np.ndarray:
        ok = np.isfinite(x)
        out = np.full((n, x.shape[1]), np.nan)
        for j in range(x.shape[1]):
            s = np.bincount(grp[ok[:, j]], weights=x[ok[:, j], j], minlength=n)
            c = np.bincount(grp[ok[:, j]], minlength=n)
            out[:, j] = np.where(c > 0, s / np.maximum(c, 1), np.nan)
        return out

    base = table.rows(first[order])
    return replace(base, quality=mean(table.quality), cost=mean(table.cost), sample=None)


def _positives(u: np.ndarray, tol: float) -> np.ndarray:
    best = np.nanmax(np.where(np.isfinite(u), u, -np.inf), axis=1, keepdims=True)
    return np.isfinite(u) & (u > 0) & (u >= best - tol)


def _embed(table: RoutingTable, encoder: Any, progress: bool) -> np.ndarray:
    if encoder is None:
        encoder = bulk_encoder()
    if getattr(encoder, "needs_fit", False) and not getattr(encoder, "fitted", False):
        fit_encoder(encoder, table, progress)
    return encoder.encode(list(map(str, table.prompts)), progress=progress)


def fit_encoder(encoder: Any, table: RoutingTable, progress: bool = False) -> None:
    """Fit an encoder that learns from data (activations: layer, standardiser, PCA) on the
    training rows only, against the outcomes of the models a trainer may see."""
    rows = np.flatnonzero(np.asarray(table.split) == "train")
    seen = table.with_models(list(table.train_models))
    encoder.fit([str(t) for t in table.prompts[rows]], seen.quality[rows], progress)


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
class _Prompts:
    """The training and validation prompts (one row per prompt) with their Φ(x)."""

    table: RoutingTable  # train and val rows of every described model
    dhash: str
    train: RoutingTable
    phi_train: np.ndarray
    val: RoutingTable
    phi_val: np.ndarray


def _prompts(table: RoutingTable, cfg: TrainConfig, models: tuple[str, ...], encoder: Any,
             embeddings: np.ndarray | None) -> _Prompts:
    keep = np.isin(np.asarray(table.split), ["train", "val"])
    if embeddings is not None:
        embeddings = np.asarray(embeddings, dtype=np.float32)[keep]
    table = table.rows(keep).with_models(models)
    table = carve_val(table, cfg.val_fraction, cfg.seed)
    dhash = data_hash(table)
    phi_all = embeddings if embeddings is not None else _embed(table, encoder, cfg.progress)
    # one row per prompt (repeated samples averaged), per split
    parts = {}
    for s in ("train", "val"):
        mask = np.asarray(table.split) == s
        sub = table.rows(mask)
        _, first = np.unique(np.asarray(sub.prompt_ids, dtype=str), return_index=True)
        parts[s] = (aggregate_prompts(sub), phi_all[mask][np.sort(first)])
    return _Prompts(table, dhash, *parts["train"], *parts["val"])


def _probe_set(probes: ProbeSet | None, init: Router | None, train: RoutingTable,
               cfg: TrainConfig) -> ProbeSet:
    """The given probes (all training prompts), else a warm start's, else a seeded sample."""
    if probes is not None and not set(probes.ids) <= set(map(str, train.prompt_ids)):
        raise ValueError("every probe must be a training prompt of the table")
    if probes is None and init is not None and init.config.get("probe_ids"):
        ids = list(init.config["probe_ids"])
        if set(ids) <= set(map(str, train.prompt_ids)):
            pos = {p: i for i, p in enumerate(map(str, train.prompt_ids))}
            probes = ProbeSet(
                ids=tuple(ids), prompts=tuple(str(train.prompts[pos[p]]) for p in ids)
            )
    if probes is None:
        probes = ProbeSet.sample(train, cfg.n_probes, seed=cfg.seed)
    return probes


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
    best_state = _epochs(cfg, fit, opt, objective, batch, val_batch, data.table.name)
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

    def objective(x, u, pos, avail, c, train_mode) -> tuple[torch.Tensor, dict[str, float]]:
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
        total = sum(parts.values())
        return total, {k: float(v.detach()) for k, v in parts.items()}

    return objective


def _epochs(cfg: TrainConfig, fit: _Fit, opt: Any, objective: Callable[..., Any],
            batch: tuple, val_batch: tuple, name: str) -> tuple:
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
                objective(*val_batch, False) if has_val else (torch.tensor(0.0), {})
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
        crit = vparts.get("cal", float(vloss)) if has_val else float(vloss)
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


def _calibration(cfg: TrainConfig, fit: _Fit, np_head: Head, E: np.ndarray, data: _Prompts,
                 models: tuple[str, ...], train_models: tuple[str, ...], cols: np.ndarray,
                 level: Any) -> Calibration:
    """p̂'s (a_h, b_h): the jointly learned ones, or a post-hoc logistic fit (cfg.calibrate)."""
    how = cfg.calibrate if (cfg.calibrate != "learned" or cfg.calib_weight > 0) else "val"
    if how == "learned":
        names = [models[i] for i in cols]
        return calibration_from_params(
            fit.a.detach().numpy(), fit.b.detach().numpy(), names, models, level
        )
    # post-hoc logistic on held-out val rows (train rows when there are none)
    train, val = data.train, data.val
    if how == "val" and not len(val):
        how = "train"
    xs = {"val": [data.phi_val], "train": [data.phi_train],
          "train+val": [data.phi_train, data.phi_val]}[how]
    us = {
        "val": [val.quality],
        "train": [train.quality],
        "train+val": [train.quality, val.quality],
    }[how]
    S_cal = np_head(np.concatenate(xs)) @ E.T
    return fit_calibration(
        S_cal,
        np.concatenate(us),
        models,
        fit_models=train_models,
        level=level,
        c=cfg.calib_c,
    )


def _router(cfg: TrainConfig, kind: DescriptorKind, data: _Prompts, encoder: Any,
            np_head: Head, experts: tuple[Expert, ...], calibration: Calibration,
            train_models: tuple[str, ...], probes: ProbeSet) -> Router:
    """The runtime router, named by data, settings (training and encoder) and seed: a
    rebuilt artifact gets a new name."""
    table = data.table
    encoder_settings = (encoder if hasattr(encoder, "settings") else make_encoder()).settings()
    settings = json.dumps(
        {**cfg.to_dict(), "progress": None, "encoder": encoder_settings},
        sort_keys=True,
        default=str,
    )
    chash = hashlib.sha256(settings.encode()).hexdigest()[:4]
    version = f"{table.name}-{data.dhash[:8]}-{chash}-s{cfg.seed}"
    return Router(
        version=version,
        head=np_head,
        experts=experts,
        calibration=calibration,
        k=cfg.k,
        delta=cfg.delta,
        config={
            "train": cfg.to_dict(),
            "descriptor": kind.config(),
            "dataset": table.name,
            "train_models": list(train_models),
            "probe_ids": list(probes.ids),
            "cost_unit": table.cost_unit,
            # the embeddings' settings: the gateway builds its encoder from them
            "encoder": encoder_settings,
        },
    )


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


def _readout_on_probes(
    calibration: Calibration,
    head: Head,
    E: np.ndarray,
    train: RoutingTable,
    phi_train: np.ndarray,
    probes: ProbeSet,
    models: Sequence[str],
    train_models: Sequence[str],
    c: float,
    kind_of: Callable[[str], str],
    fingerprints: bool,
) -> tuple[np.ndarray, Calibration]:
    """For each model without training rows: a logistic readout of q over its probe outcomes.

    The model gets its own direction in the head's space, learned from the N probes it was
    observed on, on top of a representation learned from the seen models. A fingerprinted
    model (``fingerprints``) keeps its fingerprint as the prior mean a_h·e_h, which its
    outcomes refine; without ``fingerprints`` it keeps its fingerprint as it is.
    """
    unseen = [
        m
        for m in models
        if m not in set(train_models) and (fingerprints or kind_of(m) == ProbeOutcome.name)
    ]
    if not unseen:
        return E, calibration
    pos = {p: i for i, p in enumerate(map(str, train.prompt_ids))}
    rows = [pos[p] for p in probes.ids if p in pos]
    Q = head(phi_train[rows])
    E = E.copy()
    a, b = dict(calibration.a), dict(calibration.b)
    for m in unseen:
        i = list(models).index(m)
        own = kind_of(m) == ProbeOutcome.name
        prior = None if own else calibration.a.get(m, calibration.a0) * E[i]
        r = fit_readout(Q, train.quality[rows, list(train.models).index(m)], c, prior=prior)
        if r is not None:  # no signal (all right or all wrong): the level rule stays
            E[i] = r.descriptor
            a[m], b[m] = r.a, r.b
    return E, replace(calibration, a=a, b=b)


def _brier(router: Router, phi: np.ndarray, quality: np.ndarray) -> float:
    """Mean squared error of p̂ against observed quality on val (a calibration check)."""
    s = router.project(phi) @ np.stack([e.descriptor for e in router.experts]).T
    p = np.stack(
        [router.calibration(e.name, s[:, i]) for i, e in enumerate(router.experts)], axis=1
    )
    ok = np.isfinite(quality)
    return float(np.mean((p[ok] - quality[ok]) ** 2))


def _progress(total: int, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, desc=desc, unit="epoch", leave=False)
