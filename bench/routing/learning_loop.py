"""`auto` and `auto-balanced` learning from the default exploration, live (issue 46, item 5).

`tollgate serve` on RouterBench's 11 models, each answered by the local replay upstream with
the answer RouterBench recorded (gateway/sandbox/replay.py), priced so the gateway charges the
recorded USD. As on the packaged config, the strongest models join on priors: the served
artifact leaves out the ``held`` experts (by default the two best by train mean grade,
gpt-4-1106-preview and Yi-34B-Chat), so each joins as any unknown backend does (a published
figure where the capability table has one, else its price), and it carries the wrong-prior
claim of wrong_prior_loop.py (mistral-7b "matches" the strongest). The config has no
``exploration:`` section: ε, the share bound (5% of each route's spend), the judge (the
pool's strongest priced backend) and the per-answer cap are the defaults, and the judge's
verdicts follow RouterBench's grades, agreeing with them ``--agreement`` (0.8) of the time
(gateway/sandbox/recorded_judge.py answers every rubric, whichever backend it is sent to).
Only the schedule is shortened (``poll_s``, ``refine_priors_s``).

Requests alternate between `auto` and `auto-balanced` (test prompts, shuffled per seed). Per
window of ``--window`` (500) requests, per route: the realized drop against the reference's
recorded grade on the same prompts, its standard error, the saving (1 − charged / the
reference's recorded cost), and the exploration spend in the window (from /metrics:
shadow answers, the reference's answers and the judge's calls). A window keeps its promise
when drop ≤ max_drop + 2·se (loop_windows.py). The wrong prior counts as caught at the end of
the first window where mistral-7b's mean p̂ is within 0.05 of its recorded grade and every
window from there on keeps both routes' promises.

``--packaged``: the packaged config.yaml instead, as shipped (its backends, prices, routes,
router; ``local_config`` of live_gateway.py, only the database and the schedule replaced), no
wrong prior, its nine backends answering RouterBench's recorded answers: the dearest (at
the typical request's tokens) as RouterBench's strongest by train grade, and so on down
(``packaged_aliases``; price standing in for strength is the one assumption). A request's
reference cost there is the reference's recorded completion tokens at its own price, plus
the prompt tokens the gateway charged.

    python -m bench.routing.learning_loop [--requests 5000] [--window 500] [--seed 0 |
        --seeds 0,1,2,3,4] [--packaged]

Last line: ``learn_drop_excess_max=… auto_learned_saving=… balanced_learned_saving=…
exploration_share=… caught_after_median=… caught_after_worst=…`` (over the seeds: the largest
window's drop − its promise − 2·se; the savings of the last window, mean over seeds; the
largest exploration spend ÷ the routes' spend; the median and worst catch, ``never`` when a
seed never caught it). With ``--packaged``: ``packaged_auto_learned_saving=…
packaged_balanced_learned_saving=… packaged_drop_excess_max=… packaged_exploration_share=…``.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROUTES = ("auto", "auto-balanced")
NAN = float("nan")


@dataclass(frozen=True)
class LearnSetup:
    requests: int = 5000
    window: int = 500
    wrong: str = "mistralai/mistral-7b-chat"
    held: int = 2  # the strongest models by train grade, joining on priors
    agreement: float = 0.8
    refine_s: float = 10.0
    workers: int = 4
    seed: int = 0
    packaged: bool = False  # the packaged config.yaml instead (module docstring)


@dataclass
class RouteWindow:
    route: str
    n: int
    drop: float
    se: float
    saving: float
    charged: float
    explored_usd: float
    max_drop: float

    @property
    def excess(self) -> float:
        """drop − promise − 2·se: above 0, the window broke its promise beyond noise."""
        from bench.routing.loop_windows import NOISE_SE

        return self.drop - self.max_drop - NOISE_SE * self.se


@dataclass
class LearnRun:
    seed: int
    windows: list[dict[str, RouteWindow]] = field(default_factory=list)
    watched_error: list[float | None] = field(default_factory=list)
    caught: int | None = None
    explored_usd: float = 0.0
    charged_usd: float = 0.0
    facts: dict = field(default_factory=dict)


def _explored(metrics: str) -> dict[str, float]:
    """route -> exploration spent so far, from a /metrics text."""
    out = {}
    for m in re.finditer(r'^tollgate_exploration_spent_usd\{route="([^"]+)"\} (\S+)$', metrics,
                         re.MULTILINE):
        out[m.group(1)] = float(m.group(2))
    return out


def run(s: LearnSetup) -> LearnRun:
    """One seed of the loop (module docstring)."""
    import httpx
    import openai

    from bench.routing.live_gateway import (
        admin_key,
        candidate_p,
        explanation,
        local_config,
        reference_of,
        tenant_key,
        tollgate_serve,
    )
    from bench.routing.wrong_prior_loop import (
        MAX_TOKENS,
        claimed_router,
        request_order,
        routerbench_rows,
    )
    from gateway.config import DEFAULT_CONFIG_PATH, load_settings
    from gateway.pricing import resolve_prices
    from gateway.sandbox.demo import DEMO_CONFIG_PATH
    from gateway.sandbox.recorded_judge import RecordedJudge
    from gateway.sandbox.replay import Replay, replay_upstream

    table, q_all, c_all, train, test = routerbench_rows()
    models = [str(m) for m in table.models]
    col = {m: j for j, m in enumerate(models)}
    by_grade = [models[j] for j in np.argsort(-q_all[train].mean(axis=0))]
    strongest, held = by_grade[0], tuple(by_grade[: s.held])
    order = request_order(test, s.requests, s.seed)
    alias = packaged_aliases(by_grade) if s.packaged else {}
    replay = Replay(table.rows(test), alias)
    judge = RecordedJudge(replay.judge_cells(), s.agreement, s.seed, "judge")
    demo = load_settings(DEFAULT_CONFIG_PATH if s.packaged else DEMO_CONFIG_PATH)
    max_drop = {r: float(demo.routes[r].max_drop) for r in ROUTES}
    admin = admin_key()
    if s.packaged:
        held, watched = (), None
        out = LearnRun(s.seed, facts={"strongest": strongest, "held": held, "wrong": None,
                                      "alias": alias})
    else:
        watched = s.wrong
        out = LearnRun(s.seed, facts={"strongest": strongest, "held": held, "wrong": s.wrong})
    with tempfile.TemporaryDirectory(prefix="tollgate-learn-") as tmp_s, \
            replay_upstream(replay, judge, any_model=True) as up:
        tmp = Path(tmp_s)
        schedule = {"min_observations": 10**9, "poll_s": 1.0, "refine_priors_s": s.refine_s}
        if s.packaged:  # its backends, prices, routes and router as shipped, on the replay
            config = {**local_config(DEFAULT_CONFIG_PATH, up, tmp, admin),
                      "retraining": schedule}
            config["database_url"] = f"sqlite:///{tmp / 'learn.db'}"
            price = {b: (float(p.input_per_token), float(p.output_per_token))
                     for b, p in resolve_prices(demo, strict=False).items()}
        else:
            router_path = claimed_router(tmp / "router", s.wrong, strongest, held)
            params = {"api_base": up, "api_key": "sk-replay"}
            config = {
                "model_list": [{"model_name": m, "litellm_params": {"model": f"openai/{m}",
                                                                    **params},
                                "model_info": {"input_cost_per_token": 0.0,
                                               "output_cost_per_token": replay.price[m],
                                               "max_output_tokens": MAX_TOKENS,
                                               "timeout": 120}}
                               for m in replay.models],
                "routes": {k: v.model_dump(exclude_none=True) for k, v in demo.routes.items()},
                "database_url": f"sqlite:///{tmp / 'learn.db'}", "admin_key": admin,
                "router_path": str(router_path),
                "reliability": {"spool_dir": str(tmp / "spool")},
                # exploration as shipped: no section; only the schedule is shortened
                "retraining": schedule,
            }
            price = {m: (0.0, replay.price[m]) for m in replay.models}

        def recorded(i: int, backend: str) -> tuple[float, str]:
            """(recorded grade, benchmark model) of ``backend``'s answer to row ``i``."""
            m = alias.get(backend, backend)
            return float(q_all[i, col[m]]), m

        def usd(i: int, backend: str, prompt_tokens: int) -> float:
            """What ``backend``'s recorded answer to row ``i`` is charged at its price (the
            replay's completion tokens, the prompt tokens the gateway charged)."""
            m = alias.get(backend, backend)
            if not s.packaged:
                return float(c_all[i, col[m]])
            tokens = max(1, round(float(c_all[i, col[m]]) / replay.price[m]))
            p_in, p_out = price[backend]
            return prompt_tokens * p_in + tokens * p_out

        with tollgate_serve(config, tmp, "tollgate-learn") as server:
            key = tenant_key(server.url, admin)
            client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=2,
                                   timeout=300)
            http = httpx.Client(base_url=server.url, timeout=60,
                                headers={"authorization": f"Bearer {key}"})
            ops = httpx.Client(base_url=server.url, timeout=60,
                               headers={"authorization": f"Bearer {admin}"})
            shown = {m["id"]: m.get("tollgate", {}) for m in http.get("/v1/models").json()["data"]}
            out.facts["judge"] = shown["auto"]["learning"]["judge"]
            out.facts["known_first"] = {h: shown[h].get("quality_known") for h in held}

            def one(k: int) -> tuple[str, float, float, float, float, float | None, float]:
                i = int(order[k])
                route = ROUTES[k % len(ROUTES)]
                raw = client.chat.completions.with_raw_response.create(
                    model=route, messages=[{"role": "user", "content": str(table.prompts[i])}])
                expl = explanation(http, raw.headers["x-tollgate-request-id"])
                served = expl["answered_by"]
                ref = reference_of(expl) or strongest
                n_in = int((expl.get("usage") or {}).get("prompt_tokens") or 0)  # as charged
                return (route, recorded(i, served)[0], recorded(i, ref)[0],
                        float(raw.headers["x-tollgate-cost-usd"]), usd(i, ref, n_in),
                        candidate_p(expl, watched) if watched else None,
                        float(q_all[i, col[watched]]) if watched else NAN)

            before: dict[str, float] = {}
            with ThreadPoolExecutor(s.workers) as pool:
                for start in range(0, s.requests, s.window):
                    rows = list(pool.map(one, range(start, min(start + s.window, s.requests))))
                    now = _explored(ops.get("/metrics").text)
                    out.windows.append({r: _window(r, [x for x in rows if x[0] == r],
                                                   now.get(r, 0.0) - before.get(r, 0.0),
                                                   max_drop[r]) for r in ROUTES})
                    before = now
                    listed = [(x[5], x[6]) for x in rows if x[5] is not None]
                    out.watched_error.append(abs(np.mean([p for p, _ in listed])
                                                 - np.mean([q for _, q in listed]))
                                             if listed else None)
                shown = {m["id"]: m.get("tollgate", {})
                         for m in http.get("/v1/models").json()["data"]}
                out.facts["known_last"] = {h: shown[h].get("quality_known") for h in held}
            http.close()
            ops.close()
            out.explored_usd = sum(before.values())
        out.facts["judged"] = judged_by_source(config["database_url"])
        if watched:  # how far its level can be pinned: p̂ error's yardstick after the catch
            n = sum(judged_by_source(config["database_url"], watched).values())
            p = float(q_all[test, col[watched]].mean())
            out.facts["watched_se"] = (n, level_se(p, s.agreement, n))
    out.charged_usd = sum(w.charged for ws in out.windows for w in ws.values())
    out.caught = _caught(out, s.window)
    return out


