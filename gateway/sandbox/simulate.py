"""``tollgate simulate``: the learning loop closed end to end on RouterBench's recorded outcomes.

1. A replay upstream on 127.0.0.1 answers as the benchmark models: each model's recorded
   answer to the prompt, with usage priced so the gateway's cost is the recorded USD
   (output price p_m = mean recorded cost of m / 1000 per token, completion tokens =
   recorded cost / p_m; input is free). Routing therefore trades the models' real prices.
2. A real gateway (uvicorn, SQLite, the learning loop) starts from a *cold* router: the
   benchmark's models with random descriptors and a flat calibration (p̂ = 0.5 for all), so
   it routes to the cheapest model in reach.
3. Each round, a fresh slice of the training prompts goes through the gateway with the
   OpenAI SDK, each with a cost weight λ drawn from a grid (tenants differ). Shadow
   exploration (ε, candidates, its own budget) replays requests to other models in the
   background and a reference judge scores those answers with their recorded grades.
   ``--feedback recorded``: the client posts each served answer's recorded correctness to
   ``/v1/feedback``. ``--feedback judge``: no client feedback; the judge also scores the
   served answers.
4. After each round ``retrain_once`` runs (warm start, guarded promotion), the gateway
   hot-swaps to a promoted version, and the live router is scored on the test split
   (AUDC, QNC) beside the router trained offline on the same prompts and the baselines.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import click
import numpy as np

from gateway.sandbox.local_server import serve_in_thread
from router_core.data.table import RoutingTable
from router_core.router import Calibration, Expert, Head, Router

LAMBDAS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
TOKENS_PER_MEAN_QUERY = 1000  # p_m = mean cost / this: a typical answer is ~1000 "tokens"
MAX_TOKENS = 50_000  # covers the largest recorded cost / p_m ratio


# -- the replay upstream ----------------------------------------------------------------------
class Replay:
    """Recorded answers, grades and costs by (prompt text, model)."""

    def __init__(self, table: RoutingTable) -> None:
        self.models = table.models
        mean = np.nanmean(table.cost, axis=0)
        self.price = {m: float(mean[j]) / TOKENS_PER_MEAN_QUERY for j, m in enumerate(self.models)}
        self.cells: dict[tuple[str, str], tuple[str, float, float]] = {}
        for i, prompt in enumerate(map(str, table.prompts)):
            for j, m in enumerate(self.models):
                q, c = table.quality[i, j], table.cost[i, j]
                if np.isfinite(q) and np.isfinite(c):
                    resp = table.responses.get(m)
                    text = "" if resp is None or resp[i] is None else str(resp[i])
                    self.cells[(prompt, m)] = (text, float(q), float(c))

    def answer(self, prompt: str, model: str, max_tokens: int | None) -> dict:
        text, _, cost = self.cells[(prompt, model)]
        tokens = max(1, round(cost / self.price[model]))
        if max_tokens is not None:
            tokens = min(tokens, int(max_tokens))
        return {
            "id": "chatcmpl-" + uuid.uuid4().hex,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 0, "completion_tokens": tokens, "total_tokens": tokens},
        }

    def grade(self, prompt: str, model: str, answer: str) -> float | None:
        """The reference check: the recorded grade of exactly this recorded answer."""
        cell = self.cells.get((prompt, model))
        if cell is None or cell[0] != answer:
            return None
        return cell[1]


def _handler(replay: Replay) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            prompt = "\n\n".join(
                str(m.get("content", ""))
                for m in reversed(body.get("messages", []))
                if m.get("role") in ("system", "developer", "user")
            )
            try:
                out, status = replay.answer(prompt, body["model"], body.get("max_tokens")), 200
            except KeyError:
                msg = f"no recorded answer of {body.get('model')!r} to this prompt"
                out = {
                    "error": {
                        "message": msg,
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": "not_recorded",
                    }
                }
                status = 404
            data = json.dumps(out).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextmanager
def replay_upstream(replay: Replay) -> Iterator[str]:
    """Serve ``replay`` on 127.0.0.1; yields the base URL (…/v1)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(replay))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


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


