"""A wrong prior caught by the live learning loop (issue 34, item 5).

`tollgate serve` on RouterBench's 11 models; the local replay upstream
(gateway/sandbox/replay.py) answers each with the answer RouterBench recorded for the prompt,
priced so the gateway charges the recorded USD. A judge backend on the same upstream
(gateway/sandbox/recorded_judge.py) gives verdicts that follow RouterBench's grades, agreeing
with them ``--agreement`` (0.8) of the time, seeded. Shadow exploration, the paired judge
beside the reference and prior refinement run on their normal code paths; the config only
shortens their schedule (``retraining.refine_priors_s``, ``poll_s``) and sets exploration on
(``retraining.exploration``).

The wrong prior: one cheap backend (``LoopSetup.wrong``, mistral-7b) is left out of the
served router artifact, so it joins on a cold-start prior as any unknown backend does, and the
artifact carries a claim for it (``promise_beliefs``, the form a published belief takes in a
router version): the strongest model's own readout and pseudo-count, i.e. "it matches
gpt-4". The config has no key that sets a prior's level, and the capability table places no
published figure near gpt-4-1106-preview's level on this router, hence the artifact. The
loop refines cold-start backends from their judged outcomes, always starting from the
backend's own prior (here its price prior), and publishes the result as a new router
version, which the gateway hot-swaps: the claim is served until the first refinement.

Requests go to ``auto-cheap`` (test prompts, shuffled, repeated when more are asked for than
the split has). Per window of requests: the wrong backend's share, the route's realized drop
against its reference from the recorded grades, its saving, and the wrong backend's mean p̂
(from the explanations) beside its recorded mean grade on the same prompts (loop_windows.py).
"""

from __future__ import annotations

import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.routing.live_gateway import (
    admin_key,
    candidate_p,
    explanation,
    tenant_key,
    tollgate_serve,
)
from bench.routing.loop_windows import NOISE_SE, Served, Window, caught_after, windows

ROUTE = "auto-cheap"
JUDGE = "judge"
MAX_TOKENS = 50_000  # covers the largest recorded cost / price ratio (sandbox/simulate.py)


@dataclass(frozen=True)
class LoopSetup:
    requests: int = 3000
    window: int = 250
    wrong: str = "mistralai/mistral-7b-chat"
    agreement: float = 0.8
    epsilon: float = 0.25
    candidates: int = 2
    refine_s: float = 10.0
    workers: int = 4
    seed: int = 0


def claimed_router(out: Path, wrong: str, strongest: str, held: tuple[str, ...] = ()) -> Path:
    """The RouterBench artifact without ``wrong``'s expert, claiming for it the strongest's
    readout and pseudo-count as its published belief (module docstring); the experts of
    ``held`` are left out too, so they join on their cold-start priors."""
    from gateway.pool.promise import BELIEFS_KEY, belief_record, reference_queries
    from router_core.artifact import ROUTERBENCH_ROUTER_DIR, load_probes, load_router, save_router
    from router_core.promise import LogitBelief, TrainedBelief, router_weights

    router = load_router(ROUTERBENCH_ROUTER_DIR)
    params = dict((router.config or {}).get("promise") or {})
    n = float(dict(params.get("trained_n") or {}).get(strongest, 20.0))
    W, b = router_weights(router, [strongest])
    Q = reference_queries(router, None)
    level = float(TrainedBelief(W[0], float(b[0]), n).estimate(Q)[0].mean())
    claim = LogitBelief.prior(W[0], float(b[0]), level, n, f"claim: matches {strongest}",
                              None, Q)
    claim = replace(claim, n_cap=n, level=level)
    served = router.without_expert(wrong, version=f"{router.version}+claim-{wrong}")
    for name in held:
        served = served.without_expert(name)
    if held:
        served = replace(served, version=f"{served.version}+priors-{len(held)}")
    served = replace(served, config={**dict(served.config or {}),
                                     BELIEFS_KEY: {wrong: belief_record(claim)}})
    return save_router(served, out, probes=load_probes(ROUTERBENCH_ROUTER_DIR))


def loop_config(replay, upstream_url: str, tmp: Path, admin: str, router_path: Path,
                s: LoopSetup) -> dict:
    """RouterBench's pool on the replay upstream, the judge, the demo's routes, the loop on."""
    from gateway.config import load_settings
    from gateway.sandbox.demo import DEMO_CONFIG_PATH

    params = {"api_base": upstream_url, "api_key": "sk-replay"}
    models = [{"model_name": m, "litellm_params": {"model": f"openai/{m}", **params},
               "model_info": {"input_cost_per_token": 0.0,
                              "output_cost_per_token": replay.price[m],
                              "max_output_tokens": MAX_TOKENS, "timeout": 120}}
              for m in replay.models]
    models.append({"model_name": JUDGE, "litellm_params": {"model": f"openai/{JUDGE}", **params},
                   "model_info": {"input_cost_per_token": 1e-9, "output_cost_per_token": 1e-9,
                                  "timeout": 120}})
    routes = {k: v.model_dump(exclude_none=True)
              for k, v in load_settings(DEMO_CONFIG_PATH).routes.items()}
    exploration = {"enabled": True, "epsilon": {ROUTE: s.epsilon}, "candidates": s.candidates,
                   "budget_usd": 1000.0, "period": "total", "max_tokens": MAX_TOKENS,
                   "judge": {"kind": "llm", "model": JUDGE},
                   # its figures stay those of its own ε and budget, as before exploration
                   # was bounded by a share of spend by default (learning_loop.py measures
                   # the defaults)
                   "max_share": None}
    return {"model_list": models, "routes": routes, "database_url":
            f"sqlite:///{tmp / 'loop.db'}", "admin_key": admin, "router_path": str(router_path),
            "reliability": {"spool_dir": str(tmp / "spool")},
            "retraining": {"min_observations": 10**9, "poll_s": 1.0,
                           "refine_priors_s": s.refine_s, "exploration": exploration}}