def judged_by_source(database_url: str, model: str | None = None) -> dict[str, int]:
    """The loop's judged answers by source (gateway/learning/shadow.py): ``paired`` (one side
    of a pair with the reference: two rows a pair), ``judge`` (a served answer judged alone),
    ``shadow`` (another backend's answer judged alone); ``model``: that backend's only."""
    import sqlalchemy as sa

    from gateway.learning import tables as ldb

    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as conn:
            obs = ldb.observations_t.c
            query = sa.select(obs.source, sa.func.count()).group_by(obs.source)
            if model is not None:
                query = query.where(obs.model == model)
            rows = conn.execute(query).all()
    finally:
        engine.dispose()
    return {str(k): int(n) for k, n in rows}


def level_se(p: float, agreement: float, n: int) -> float:
    """The standard error of a backend's level (mean p̂) read from ``n`` verdicts of a judge
    right with probability a: a verdict is good with probability P = (1 − a) + (2a − 1)·p,
    so p̂ = (P̂ − (1 − a)) / (2a − 1) and se = √(P(1 − P) / n) / (2a − 1)."""
    big_p = (1.0 - agreement) + (2.0 * agreement - 1.0) * p
    scale = abs(2.0 * agreement - 1.0) * math.sqrt(max(n, 1))
    return math.sqrt(big_p * (1.0 - big_p)) / scale if scale > 0 else math.inf


