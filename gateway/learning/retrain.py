"""Retraining: observations → DARS supervision → warm-started training → guarded promotion.

``retrain_once`` is what ``tollgate retrain`` and the in-process schedule run:

1. take the ``retrain`` lease (one replica at a time; a conditional UPDATE in the database);
2. skip unless at least ``min_new`` observations arrived since the active version was trained;
3. aggregate all observations per (prompt, model) (router_core.training.supervision) and split the
   prompts by a stable hash into a training part and a held-out slice;
4. train from the frozen Φ(x) stored with each prompt, warm-started from the current router;
5. score candidate and current router on the held-out slice (router_core.evaluation.promotion) and
   promote only if the candidate is not worse by more than ``margin``;
6. record the version (promoted or refused) with its metrics; replicas hot-swap to it.

The promotion is a compare-and-set on the version training started from
(gateway/learning/router_versions.py): if an operator rolled back, or anything else was
published, while it trained (minutes), the candidate is recorded inactive with status
``stale`` and logged, never activated over it. Under an operator's hold nothing is trained.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError

from gateway.learning import leases, router_versions
from gateway.learning import tables as ldb
from router_core.data.table import RoutingTable
from router_core.evaluation.promotion import DEFAULT_MARGIN, decide_promotion
from router_core.runtime.router import Router
from router_core.training import supervision as sv

log = logging.getLogger(__name__)
LEASE = "retrain"


@dataclass(frozen=True)
class RetrainConfig:
    min_new: int = 500  # new observations since the active version, else skip
    margin: float = DEFAULT_MARGIN  # promotion guard: AUDC(candidate) ≥ AUDC(current) − margin
    holdout_fraction: float = 0.2
    min_holdout: int = 20  # fewer held-out prompts than this: no verdict, no promotion
    beta: float = sv.BETA
    base: RoutingTable | None = None  # benchmark rows to mix in (train split)
    base_embeddings: np.ndarray | None = None
    base_weight: float = 1.0  # observations' share of the training rows (1 = observations only)
    train: dict[str, Any] = field(default_factory=dict)  # TrainConfig overrides
    lease_ttl_s: float = 1800.0


def ensure_seed_version(engine: Engine, router: Router) -> None:
    """Record the router a gateway started with as the first, active version (for rollback).

    Replicas starting together race to record it. The loser either finds the winner's
    version active (``StaleParent``: the winner committed before the loser's transaction
    read it) or its insert hits the unique version (``IntegrityError``: both read none); it
    drops its own either way, since the winner recorded the same router.
    """
    if router_versions.history(engine):
        return
    try:
        router_versions.record_version(
            engine,
            router,
            status="seed",
            parent=None,
            metrics={},
            n_observations=0,
            max_obs_id=0,
            activate=True,
        )
    except (IntegrityError, router_versions.StaleParent):
        pass


def retrain_once(
    engine: Engine,
    fallback: Router,
    config: RetrainConfig | None = None,
    *,
    force: bool = False,
    holder: str | None = None,
) -> dict[str, Any]:
    """One retraining attempt; returns a report dict with ``status`` and the metrics."""
    cfg = config or RetrainConfig()
    holder = holder or uuid.uuid4().hex
    if not leases.acquire_lease(engine, LEASE, holder, cfg.lease_ttl_s):
        return {"status": "locked", "reason": "another replica is retraining"}
    try:
        return _retrain(engine, fallback, cfg, force, holder)
    finally:
        leases.release_lease(engine, LEASE, holder)


def _retrain(engine: Engine, fallback: Router, cfg: RetrainConfig, force: bool, holder: str
             ) -> dict[str, Any]:
    """Under the lease: train a candidate on the observations' training prompts, judge it
    against the live router on the held-out ones, record it (promoted or refused)."""
    from router_core.training import TrainConfig, train_router

    ensure_seed_version(engine, fallback)
    if router_versions.held(engine):
        return {"status": "held", "reason": "an operator's rollback holds the router "
                "(`tollgate router resume` lifts it)"}
    active = router_versions.active_version(engine)
    current = router_versions.load_version(engine, active["version"])
    max_id = ldb.max_observation_id(engine)
    new = max_id - int(active["max_observation_id"])
    if new < cfg.min_new and not force:
        return {"status": "skipped", "reason": f"{new} new observations < {cfg.min_new}"}
    t0 = time.perf_counter()
    obs = ldb.load_observations(engine, max_id)
    obs = obs[obs["model"].isin(current.model_names)]
    agg = sv.aggregate(obs, models=current.model_names)
    keys = [str(k) for k in agg.prompt_keys]
    text, phi = ldb.load_prompts(engine, keys)
    hold = sv.holdout_mask(keys, cfg.holdout_fraction)
    if hold.sum() < cfg.min_holdout or (~hold).sum() < cfg.min_holdout:
        return {"status": "skipped", "reason": f"too few prompts ({len(keys)}) to hold out"}
    table, emb, seen = _training_set(cfg, agg, hold, {k: (text[k] or k) for k in keys}, phi)
    tcfg = TrainConfig(**{"progress": False, **cfg.train})
    try:
        result = train_router(table, tcfg, init=current, models=tuple(seen), embeddings=emb)
    except (ValueError, FloatingPointError) as e:  # e.g. too sparse to describe a model
        log.warning("retraining failed, the live router stays: %s", e)
        return {"status": "failed", "reason": f"{type(e).__name__}: {e}"}
    seq = len(router_versions.history(engine)) + 1
    candidate = dataclasses.replace(
        result.router, version=f"v{seq}-{time.strftime('%Y%m%dT%H%M%S')}-{holder[:6]}"
    )
    holdout = sv.to_table(agg.rows(hold), beta=0.0, labels="risk", split="test")
    decision = decide_promotion(candidate, current, phi[hold], holdout, margin=cfg.margin)
    metrics = {
        **decision.to_dict(),
        "train": result.metrics,
        "n_prompts": len(keys),
        "n_holdout": int(hold.sum()),
        "n_observations": len(obs),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    status = "promoted" if decision.promote else "refused"
    record = {"engine": engine, "router": candidate, "parent": current.version,
              "metrics": metrics, "n_observations": len(obs)}
    try:
        router_versions.record_version(
            **record, status=status, activate=decision.promote,
            max_obs_id=max_id if decision.promote else int(active["max_observation_id"]))
    except (router_versions.StaleParent, router_versions.Held) as e:
        # trained on a version that is not the live one any more (or under a hold taken
        # meanwhile): kept for the record, never activated over what replaced it
        status = "stale"
        router_versions.record_version(**record, status=status, activate=False,
                                       max_obs_id=int(active["max_observation_id"]))
        log.warning("retrain %s not promoted: %s", candidate.version, e)
        metrics = {**metrics, "not_promoted": str(e)}
    log.info("retrain %s: %s", candidate.version, decision.reason)
    return {"status": status, "version": candidate.version, **metrics}


def _training_set(cfg: RetrainConfig, agg: Any, hold: np.ndarray, prompts: dict[str, str],
                  phi: np.ndarray) -> tuple[RoutingTable, np.ndarray, list[str]]:
    """The training prompts' table and embeddings (the base benchmark mixed in when
    configured), and the models observed on them."""
    fit = agg.rows(~hold)
    # a model never observed on the training prompts has no descriptor to learn: leave it
    # out of the candidate (exploration will observe it; it rejoins at a later retrain)
    seen = [m for j, m in enumerate(agg.models) if fit.observed[:, j].any()]
    table = sv.to_table(fit, prompts, beta=cfg.beta, name="observations").with_models(seen)
    emb = phi[~hold]
    if cfg.base is not None and cfg.base_weight < 1.0:
        table, emb = _mixed(cfg, table, emb)
    return table, emb, seen


def _mixed(
    cfg: RetrainConfig, table: RoutingTable, emb: np.ndarray
) -> tuple[RoutingTable, np.ndarray]:
    """Mix the base benchmark rows in; embeddings follow the rows by prompt id."""
    base = cfg.base
    by_id = {str(k): e for k, e in zip(table.prompt_ids, emb)}
    by_id.update({str(k): e for k, e in zip(base.prompt_ids, cfg.base_embeddings)})
    mixed = sv.mix(base, table, cfg.base_weight).with_models(table.models)
    return mixed, np.stack([by_id[str(k)] for k in mixed.prompt_ids])