def routerbench_rows() -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """RouterBench, its quality and cost matrices and the train / test rows whose every cell (quality
    and cost) is known: what both replayed loops (this one, learning_loop.py) draw from."""
    from router_core.data import load_dataset

    table = load_dataset("routerbench")
    split = np.asarray(table.split)
    q_all = np.asarray(table.quality, dtype=float)
    c_all = np.asarray(table.cost, dtype=float)
    ok = np.isfinite(q_all).all(axis=1) & np.isfinite(c_all).all(axis=1)
    return (table, q_all, c_all, np.flatnonzero((split == "train") & ok),
            np.flatnonzero((split == "test") & ok))


def request_order(test: np.ndarray, requests: int, seed: int) -> np.ndarray:
    """``requests`` test rows: seeded permutations of the test set, one after another."""
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(test) for _ in range(-(-requests // len(test)))])
    return order[:requests]


def run_loop(s: LoopSetup) -> tuple[list[Window], int | None, dict]:
    """Run the loop; (windows, requests after which the prior was caught, facts)."""
    import openai

    from gateway.sandbox.recorded_judge import RecordedJudge
    from gateway.sandbox.replay import Replay, replay_upstream

    table, q_all, c_all, train, test = routerbench_rows()
    models = [str(m) for m in table.models]
    strongest = models[int(np.argmax(q_all[train].mean(axis=0)))]
    col = {m: j for j, m in enumerate(models)}
    order = request_order(test, s.requests, s.seed)
    replay = Replay(table.rows(test))
    judge = RecordedJudge(replay.judge_cells(), s.agreement, s.seed, JUDGE)
    admin = admin_key()
    facts = {"strongest": strongest, "wrong": s.wrong,
             "wrong_true_mean": float(q_all[test, col[s.wrong]].mean())}
    with tempfile.TemporaryDirectory(prefix="tollgate-loop-") as tmp_s, \
            replay_upstream(replay, judge) as up:
        tmp = Path(tmp_s)
        router_path = claimed_router(tmp / "router", s.wrong, strongest)
        config = loop_config(replay, up, tmp, admin, router_path, s)
        with tollgate_serve(config, tmp, "tollgate-loop") as server:
            key = tenant_key(server.url, admin)
            client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=2,
                                   timeout=300)
            http = httpx.Client(base_url=server.url, timeout=60,
                                headers={"authorization": f"Bearer {key}"})

            def one(i: int) -> tuple[Served, str | None]:
                prompt = str(table.prompts[i])
                raw = client.chat.completions.with_raw_response.create(
                    model=ROUTE, messages=[{"role": "user", "content": prompt}])
                doc = explanation(http, raw.headers["x-tollgate-request-id"])
                served = doc["answered_by"]
                return Served(served, float(q_all[i, col[served]]),
                              float(q_all[i, col[strongest]]),
                              float(raw.headers["x-tollgate-cost-usd"]),
                              float(c_all[i, col[strongest]]),
                              candidate_p(doc, s.wrong), float(q_all[i, col[s.wrong]])), \
                    _known(doc, s.wrong)

            with ThreadPoolExecutor(s.workers) as pool, http:
                results = list(pool.map(one, order.tolist()))
            served = [r for r, _ in results]
            known = [k for _, k in results if k]
            facts["wrong_known"] = (known[0], known[-1]) if known else ("-", "-")
            facts["judge_unknown"] = judge.unknown
    ws = windows(served, s.window, s.wrong)
    facts["max_drop"] = _max_drop()
    return ws, caught_after(ws, facts["max_drop"], 0.05), facts


def _known(doc: dict, backend: str) -> str | None:
    """How the explanation says ``backend`` is known (its candidate's promise record)."""
    for c in (doc.get("decision") or {}).get("candidates") or []:
        if c.get("backend") == backend:
            return (c.get("promise") or {}).get("known")
    return None


def _max_drop() -> float:
    from gateway.config import load_settings
    from gateway.sandbox.demo import DEMO_CONFIG_PATH

    return float(load_settings(DEMO_CONFIG_PATH).routes[ROUTE].max_drop)


def print_loop(ws: list[Window], caught: int | None, facts: dict, s: LoopSetup) -> None:
    print(f"\nwrong-prior loop: {facts['wrong']} claimed to match {facts['strongest']} "
          f"(its true mean grade on the test prompts {facts['wrong_true_mean']:.3f}); "
          f"{ROUTE}, judge agreeing {s.agreement:.0%}, ε={s.epsilon}, refine every "
          f"{s.refine_s:g}s")
    print(f"{'requests':>8} {'share':>6} {'drop':>7} {'se':>6} {'saving':>7} {'p̂ wrong':>8} "
          f"{'true':>6} {'listed':>6}")
    for w in ws:
        est = "-" if w.estimate is None else f"{w.estimate:.3f}"
        tru = "-" if w.truth is None else f"{w.truth:.3f}"
        print(f"{w.end:>8} {w.share:>6.3f} {w.drop:>+7.4f} {w.se:>6.4f} {w.saving:>7.3f} {est:>8} "
              f"{tru:>6} {w.n_estimate:>6}")
    first, last = facts.get("wrong_known", ("-", "-"))
    print(f"{facts['wrong']} known first as: {first}; last as: {last}")
    print(f"a window keeps the promise when drop ≤ {facts['max_drop']:g} + {NOISE_SE:g}·se "
          "(loop_windows.py)")
    print(f"wrong prior corrected after: {caught if caught is not None else 'never'} requests; "
          f"judge could not find {facts.get('judge_unknown', 0)} answers")