def packaged_aliases(by_grade: list[str]) -> dict[str, str]:
    """The packaged config's backends, dearest first (at the typical request's tokens), each
    answering as RouterBench's model of the same rank by train grade, strongest first: price
    order standing in for strength, the one assumption of ``--packaged``."""
    from gateway.config import DEFAULT_CONFIG_PATH, load_settings
    from gateway.pool.priors import TYPICAL_TOKENS
    from gateway.pricing import resolve_prices

    prices = resolve_prices(load_settings(DEFAULT_CONFIG_PATH), strict=False)
    dear = sorted(prices, key=lambda b: -prices[b].cost(*TYPICAL_TOKENS))
    return dict(zip(dear, by_grade, strict=False))


def _window(route: str, rows: list, explored: float, max_drop: float) -> RouteWindow:
    d = np.array([x[2] - x[1] for x in rows]) if rows else np.zeros(0)
    charged, ref = sum(x[3] for x in rows), sum(x[4] for x in rows)
    return RouteWindow(route, len(rows), float(d.mean()) if len(d) else NAN,
                       float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else 0.0,
                       1.0 - charged / ref if ref > 0 else NAN, charged, explored, max_drop)


def _caught(r: LearnRun, window: int, tolerance: float = 0.05) -> int | None:
    """Requests after which the wrong prior was corrected (module docstring), or None."""
    for i, err in enumerate(r.watched_error):
        if err is not None and err <= tolerance and all(
                w.excess <= 0 for ws in r.windows[i:] for w in ws.values()):
            return min((i + 1) * window, sum(w.n for ws in r.windows for w in ws.values()))
    return None


