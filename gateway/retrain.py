"""Retraining: observations → DARS supervision → warm-started training → guarded promotion.

``retrain_once`` is what ``tollgate retrain`` and the in-process schedule run:

1. take the ``retrain`` lease (one replica at a time; a conditional UPDATE in the database);
2. skip unless at least ``min_new`` observations arrived since the active version was trained;
3. aggregate all observations per (prompt, model) (router_core.supervision) and split the
   prompts by a stable hash into a training part and a held-out slice;
4. train from the frozen Φ(x) stored with each prompt, warm-started from the current router;
5. score candidate and current router on the held-out slice (router_core.promotion) and
   promote only if the candidate is not worse by more than ``margin``;
6. record the version (promoted or refused) with its metrics; replicas hot-swap to it.
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

from gateway import learning_db as ldb
from router_core import supervision as sv
from router_core.data.table import RoutingTable
from router_core.promotion import DEFAULT_MARGIN, decide_promotion
from router_core.router import Router

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

    Replicas starting together race to record it: the loser's insert hits the unique
    version and is dropped, since the winner recorded the same router.
    """
    if ldb.history(engine):
        return
    try:
        ldb.record_version(
            engine,
            router,
            status="seed",
            parent=None,
            metrics={},
            n_observations=0,
            max_obs_id=0,
            activate=True,
        )
    except IntegrityError:
        pass


def current_router(engine: Engine, fallback: Router) -> Router:
    row = ldb.active_version(engine)
    return fallback if row is None else ldb.load_version(engine, row["version"])


def retrain_once(
    engine: Engine,
    fallback: Router,
    config: RetrainConfig | None = None,
    *,
    force: bool = False,
    holder: str | None = None,
) -> dict[str, Any]:
    """One retraining attempt; returns a report dict with ``status`` and the metrics."""
    from router_core.training import TrainConfig, train_router

    cfg = config or RetrainConfig()
    holder = holder or uuid.uuid4().hex
    if not ldb.acquire_lease(engine, LEASE, holder, cfg.lease_ttl_s):
        return {"status": "locked", "reason": "another replica is retraining"}
    try:
        ensure_seed_version(engine, fallback)
        active = ldb.active_version(engine)
        current = ldb.load_version(engine, active["version"])
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
        fit = agg.rows(~hold)
        # a model never observed on the training prompts has no descriptor to learn: leave it
        # out of the candidate (exploration will observe it; it rejoins at a later retrain)
        seen = [m for j, m in enumerate(agg.models) if fit.observed[:, j].any()]
        prompts = {k: (text[k] or k) for k in keys}
        table = sv.to_table(fit, prompts, beta=cfg.beta, name="observations").with_models(seen)
        emb = phi[~hold]
        if cfg.base is not None and cfg.base_weight < 1.0:
            table, emb = _mixed(cfg, table, emb)
        tcfg = TrainConfig(**{"progress": False, **cfg.train})
        try:
            result = train_router(table, tcfg, init=current, models=tuple(seen), embeddings=emb)
        except (ValueError, FloatingPointError) as e:  # e.g. too sparse to describe a model
            log.warning("retraining failed, the live router stays: %s", e)
            return {"status": "failed", "reason": f"{type(e).__name__}: {e}"}
        seq = len(ldb.history(engine)) + 1
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
        ldb.record_version(
            engine,
            candidate,
            status="promoted" if decision.promote else "refused",
            parent=current.version,
            metrics=metrics,
            n_observations=len(obs),
            max_obs_id=max_id if decision.promote else int(active["max_observation_id"]),
            activate=decision.promote,
        )
        log.info("retrain %s: %s", candidate.version, decision.reason)
        return {
            "status": "promoted" if decision.promote else "refused",
            "version": candidate.version,
            **metrics,
        }
    finally:
        ldb.release_lease(engine, LEASE, holder)


