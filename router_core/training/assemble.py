"""After the fit: calibration, readout of unseen models on their probes, the router."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from router_core.cold_start.readout import fit_readout
from router_core.data.table import RoutingTable
from router_core.descriptors.base import DescriptorKind, ProbeSet
from router_core.descriptors.probe_outcome import ProbeOutcome
from router_core.encoders import make_encoder
from router_core.runtime.router import Calibration, Expert, Head, Router
from router_core.training.config import TrainConfig
from router_core.tuning.calibration_fit import calibration_from_params, fit_calibration

if TYPE_CHECKING:
    from router_core.training.fit import HeadFit
    from router_core.training.prompts import TrainingPrompts


def calibrate_head(cfg: TrainConfig, fit: HeadFit, np_head: Head, E: np.ndarray,
                   data: TrainingPrompts, models: tuple[str, ...], train_models: tuple[str, ...],
                   cols: np.ndarray, level: Any) -> Calibration:
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


def assemble_router(cfg: TrainConfig, kind: DescriptorKind, data: TrainingPrompts,
                    encoder: Any, np_head: Head, experts: tuple[Expert, ...],
                    calibration: Calibration, train_models: tuple[str, ...],
                    probes: ProbeSet) -> Router:
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


def readout_on_probes(
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


def brier_score(router: Router, phi: np.ndarray, quality: np.ndarray) -> float:
    """Mean squared error of p̂ against observed quality on val (a calibration check)."""
    p = router.quality_estimates(router.project(phi))
    ok = np.isfinite(quality)
    return float(np.mean((p[ok] - quality[ok]) ** 2))