def print_run(r: LearnRun, s: LearnSetup) -> None:
    f = r.facts
    if s.packaged:
        print(f"\nseed {r.seed}: the packaged config.yaml, its backends answering as "
              f"{f['alias']}; judge {f['judge']} (default) agreeing {s.agreement:.0%}")
    else:
        print(f"\nseed {r.seed}: {', '.join(f['held'])} join on priors (first known as "
              f"{f['known_first']}, last {f.get('known_last')}); {f['wrong']} claimed to "
              f"match {f['strongest']}; judge {f['judge']} (default) agreeing "
              f"{s.agreement:.0%}")
    print(f"{'requests':>8} {'route':<14} {'n':>4} {'drop':>8} {'se':>6} {'excess':>8} "
          f"{'saving':>7} {'explored $':>11} {'share':>6} {'p̂ err':>6}")
    for i, ws in enumerate(r.windows):
        err = r.watched_error[i]
        for w in ws.values():
            share = w.explored_usd / w.charged if w.charged > 0 else NAN
            print(f"{(i + 1) * s.window:>8} {w.route:<14} {w.n:>4} {w.drop:>+8.4f} "
                  f"{w.se:>6.4f} {w.excess:>+8.4f} {w.saving:>7.3f} {w.explored_usd:>11.5f} "
                  f"{share:>6.3f} {'-' if err is None else f'{err:.3f}':>6}")
    share = r.explored_usd / r.charged_usd if r.charged_usd > 0 else NAN
    caught = ("" if s.packaged else  # no wrong prior there: nothing to catch
              f"; wrong prior caught after: {r.caught if r.caught is not None else 'never'} "
              "requests")
    judged = f.get("judged", {})
    print(f"exploration {r.explored_usd:.4f} USD of the routes' {r.charged_usd:.4f} USD "
          f"({share:.3%}){caught}; judged: {judged.get('paired', 0) // 2} pairs, "
          f"{judged.get('judge', 0)} served answers alone, {judged.get('shadow', 0)} shadow "
          "answers alone")
    if "watched_se" in f:
        n, se = f["watched_se"]
        print(f"{f['wrong']} judged {n} times: a level read from them through the judge is "
              f"{se:.3f} off (1 se), the size of its p̂ error after the catch")


