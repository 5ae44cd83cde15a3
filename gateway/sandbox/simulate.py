"""``tollgate simulate``: the learning loop closed end to end on RouterBench's recorded outcomes.

1. A replay upstream on 127.0.0.1 (gateway/sandbox/replay.py) answers as the benchmark
   models: each model's recorded answer to the prompt, priced so the gateway's cost is the
   recorded USD. Routing therefore trades the models' real prices.
2. A real gateway (uvicorn, SQLite, the learning loop) starts from a *cold* router: the
   benchmark's models with random descriptors and a flat calibration (p̂ = 0.5 for all), so
   it routes to the cheapest model in reach.
3. Each round, a fresh slice of the training prompts goes through the gateway with the
   OpenAI SDK (gateway/sandbox/simulated_clients.py), each with a cost weight λ drawn from a
   grid (tenants differ). Shadow exploration (ε, candidates, its own budget) replays
   requests to other models in the background and a reference judge scores those answers
   with their recorded grades.
   ``--feedback recorded``: the client posts each served answer's recorded correctness to
   ``/v1/feedback``. ``--feedback judge``: no client feedback; the judge also scores the
   served answers.
4. After each round ``retrain_once`` runs (warm start, guarded promotion), the gateway
   hot-swaps to a promoted version, and the live router is scored on the test split
   (AUDC, QNC) beside the router trained offline on the same prompts and the baselines.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np

from gateway.sandbox.local_server import serve_in_thread
from gateway.sandbox.replay import Replay, replay_upstream
from gateway.sandbox.simulated_clients import SimulatedClients, tenant_key
from router_core.data.table import RoutingTable
from router_core.runtime.router import Calibration, Expert, Head, Router

LAMBDAS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
MAX_TOKENS = 50_000  # covers the largest recorded cost / p_m ratio


# -- routers ----------------------------------------------------------------------------------
def cold_router(
    models: tuple[str, ...],
    mean_cost: np.ndarray,
    dim: int = 64,
    seed: int = 0,
    encoder: dict | None = None,
) -> Router:
    """Knows the models and their prices, nothing about quality: p̂ = 0.5 for every model.

    ``encoder``: the settings of the encoder the gateway embeds with (recorded, so that
    retrained versions, made with that encoder, are swapped in)."""
    rng = np.random.default_rng(seed)
    head = Head(
        layers=(
            (rng.normal(size=(128, 384)).astype(np.float32) / 20, np.zeros(128, np.float32)),
            (rng.normal(size=(dim, 128)).astype(np.float32) / 11, np.zeros(dim, np.float32)),
        )
    )
    desc = rng.normal(size=(len(models), dim))
    desc /= np.linalg.norm(desc, axis=1, keepdims=True)
    experts = tuple(
        Expert(m, desc[j].astype(np.float32), float(mean_cost[j])) for j, m in enumerate(models)
    )
    return Router(
        version="cold",
        head=head,
        experts=experts,
        calibration=Calibration(a={}, b={}, a0=0.0, b0=0.0),
        config={"encoder": encoder} if encoder else {},
    )


def baselines(table: RoutingTable, train_rows: np.ndarray, te: np.ndarray) -> dict[str, float]:
    """AUDC of the simple routers on the test rows ``te`` (trained on ``train_rows``)."""
    from router_core.baselines import DEFAULT_LAMBDAS
    from router_core.baselines.simple import best_single, cheapest, oracle, random_router
    from router_core.evaluation.metrics import evaluate_choices

    q, c = table.quality[te], table.cost[te]
    ok = np.isfinite(q).all(axis=1) & np.isfinite(c).all(axis=1)
    q, c = q[ok], c[ok]
    qt, ct = table.quality[train_rows], table.cost[train_rows]
    n, m = q.shape
    choices = {
        "oracle": oracle(q, c, DEFAULT_LAMBDAS),
        "random": random_router(n, m, 0),
        "cheapest": cheapest(ct, n),
        "best_single": best_single(qt, ct, n),
    }
    return {k: float(evaluate_choices(v, q, c).audc) for k, v in choices.items()}


# -- the gateway ------------------------------------------------------------------------------
@contextmanager
def running_gateway(settings: Any, router: Router, encoder: Any) -> Iterator[tuple[str, Any]]:
    from gateway.app import create_app

    app = create_app(settings, router=router, encoder=encoder)
    with serve_in_thread(app, join_timeout_s=120) as url:
        yield url, app


def gateway_settings(replay: Replay, base_url: str, db_url: str, *, epsilon: float,
                     candidates: int, budget_usd: float, admin_key: str) -> Any:
    """A gateway over the replay upstream's models, learning loop and exploration on."""
    from gateway.config import settings_from_dict

    model_list = [
        {"model_name": m,
         "litellm_params": {"model": f"openai/{m}", "api_base": base_url, "api_key": "sk-replay"},
         "model_info": {"input_cost_per_token": 0.0, "output_cost_per_token": replay.price[m],
                        "max_output_tokens": MAX_TOKENS, "timeout": 120}}
        for m in replay.models
    ]
    exploration = {"enabled": epsilon > 0, "epsilon": {"auto": epsilon}, "candidates": candidates,
                   "budget_usd": budget_usd, "period": "total", "max_tokens": MAX_TOKENS,
                   "judge": {"kind": "reference"},
                   # the simulation measures learning at the ε it is given; its recorded
                   # judge is free and the shadow spend is bounded by budget_usd alone
                   "max_share": None}
    return settings_from_dict({
        "model_list": model_list, "routes": {"auto": {"cost_weight": 0.5}},
        "database_url": db_url, "admin_key": admin_key,
        # beside its temporary database, not in the working directory (its replica slot)
        "reliability": {"spool_dir": db_url.removeprefix("sqlite:///") + "-spool"},
        "retraining": {"poll_s": 0.2, "min_observations": 0, "exploration": exploration},
    })