def gateway_settings(
    replay: Replay,
    base_url: str,
    db_url: str,
    *,
    epsilon: float,
    candidates: int,
    budget_usd: float,
    admin_key: str,
) -> Any:
    from gateway.config import settings_from_dict

    model_list = [
        {
            "model_name": m,
            "litellm_params": {
                "model": f"openai/{m}",
                "api_base": base_url,
                "api_key": "sk-replay",
            },
            "model_info": {
                "input_cost_per_token": 0.0,
                "output_cost_per_token": replay.price[m],
                "max_output_tokens": MAX_TOKENS,
                "timeout": 120,
            },
        }
        for m in replay.models
    ]
    return settings_from_dict(
        {
            "model_list": model_list,
            "routes": {"auto": {"cost_weight": 0.5}},
            "database_url": db_url,
            "admin_key": admin_key,
            "retraining": {
                "poll_s": 0.2,
                "min_observations": 0,
                "exploration": {
                    "enabled": epsilon > 0,
                    "epsilon": {"auto": epsilon},
                    "candidates": candidates,
                    "budget_usd": budget_usd,
                    "period": "total",
                    "max_tokens": MAX_TOKENS,
                    "judge": {"kind": "reference"},
                },
            },
        }
    )


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
    import httpx
    import openai

    from gateway.learning import exploration_ledger, router_versions
    from gateway.learning.retrain import RetrainConfig, retrain_once
    from gateway.learning.shadow import ReferenceJudge
    from router_core.data import load_dataset
    from router_core.encoder import Encoder
    from router_core.promotion import evaluate_on_holdout
    from router_core.training import TrainConfig, train_router

    if feedback not in ("recorded", "judge"):
        raise ValueError("feedback must be 'recorded' or 'judge'")
    table = load_dataset(dataset, data_dir=data_dir)
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
    test = table.rows(te)
    encoder = Encoder()
    log("embedding the prompts (cached after the first run)")
    used = np.zeros(len(table), dtype=bool)
    used[train_rows] = True
    used |= te
    phi = np.zeros((len(table), encoder.dim), dtype=np.float32)
    phi[used] = encoder.encode([str(p) for p in table.prompts[used]])
    phi_test = phi[te]

    replay = Replay(table.rows(np.sort(train_rows)))
    mean_cost = np.nanmean(table.cost[train_rows], axis=0)
    start_router = cold_router(table.models, mean_cost, seed=seed, encoder=encoder.settings())
    start = evaluate_on_holdout(start_router, phi_test, test)
    log("training the offline router on the same prompts")
    offline_table = table.rows(np.sort(train_rows))
    offline = train_router(
        offline_table, TrainConfig(progress=False, seed=seed), embeddings=phi[np.sort(train_rows)]
    ).router
    offline_score = evaluate_on_holdout(offline, phi_test, test)
    base = baselines(table, train_rows, te)
    log(
        f"start AUDC {start.audc:.4f}  offline AUDC {offline_score.audc:.4f}  baselines "
        + ", ".join(f"{k} {v:.4f}" for k, v in base.items())
    )

    truth = {
        (str(table.prompts[i]), m): float(table.quality[i, j])
        for i in train_rows
        for j, m in enumerate(table.models)
        if np.isfinite(table.quality[i, j])
    }
    chunks = np.array_split(train_rows, rounds)
    admin_key = "tg-admin-" + uuid.uuid4().hex
    out_rounds: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp, replay_upstream(replay) as up_url:
        db_url = f"sqlite:///{Path(tmp) / 'simulate.db'}"
        settings = gateway_settings(
            replay,
            up_url,
            db_url,
            epsilon=epsilon,
            candidates=candidates,
            budget_usd=budget_usd,
            admin_key=admin_key,
        )
        with running_gateway(settings, start_router, encoder) as (gw_url, app):
            ctx = app.state.ctx
            learning = ctx.learning
            learning.explorer.judge = ReferenceJudge(replay.grade)
            learning.explorer.judge_served = feedback == "judge"
            learning.explorer.rng = random.Random(seed)
            r = httpx.post(
                gw_url + "/admin/tenants",
                timeout=60,
                headers={"authorization": f"Bearer {admin_key}"},
                json={"name": "simulator", "budget_usd": None, "period": "total"},
            )
            r.raise_for_status()
            key = r.json()["api_key"]
            client = openai.OpenAI(base_url=gw_url + "/v1", api_key=key, max_retries=2, timeout=300)
            engine = ctx.store.engine
            spent_before = 0.0
            lam_rng = random.Random(seed)
            failures: list[str] = []  # feedback posts the gateway refused, per round
            for rnd, chunk in enumerate(chunks, start=1):
                t0 = time.perf_counter()
                lams = [lam_rng.choice(LAMBDAS) for _ in chunk]
                failures.clear()

                def one(args: tuple[int, float]) -> None:
                    i, lam = args
                    prompt = str(table.prompts[i])
                    raw = client.chat.completions.with_raw_response.create(
                        model="auto",
                        messages=[{"role": "user", "content": prompt}],
                        extra_body={"tollgate": {"cost_weight": lam}},
                    )
                    served = raw.parse().model
                    if feedback == "recorded":
                        rid = raw.headers["x-tollgate-request-id"]
                        fb = httpx.post(
                            gw_url + "/v1/feedback",
                            timeout=60,
                            headers={"authorization": f"Bearer {key}"},
                            json={"request_id": rid, "correct": truth[(prompt, served)] >= 0.5},
                        )
                        if fb.status_code != 200:  # counted and reported, not fatal
                            failures.append(f"{fb.status_code} {fb.text[:200]}")

                with ThreadPoolExecutor(workers) as pool:
                    list(pool.map(one, zip(chunk.tolist(), lams)))
                while learning._tasks:  # shadow calls and judging run behind the answers
                    time.sleep(0.1)
                report = retrain_once(
                    engine, ctx.router.current, RetrainConfig(min_new=0, margin=margin), force=True
                )
                active = router_versions.active_version(engine)["version"]
                deadline = time.monotonic() + 120
                while ctx.router.current.version != active:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the gateway did not hot-swap")
                    time.sleep(0.1)
                live = evaluate_on_holdout(ctx.router.current, phi_test, test)
                spent = exploration_ledger.spending(engine)["spent_usd"]
                row = {
                    "round": rnd,
                    "audc": live.audc,
                    "qnc": live.qnc,
                    "exploration_usd": spent - spent_before,
                }
                spent_before = spent
                if failures:
                    log(f"round {rnd}: {len(failures)} feedback posts refused, e.g. {failures[0]}")
                out_rounds.append(row)
                qnc = "never" if live.qnc is None else f"{live.qnc:.3f}"
                guard = ""
                if report.get("candidate") and report.get("current"):
                    guard = (
                        f" (held-out AUDC candidate {report['candidate']['audc']:.4f} vs live "
                        f"{report['current']['audc']:.4f} on {report['n_holdout']} prompts)"
                    )
                log(
                    f"round {rnd}: {len(chunk)} prompts, retrain {report['status']}{guard}, "
                    f"live AUDC {live.audc:.4f}, QNC {qnc}, exploration "
                    f"${row['exploration_usd']:.4f}, {time.perf_counter() - t0:.0f}s"
                )
    return {
        "rounds": out_rounds,
        "start_audc": start.audc,
        "offline_audc": offline_score.audc,
        "baselines": base,
    }