def summary(runs: list[LearnRun]) -> dict[str, str]:
    """The last line's fields over the seeds (module docstring)."""
    excess = max(w.excess for r in runs for ws in r.windows for w in ws.values())
    last = {route: float(np.nanmean([r.windows[-1][route].saving for r in runs]))
            for route in ROUTES}
    share = max(r.explored_usd / r.charged_usd if r.charged_usd > 0 else NAN for r in runs)
    caught = [math.inf if r.caught is None else float(r.caught) for r in runs]
    median, worst = float(np.median(caught)), max(caught)
    return {"learn_drop_excess_max": f"{excess:.4f}",
            "auto_learned_saving": f"{last['auto']:.4f}",
            "balanced_learned_saving": f"{last['auto-balanced']:.4f}",
            "exploration_share": f"{share:.4f}",
            "caught_after_median": "never" if math.isinf(median) else f"{median:g}",
            "caught_after_worst": "never" if math.isinf(worst) else f"{worst:g}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--window", type=int, default=500)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--seeds", type=str, default=None, help="comma-separated, e.g. 0,1,2,3,4")
    ap.add_argument("--agreement", type=float, default=0.8)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--packaged", action="store_true",
                    help="the packaged config.yaml, its backends on recorded answers")
    a = ap.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    seeds = ([int(x) for x in a.seeds.split(",")] if a.seeds
             else [a.seed if a.seed is not None else 0])
    runs = []
    for seed in seeds:
        s = LearnSetup(requests=a.requests, window=a.window, agreement=a.agreement,
                       workers=a.workers, seed=seed, packaged=a.packaged)
        runs.append(run(s))
        print_run(runs[-1], s)
    if a.packaged:
        print(" ".join(f"{k}={v}" for k, v in packaged_summary(runs).items()))
    else:
        print(" ".join(f"{k}={v}" for k, v in summary(runs).items()))


def packaged_summary(runs: list[LearnRun]) -> dict[str, str]:
    """The last line of ``--packaged``: its routes' last-window savings (mean over seeds),
    the largest window's drop excess and exploration share (no wrong prior there)."""
    full = summary(runs)
    return {"packaged_auto_learned_saving": full["auto_learned_saving"],
            "packaged_balanced_learned_saving": full["balanced_learned_saving"],
            "packaged_drop_excess_max": full["learn_drop_excess_max"],
            "packaged_exploration_share": full["exploration_share"]}


if __name__ == "__main__":
    main()
