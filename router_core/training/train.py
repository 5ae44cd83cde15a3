"""Training the router: g_θ on frozen MiniLM embeddings, Eq. 8 + CARO, then calibration.

``train_router(table, TrainConfig(...))`` reads only ``train`` rows to fit and ``val`` rows to
stop early and to calibrate (a seeded slice of ``train`` becomes ``val`` when the table has
none). It returns a ``Router`` in the runtime format (router_core.runtime.router), so what the
gateway routes with is exactly what was measured here.

The objective (CSCR Eq. 8 + EquiRouter's CARO + a calibrated quality term) is written out in
router_core.training.objective; the fit loop is router_core.training.fit. This module puts them
together.

What was measured on dev folds to choose these settings, and what was tried and not
kept, is in docs/training-record.md.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from router_core.data.table import RoutingTable
from router_core.descriptors.base import DescriptorKind, ProbeSet
from router_core.descriptors.probe_outcome import ProbeOutcome
from router_core.encoders import encoder_for_router
from router_core.runtime.router import Expert, Router
from router_core.training.assemble import (
    assemble_router,
    brier_score,
    calibrate_head,
    readout_on_probes,
)
from router_core.training.config import TrainConfig, TrainResult
from router_core.training.fit import fit_head
from router_core.training.objective import build_targets
from router_core.training.prompts import choose_probes, prepare_prompts


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
    teacher: np.ndarray | None = None,
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
        teacher: (len(table), len(table.models)) p̂ of other routers for ``table``'s rows
            (NaN where none), mixed into the quality target with weight ``config.distill``
            (router_core.training.distillation).
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
            table, cfg, kind, init, models, train_models, encoder, embeddings, t0, probes,
            teacher,
        )
    finally:
        torch.set_num_threads(threads)


def _teacher_rows(teacher: np.ndarray | None, table: RoutingTable, train: RoutingTable,
                  models: tuple[str, ...]) -> np.ndarray | None:
    """``teacher`` (aligned with ``table``) for the rows of ``train`` and columns ``models``."""
    if teacher is None:
        return None
    row = {p: i for i, p in enumerate(map(str, table.prompt_ids))}
    idx = [row[str(p)] for p in train.prompt_ids]
    return np.asarray(teacher)[np.ix_(idx, [table.models.index(m) for m in models])]


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
    teacher: np.ndarray | None = None,
) -> TrainResult:
    torch.manual_seed(cfg.seed)
    pool = models
    models = tuple(dict.fromkeys((*train_models, *pool)))  # every model we describe
    if encoder is None and init is not None:  # a warm start stays in its router's Φ space
        encoder = encoder_for_router(init.config, cache=True)
    data = prepare_prompts(table, cfg, models, encoder, embeddings)
    train, val = data.train, data.val
    # probe set and descriptors (from train rows; a warm start keeps its probes)
    probes = choose_probes(probes, init, train, cfg)
    E = kind.describe(train, probes, models)  # (m, d) unit rows
    level = kind.level(train, probes, models)
    tg = build_targets(train, data.phi_train, probes, models, train_models, cfg,
                  _teacher_rows(teacher, table, train, models))
    fit = fit_head(cfg, tg, E, data, probes, init)
    np_head = fit.head.to_numpy(cfg.activation)
    calibration = calibrate_head(cfg, fit, np_head, E, data, models, train_models, tg.cols, level)

    def kind_of(m: str) -> str:  # mixed pools name a kind per model
        return kind.kind_of(m) if hasattr(kind, "kind_of") else kind.name

    if cfg.calibrate_unseen == "readout":
        E, calibration = readout_on_probes(
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
    router = assemble_router(cfg, kind, data, encoder, np_head, experts, calibration,
                             train_models, probes)
    metrics = {
        "best_epoch": fit.best_epoch,
        "epochs_run": len(fit.history),
        "val_criterion": fit.best_criterion,
        "n_train": int(tg.fit_rows.sum()),
        "n_val": len(val),
        "n_probes": len(probes),
        "train_seconds": round(time.perf_counter() - t0, 2),
        "val_brier": brier_score(router, data.phi_val, val.with_models(pool).quality)
        if len(val) else None,
    }
    return TrainResult(
        router=router, metrics=metrics, probes=probes, data_hash=data.dhash, history=fit.history
    )