# -- the simulation ---------------------------------------------------------------------------
def run_simulation(
    dataset: str = "routerbench",
    data_dir: str | None = None,
    rounds: int = 4,
    feedback: str = "recorded",
    *,
    epsilon: float = 1.0,
    candidates: int = 10,
    budget_usd: float = 100.0,
    workers: int = 8,
    max_prompts: int | None = None,
    max_test_prompts: int | None = None,
    margin: float = 0.005,
    min_holdout: int = 20,
    seed: int = 0,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
) -> dict:
    """Run the closed loop; returns the JSON document ``tollgate simulate --json`` writes."""
    from gateway.learning.judges import ReferenceJudge
    from router_core.data import load_dataset
    from router_core.encoders.minilm import Encoder

    if feedback not in ("recorded", "judge"):
        raise ValueError("feedback must be 'recorded' or 'judge'")
    table = load_dataset(dataset, data_dir=data_dir)
    encoder = Encoder()
    p = _prompts(table, encoder, seed, max_prompts, max_test_prompts, log)
    replay = Replay(table.rows(np.sort(p.train_rows)))
    start_router, refs = _references(p, encoder, seed, log)
    admin_key = "tg-admin-" + uuid.uuid4().hex
    out_rounds: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp, replay_upstream(replay) as up_url:
        db_url = f"sqlite:///{Path(tmp) / 'simulate.db'}"
        _seed_secret(db_url, seed)
        settings = gateway_settings(replay, up_url, db_url, epsilon=epsilon,
                                    candidates=candidates, budget_usd=budget_usd,
                                    admin_key=admin_key)
        with running_gateway(settings, start_router, encoder) as (gw_url, app):
            ctx = app.state.ctx
            explorer = ctx.learning.explorer
            explorer.judge = ReferenceJudge(replay.grade)
            explorer.judge_served = feedback == "judge"
            explorer.rng = random.Random(seed)
            client = SimulatedClients(gw_url, tenant_key(gw_url, admin_key), feedback,
                                      _truth(p))
            spent_before = 0.0
            lam_rng = random.Random(seed)
            for rnd, chunk in enumerate(np.array_split(p.train_rows, rounds), start=1):
                t0 = time.perf_counter()
                lams = [lam_rng.choice(LAMBDAS) for _ in chunk]
                failures = client.send_round(table, chunk, lams, workers)
                # shadow calls and judging run behind the answers, and their rows are written
                # behind those: retraining reads the database, so wait for both
                while ctx.learning._tasks or ctx.log_writer.pending:
                    time.sleep(0.1)
                report = _retrain_and_swap(ctx, margin, min_holdout)
                row, spent_before = _score_round(ctx, p, rnd, spent_before)
                if failures:
                    log(f"round {rnd}: {len(failures)} feedback posts refused, e.g. {failures[0]}")
                out_rounds.append(row)
                _log_round(log, row, len(chunk), report, time.perf_counter() - t0)
    return {"rounds": out_rounds, **refs}


