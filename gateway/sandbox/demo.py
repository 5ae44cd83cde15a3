"""`tollgate demo`: the whole request path on a laptop, no provider keys.

1. Local OpenAI-compatible upstreams answer as the 11 RouterBench models: for each test
   prompt, the answer that model actually gave in RouterBench (``../shared/data``), with
   usage counted by a real tokenizer; pool, prices and routes come from
   gateway/sandbox/demo_config.yaml (the gateway's own config.yaml holds a current pool).
2. A gateway on them (temporary SQLite, the packaged router), a tenant made with the admin API.
3. A sample of test prompts sent with the OpenAI SDK twice: ``model="auto"`` (routed) and the
   strongest model by name (passthrough, what a team without a router would do).
4. A table of decisions, then spend and quality (RouterBench's recorded 0/1 grade of the
   answer that was served) of both.
"""

from __future__ import annotations

import secrets
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from gateway.config import load_settings, settings_from_dict
from gateway.sandbox.local_server import serve_in_thread
from gateway.sandbox.local_upstream import FakeBackend, FakeUpstream

Echo = Callable[[str], None]
DEMO_CONFIG_PATH = Path(__file__).with_name("demo_config.yaml")  # RouterBench pool and routes


def _recorded_answers(table: Any, rows: np.ndarray, model: str) -> dict[str, str]:
    answers = table.responses.get(model)
    out: dict[str, str] = {}
    for i in rows:
        text = answers[i] if answers is not None else None
        out[str(table.prompts[i])] = str(text) if text else "(no recorded answer)"
    return out


def _reply_for(answers: dict[str, str]) -> Callable[[dict], str]:
    def reply(body: dict) -> str:
        user = [m for m in body.get("messages", []) if m.get("role") == "user"]
        text = user[-1].get("content") if user else ""
        return answers.get(str(text), "(prompt not in the demo sample)")

    return reply


def run_demo(
    *,
    n_prompts: int = 40,
    cost_weight: float | None = None,
    seed: int = 0,
    data_dir: Path | None = None,
    router_path: Path | None = None,
    echo: Echo = print,
) -> dict[str, Any]:
    """Run the demo and print its report; returns the summary figures."""
    import openai

    from gateway.app import create_app
    from router_core.data import load_dataset
    from router_core.litellm_env import litellm

    table = load_dataset("routerbench", data_dir=data_dir)
    rows, strongest = _sample(table, n_prompts, seed)
    base = load_settings(DEMO_CONFIG_PATH)  # the RouterBench pool, its prices and routes
    pool = [b for b in base.model_list if b.model_name in table.models]

    def count_tokens(text: str) -> int:
        return int(litellm.token_counter(model="gpt-3.5-turbo", text=text))

    backends = [
        FakeBackend(b.model_name, reply=_reply_for(_recorded_answers(table, rows, b.model_name)))
        for b in pool
    ]
    admin_key = "demo-admin-" + secrets.token_hex(8)
    with tempfile.TemporaryDirectory(prefix="tollgate-demo-") as tmp, FakeUpstream(
        backends, count_tokens=count_tokens
    ) as up:
        settings = _settings(up, pool, base, Path(tmp), admin_key, cost_weight, router_path)
        echo(f"tollgate demo: {len(rows)} RouterBench test prompts, {len(pool)} local upstreams "
             f"on {up.base_url}, route auto (λ={settings.routes['auto'].cost_weight}) vs always "
             f"{strongest}")
        with serve_in_thread(create_app(settings)) as url:
            r = httpx.post(f"{url}/admin/tenants", json={"name": "demo"},
                           headers={"authorization": f"Bearer {admin_key}"}, timeout=30)
            r.raise_for_status()
            client = openai.OpenAI(base_url=f"{url}/v1", api_key=r.json()["api_key"],
                                   max_retries=0)
            routes = {k: v.model_dump(exclude_none=True) for k, v in settings.routes.items()}
            results = _send_all(client, table, rows, strongest, echo, list(routes))
    return _report(results, table, strongest, echo, routes)


def _sample(table: Any, n_prompts: int, seed: int) -> tuple[np.ndarray, str]:
    """A seeded sample of test rows, and the strongest model (highest mean quality on the
    training rows)."""
    split = np.asarray(table.split)
    test_rows = np.flatnonzero(split == "test")
    train_rows = np.flatnonzero(split == "train")
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(test_rows, size=min(n_prompts, len(test_rows)), replace=False))
    strongest = table.models[int(np.nanargmax(np.nanmean(table.quality[train_rows], axis=0)))]
    return rows, strongest


def _settings(up: FakeUpstream, pool: list[Any], base: Any, tmp: Path, admin_key: str,
              cost_weight: float | None, router_path: Path | None) -> Any:
    """The demo gateway: the repository's pool and routes on the local upstreams, a
    temporary SQLite file."""
    model_list = [up.model_entry(b.model_name, **b.model_info.model_dump(exclude_none=True))
                  for b in pool]
    routes = {k: v.model_dump(exclude_none=True) for k, v in base.routes.items()}
    if cost_weight is not None:
        routes["auto"]["cost_weight"] = cost_weight
    raw = {
        "model_list": model_list,
        "routes": routes,
        "database_url": f"sqlite:///{tmp / 'demo.db'}",
        "admin_key": admin_key,
        "router_path": str(router_path or _demo_router()),
        "reliability": {"spool_dir": str(tmp / "spool")},
    }
    return settings_from_dict(raw, source="demo")