def _mixed(
    cfg: RetrainConfig, table: RoutingTable, emb: np.ndarray
) -> tuple[RoutingTable, np.ndarray]:
    """Mix the base benchmark rows in; embeddings follow the rows by prompt id."""
    base = cfg.base
    by_id = {str(k): e for k, e in zip(table.prompt_ids, emb)}
    by_id.update({str(k): e for k, e in zip(base.prompt_ids, cfg.base_embeddings)})
    mixed = sv.mix(base, table, cfg.base_weight).with_models(table.models)
    return mixed, np.stack([by_id[str(k)] for k in mixed.prompt_ids])


# -- CLI ----------------------------------------------------------------------------------------
def _cli_engine(database_url: str | None, config_path: str | None) -> tuple[Engine, Any]:
    """An engine on the configured database (upgraded to head) and the settings."""
    from gateway.config import load_settings
    from gateway.store import make_engine
    from gateway.store.engine import database_url_from_env
    from gateway.store.migrate import upgrade_engine

    settings = load_settings(config_path) if config_path else None
    url = database_url or (settings.database_url if settings else database_url_from_env())
    engine = make_engine(url)
    upgrade_engine(engine)
    return engine, settings


def _db_options(fn: Any) -> Any:
    import click

    fn = click.option("--config", "config_path", default=None, help="config.yaml to read.")(fn)
    return click.option(
        "--database-url",
        default=None,
        help="Database URL (default: TOLLGATE_DATABASE_URL or the SQLite file).",
    )(fn)


def register(main: Any) -> None:
    """Add ``tollgate retrain`` and ``tollgate router history|rollback`` to the CLI."""
    import json

    import click

    @main.command("retrain")
    @_db_options
    @click.option("--force", is_flag=True, help="Retrain even without min_observations new.")
    @click.option("--min-new", type=int, default=None, help="New observations needed.")
    @click.option(
        "--margin",
        type=float,
        default=DEFAULT_MARGIN,
        show_default=True,
        help="Promote unless the candidate's held-out AUDC is lower by more.",
    )
    def retrain_cmd(
        database_url: str | None,
        config_path: str | None,
        force: bool,
        min_new: int | None,
        margin: float,
    ) -> None:
        """Retrain on the observations, promote if not worse, record the version."""
        from router_core.artifact import load_router

        engine, settings = _cli_engine(database_url, config_path)
        try:
            fallback = load_router(settings.router_path if settings else None)
            default_min = settings.retraining.min_observations if settings else 500
            cfg = RetrainConfig(min_new=default_min if min_new is None else min_new, margin=margin)
            report = retrain_once(engine, fallback, cfg, force=force)
        finally:
            engine.dispose()
        click.echo(json.dumps(report, indent=2, default=str))
        if report["status"] == "locked":
            raise SystemExit(2)

    @main.group("router")
    def router_group() -> None:
        """Router versions: history and rollback."""

    @router_group.command("history")
    @_db_options
    @click.option("--json", "as_json", is_flag=True, help="One JSON object per version.")
    def history_cmd(database_url: str | None, config_path: str | None, as_json: bool) -> None:
        """Every recorded router version with its status and held-out metrics."""
        engine, _ = _cli_engine(database_url, config_path)
        try:
            rows = ldb.history(engine)
        finally:
            engine.dispose()
        for r in rows:
            m = r.get("metrics") or {}
            cand = m.get("candidate") or {}
            cur = m.get("current") or {}
            if as_json:
                click.echo(json.dumps(r, default=str))
                continue
            mark = "*" if r["active"] else " "
            audc = f"{cand['audc']:.4f}" if "audc" in cand else "-"
            prev = f"{cur['audc']:.4f}" if cur and "audc" in cur else "-"
            click.echo(
                f"{mark} {r['version']:<40} {r['status']:<9} audc {audc} "
                f"(current {prev}) obs {r['n_observations']} "
                f"{r['created_at']:%Y-%m-%d %H:%M:%S}"
            )

    @router_group.command("rollback")
    @click.argument("version")
    @_db_options
    def rollback_cmd(version: str, database_url: str | None, config_path: str | None) -> None:
        """Make VERSION the live router again (replicas hot-swap to it)."""
        engine, _ = _cli_engine(database_url, config_path)
        try:
            ldb.activate(engine, version)
        except LookupError as e:
            raise click.ClickException(str(e)) from e
        finally:
            engine.dispose()
        click.echo(f"active router version: {version}")