def _seed_secret(db_url: str, seed: int) -> None:
    """The new database's server secret, from the seed: prompt keys, and so retraining's
    held-out split (a hash of each key), are the same on every run of one seed (with a
    random secret the split, hence whether a round's candidate is promoted, varied by run)."""
    import hashlib

    from sqlalchemy import create_engine, insert

    from gateway.store import migrate
    from gateway.store.keys import SECRET_SETTING
    from gateway.store.models import settings as settings_table

    migrate.upgrade(db_url)
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(insert(settings_table).values(
                key=SECRET_SETTING,
                value=hashlib.sha256(f"tollgate-simulate-{seed}".encode()).hexdigest()))
    finally:
        engine.dispose()


@dataclass(frozen=True)
class _Prompts:
    """The benchmark rows a simulation runs on, with the embeddings of those it uses."""

    table: RoutingTable
    train_rows: np.ndarray  # train+val row indices in the order the rounds send them
    te: np.ndarray  # mask of the test rows the live router is scored on
    test: RoutingTable
    phi: np.ndarray  # Φ(x) of every used row (zeros elsewhere)
    phi_test: np.ndarray


def _prompts(table: RoutingTable, encoder: Any, seed: int, max_prompts: int | None,
             max_test_prompts: int | None, log: Callable[[str], None]) -> _Prompts:
    split = np.asarray(table.split)
    train_rows = np.flatnonzero(np.isin(split, ["train", "val"]))
    rng = np.random.default_rng(seed)
    train_rows = rng.permutation(train_rows)
    if max_prompts is not None:
        train_rows = train_rows[:max_prompts]
    te = split == "test"
    if max_test_prompts is not None:  # a seeded subset of the test split (quick runs, tests)
        keep = rng.permutation(np.flatnonzero(te))[:max_test_prompts]
        te = np.zeros(len(table), dtype=bool)
        te[keep] = True
    log("embedding the prompts (cached after the first run)")
    used = np.zeros(len(table), dtype=bool)
    used[train_rows] = True
    used |= te
    phi = np.zeros((len(table), encoder.dim), dtype=np.float32)
    phi[used] = encoder.encode([str(x) for x in table.prompts[used]])
    return _Prompts(table, train_rows, te, table.rows(te), phi, phi[te])