def _demo_router() -> Path:
    """The RouterBench router (its 11 models are the demo's), else the packaged one."""
    from router_core.artifact import DEFAULT_ROUTER_DIR, ROUTERBENCH_ROUTER_DIR

    return ROUTERBENCH_ROUTER_DIR if ROUTERBENCH_ROUTER_DIR.is_dir() else DEFAULT_ROUTER_DIR


def _send_all(client: Any, table: Any, rows: np.ndarray, strongest: str, echo: Echo,
              routes: list[str]) -> list[dict[str, Any]]:
    col = {m: j for j, m in enumerate(table.models)}
    results = []
    echo(f"q: the routed model's recorded RouterBench score on the prompt (0 to 1, rounded); "
         f"cost $: what the gateway charged; q*, cost* $: the same for always {strongest}")
    echo(f"{'#':>3}  {'task':<14} {'routed to':<34} {'q':>2} {'cost $':>10}   "
         f"{'q*':>2} {'cost* $':>10}")
    for k, i in enumerate(rows):
        messages = [{"role": "user", "content": str(table.prompts[i])}]
        raw = client.chat.completions.with_raw_response.create(model="auto", messages=messages)
        routed = raw.headers["x-tollgate-model"]
        cost = float(raw.headers["x-tollgate-cost-usd"])
        raw_s = client.chat.completions.with_raw_response.create(model=strongest,
                                                                 messages=messages)
        cost_s = float(raw_s.headers["x-tollgate-cost-usd"])
        q = float(table.quality[i, col[routed]])
        q_s = float(table.quality[i, col[strongest]])
        cat = str(table.category[i]) if table.category is not None else ""
        echo(f"{k + 1:>3}  {cat[:14]:<14} {routed[:34]:<34} {q:>2.0f} {cost:>10.6f}   "
             f"{q_s:>2.0f} {cost_s:>10.6f}")
        by_route = {"auto": (q, cost)}
        for name in (r for r in routes if r != "auto"):  # every route on the same prompt
            raw_r = client.chat.completions.with_raw_response.create(model=name,
                                                                     messages=messages)
            by_route[name] = (float(table.quality[i, col[raw_r.headers["x-tollgate-model"]]]),
                              float(raw_r.headers["x-tollgate-cost-usd"]))
        results.append({"row": int(i), "routed": routed, "q": q, "cost": cost, "q_strongest": q_s,
                        "cost_strongest": cost_s, "routes": by_route,
                        "version": raw.headers["x-tollgate-router-version"]})
    return results


def _route_table(results: list[dict[str, Any]], routes: dict[str, dict], strongest: str,
                 echo: Echo) -> dict[str, dict[str, float]]:
    """Each route's spend saving and quality beside always sending the strongest model."""
    n = len(results)
    spend_s = sum(r["cost_strongest"] for r in results)
    quality_s = sum(r["q_strongest"] for r in results) / n
    echo(f"{'route':<24} {'λ':>6} {'saves':>7} {'quality':>8} {'vs strongest':>13}")
    echo(f"{'always ' + strongest:<24} {'-':>6} {'0.0%':>7} {quality_s:8.3f} {'':>13}")
    out = {}
    for name, cfg in routes.items():
        spend = sum(r["routes"][name][1] for r in results)
        quality = sum(r["routes"][name][0] for r in results) / n
        saves = 1 - spend / spend_s if spend_s > 0 else 0.0
        echo(f"{name:<24} {cfg.get('cost_weight', 0.5):>6} {saves:>7.1%} {quality:8.3f} "
             f"{quality - quality_s:>+13.3f}")
        out[name] = {"saves": saves, "quality": quality}
    return out


def _report(results: list[dict[str, Any]], table: Any, strongest: str, echo: Echo,
            routes: dict[str, dict] | None = None) -> dict[str, Any]:
    n = len(results)
    spend = sum(r["cost"] for r in results)
    spend_s = sum(r["cost_strongest"] for r in results)
    quality = sum(r["q"] for r in results) / n
    quality_s = sum(r["q_strongest"] for r in results) / n
    mix = Counter(r["routed"] for r in results)
    echo("")
    label = "always " + strongest
    width = max(len(label), 14) + 2
    echo(f"{'router version':<{width}}{results[0]['version'] if results else '-'}")
    echo(f"{'auto (routed)':<{width}}spend ${spend:.6f}   mean quality {quality:.3f}")
    echo(f"{label:<{width}}spend ${spend_s:.6f}   mean quality {quality_s:.3f}")
    saved = 1 - spend / spend_s if spend_s > 0 else 0.0
    echo(f"auto spends {spend / spend_s:.1%} of the strongest model's cost "
         f"(saves {saved:.1%}) at {quality - quality_s:+.3f} quality")
    echo("routed to: " + ", ".join(f"{m} {c}" for m, c in mix.most_common()))
    by_route = _route_table(results, routes, strongest, echo) if routes and n else {}
    return {"n": n, "spend": spend, "spend_strongest": spend_s, "quality": quality,
            "quality_strongest": quality_s, "mix": dict(mix), "strongest": strongest,
            "routes": by_route}