def print_table(result: dict) -> None:
    click.echo(f"{'round':>5} {'AUDC':>8} {'QNC':>8} {'explore $':>10}")
    for r in result["rounds"]:
        qnc = "never" if r["qnc"] is None else f"{r['qnc']:.3f}"
        click.echo(f"{r['round']:>5} {r['audc']:8.4f} {qnc:>8} {r['exploration_usd']:10.4f}")
    click.echo(f"start (cold router)  AUDC {result['start_audc']:.4f}")
    click.echo(f"offline (same prompts) AUDC {result['offline_audc']:.4f}")
    for k, v in result["baselines"].items():
        click.echo(f"{k:<20} AUDC {v:.4f}")


@click.command("simulate")
@click.option("--dataset", default="routerbench", show_default=True)
@click.option("--data-dir", default=None, help="Benchmark data folder (default: shared data).")
@click.option("--rounds", type=int, default=4, show_default=True)
@click.option(
    "--feedback", type=click.Choice(["recorded", "judge"]), default="recorded", show_default=True
)
@click.option("--json", "json_path", default=None, help="Write the result as JSON here.")
@click.option(
    "--epsilon",
    type=float,
    default=1.0,
    show_default=True,
    help="Exploration probability per request.",
)
@click.option(
    "--candidates",
    type=int,
    default=10,
    show_default=True,
    help="Other models asked per explored request.",
)
@click.option("--exploration-budget-usd", type=float, default=100.0, show_default=True)
@click.option("--max-prompts", type=int, default=None, help="Use only this many prompts.")
@click.option(
    "--max-test-prompts",
    type=int,
    default=None,
    help="Score on a seeded subset of the test split of this size.",
)
@click.option("--workers", type=int, default=8, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
def simulate_command(
    dataset: str,
    data_dir: str | None,
    rounds: int,
    feedback: str,
    json_path: str | None,
    epsilon: float,
    candidates: int,
    exploration_budget_usd: float,
    max_prompts: int | None,
    max_test_prompts: int | None,
    workers: int,
    seed: int,
) -> None:
    """Close the learning loop on recorded benchmark outcomes and print it round by round."""
    result = run_simulation(
        dataset,
        data_dir,
        rounds,
        feedback,
        epsilon=epsilon,
        candidates=candidates,
        budget_usd=exploration_budget_usd,
        workers=workers,
        max_prompts=max_prompts,
        max_test_prompts=max_test_prompts,
        seed=seed,
    )
    print_table(result)
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=2))


__all__ = ["run_simulation", "simulate_command"]