def _references(p: _Prompts, encoder: Any, seed: int, log: Callable[[str], None]
                ) -> tuple[Router, dict]:
    """The cold router the gateway starts from, and the AUDCs the live router is compared
    with: the cold start, the router trained offline on the same prompts, the baselines."""
    from router_core.evaluation.promotion import evaluate_on_holdout
    from router_core.training import TrainConfig, train_router

    mean_cost = np.nanmean(p.table.cost[p.train_rows], axis=0)
    start_router = cold_router(p.table.models, mean_cost, seed=seed, encoder=encoder.settings())
    start = evaluate_on_holdout(start_router, p.phi_test, p.test)
    log("training the offline router on the same prompts")
    train = np.sort(p.train_rows)
    offline = train_router(p.table.rows(train), TrainConfig(progress=False, seed=seed),
                           embeddings=p.phi[train]).router
    offline_score = evaluate_on_holdout(offline, p.phi_test, p.test)
    base = baselines(p.table, p.train_rows, p.te)
    log(
        f"start AUDC {start.audc:.4f}  offline AUDC {offline_score.audc:.4f}  baselines "
        + ", ".join(f"{k} {v:.4f}" for k, v in base.items())
    )
    return start_router, {"start_audc": start.audc, "offline_audc": offline_score.audc,
                          "baselines": base}


def _truth(p: _Prompts) -> dict[tuple[str, str], float]:
    """Recorded grade by (prompt, model), for the feedback a client posts."""
    t = p.table
    return {(str(t.prompts[i]), m): float(t.quality[i, j])
            for i in p.train_rows for j, m in enumerate(t.models) if np.isfinite(t.quality[i, j])}


def _retrain_and_swap(ctx: Any, margin: float, min_holdout: int) -> dict:
    """``retrain_once`` on what the round observed; waits until the gateway serves the
    active version. Returns the retrain report."""
    from gateway.learning import router_versions
    from gateway.learning.retrain import RetrainConfig, retrain_once

    engine = ctx.store.engine
    report = retrain_once(
        engine, ctx.pool.current.router,
        RetrainConfig(min_new=0, margin=margin, min_holdout=min_holdout), force=True,
    )
    active = router_versions.active_version(engine)["version"]
    deadline = time.monotonic() + 120
    while ctx.pool.current.version != active:
        if time.monotonic() > deadline:
            raise RuntimeError("the gateway did not hot-swap")
        time.sleep(0.1)
    return report


def _score_round(ctx: Any, p: _Prompts, rnd: int, spent_before: float) -> tuple[dict, float]:
    """The live router on the test rows, and what exploration spent this round."""
    from gateway.learning import exploration_ledger
    from router_core.evaluation.promotion import evaluate_on_holdout

    live = evaluate_on_holdout(ctx.pool.current.router, p.phi_test, p.test)
    spent = exploration_ledger.spending(ctx.store.engine)["spent_usd"]
    row = {"round": rnd, "audc": live.audc, "qnc": live.qnc,
           "exploration_usd": spent - spent_before}
    return row, spent


def _log_round(log: Callable[[str], None], row: dict, n_prompts: int, report: dict,
               seconds: float) -> None:
    qnc = "never" if row["qnc"] is None else f"{row['qnc']:.3f}"
    guard = f" ({report['reason']})" if report.get("reason") else ""
    if report.get("candidate") and report.get("current"):
        guard = (
            f" (held-out AUDC candidate {report['candidate']['audc']:.4f} vs live "
            f"{report['current']['audc']:.4f} on {report['n_holdout']} prompts)"
        )
    log(
        f"round {row['round']}: {n_prompts} prompts, retrain {report['status']}{guard}, "
        f"live AUDC {row['audc']:.4f}, QNC {qnc}, exploration "
        f"${row['exploration_usd']:.4f}, {seconds:.0f}s"
    )


def print_table(result: dict) -> None:
    click.echo(f"{'round':>5} {'AUDC':>8} {'QNC':>8} {'explore $':>10}")
    for r in result["rounds"]:
        qnc = "never" if r["qnc"] is None else f"{r['qnc']:.3f}"
        click.echo(f"{r['round']:>5} {r['audc']:8.4f} {qnc:>8} {r['exploration_usd']:10.4f}")
    click.echo(f"start (cold router)  AUDC {result['start_audc']:.4f}")
    click.echo(f"offline (same prompts) AUDC {result['offline_audc']:.4f}")
    for k, v in result["baselines"].items():
        click.echo(f"{k:<20} AUDC {v:.4f}")
