"""`tollgate demo`: the whole request path on a laptop, no provider keys.

1. Local OpenAI-compatible upstreams answer as the 11 RouterBench models, usage counted by a
   real tokenizer; pool, prices and routes come from gateway/sandbox/demo_config.yaml (the
   gateway's own config.yaml holds a current pool). With RouterBench's data
   (``--data-dir``, else ``$TOLLGATE_DATA_DIR``, else ``../shared/data``), each model answers a
   test prompt with the answer it actually gave in RouterBench. Without it (a fresh clone),
   the prompts are the demo's own (gateway/sandbox/demo_prompts.yaml, written for the demo)
   and every model gives the same plain answer: decisions and spend are real, quality unknown.
2. A gateway on them (temporary SQLite, the packaged router), a tenant made with the admin API.
3. A sample of prompts sent with the OpenAI SDK twice: ``model="auto"`` (routed) and the
   strongest model by name (passthrough, what a team without a router would do).
4. A table of decisions, then spend of both, and with the data quality (RouterBench's recorded
   0/1 grade of the answer that was served).
"""

from __future__ import annotations

import secrets
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

from gateway.config import Route, load_settings, settings_from_dict
from gateway.sandbox.local_server import serve_in_thread
from gateway.sandbox.local_upstream import FakeBackend, FakeUpstream

Echo = Callable[[str], None]
DEMO_CONFIG_PATH = Path(__file__).with_name("demo_config.yaml")  # RouterBench pool and routes
DEMO_PROMPTS_PATH = Path(__file__).with_name("demo_prompts.yaml")  # the no-data prompts
DATA_HINT = ("quality needs RouterBench's recorded grades: pass --data-dir DIR (the folder "
             "holding routerbench_subset/) or set TOLLGATE_DATA_DIR (README, \"See it work\")")


class DemoDataMissing(Exception):
    """The benchmark folder that was asked for is not there (one line for the CLI)."""


@dataclass
class Sample:
    """What the demo sends and how the local upstreams answer: prompts, their task, each
    model's answer per prompt, and (with the benchmark data) each model's 0/1 grade."""

    prompts: list[str]
    tasks: list[str]
    answers: dict[str, dict[str, str]]  # model -> prompt -> answer
    quality: np.ndarray | None  # prompts x models, None without the data
    models: list[str]
    strongest: str | None  # known from the data's training rows; else the route's reference
    source: str


def _recorded_answers(table: Any, rows: np.ndarray, model: str) -> dict[str, str]:
    answers = table.responses.get(model)
    out: dict[str, str] = {}
    for i in rows:
        text = answers[i] if answers is not None else None
        out[str(table.prompts[i])] = str(text) if text else "(no recorded answer)"
    return out


def _benchmark_sample(data_dir: Path | None, n_prompts: int, seed: int) -> Sample | None:
    """RouterBench's test prompts and recorded answers; None when its folder is absent and no
    folder was asked for (an explicit --data-dir that is absent is an error)."""
    from router_core.data import load_dataset
    from router_core.data.paths import shared_data_dir

    root = Path(data_dir).expanduser() if data_dir is not None else shared_data_dir()
    if not (root / "routerbench_subset").is_dir():
        if data_dir is not None:
            raise DemoDataMissing(f"no RouterBench data in {root}: expected {root}/"
                                  "routerbench_subset/ (RouterBench's per-task CSVs; README, "
                                  "\"See it work\"); leave --data-dir out to run on the "
                                  "built-in prompts")
        return None
    table = load_dataset("routerbench", data_dir=root)
    rows, strongest = _sample(table, n_prompts, seed)
    models = [str(m) for m in table.models]
    return Sample(
        prompts=[str(table.prompts[i]) for i in rows],
        tasks=[str(table.category[i]) if table.category is not None else "" for i in rows],
        answers={m: _recorded_answers(table, rows, m) for m in models},
        quality=np.asarray(table.quality)[rows],
        models=models, strongest=strongest,
        source=f"{len(rows)} RouterBench test prompts (answers as recorded)",
    )


def _builtin_sample(models: list[str], n_prompts: int, seed: int) -> Sample:
    """The demo's own prompts (demo_prompts.yaml): every model answers the same."""
    items = yaml.safe_load(DEMO_PROMPTS_PATH.read_text())["prompts"]
    rng = np.random.default_rng(seed)
    picked = np.sort(rng.choice(len(items), size=min(n_prompts, len(items)), replace=False))
    chosen = [items[int(i)] for i in picked]
    answers = {str(c["prompt"]): str(c["answer"]) for c in chosen}
    return Sample(
        prompts=[str(c["prompt"]) for c in chosen], tasks=[str(c["task"]) for c in chosen],
        answers={m: answers for m in models}, quality=None, models=models, strongest=None,
        source=(f"{len(chosen)} built-in prompts (no benchmark data: every model gives the "
                "same answer, so quality is not measured)"),
    )


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
    """Run the demo and print its report; returns the summary figures. RouterBench's data
    when it is there (quality measured), else the built-in prompts (spend only); a
    ``data_dir`` given but absent raises DemoDataMissing."""
    import openai

    from gateway.app import create_app
    from gateway.provider import litellm_maps

    base = load_settings(DEMO_CONFIG_PATH)  # the RouterBench pool, its prices and routes
    sample = _benchmark_sample(data_dir, n_prompts, seed)
    if sample is None:
        sample = _builtin_sample([b.model_name for b in base.model_list], n_prompts, seed)
    pool = [b for b in base.model_list if b.model_name in sample.models]

    def count_tokens(text: str) -> int:
        return litellm_maps.token_counter("gpt-3.5-turbo", text)

    backends = [FakeBackend(b.model_name, reply=_reply_for(sample.answers[b.model_name]))
                for b in pool]
    admin_key = "demo-admin-" + secrets.token_hex(8)
    with tempfile.TemporaryDirectory(prefix="tollgate-demo-") as tmp, FakeUpstream(
        backends, count_tokens=count_tokens
    ) as up:
        settings = _settings(up, pool, base, Path(tmp), admin_key, cost_weight, router_path)
        with serve_in_thread(create_app(settings)) as url:
            r = httpx.post(f"{url}/admin/tenants", json={"name": "demo"},
                           headers={"authorization": f"Bearer {admin_key}"}, timeout=30)
            r.raise_for_status()
            api_key = r.json()["api_key"]
            if sample.strongest is None:  # no training rows: the `auto` route's reference
                sample.strongest = _reference(url, api_key) or pool[0].model_name
            echo(f"tollgate demo: {sample.source}; {len(pool)} local upstreams on "
                 f"{up.base_url}; route auto ({_promise(settings.routes['auto'])}) vs always "
                 f"{sample.strongest}")
            client = openai.OpenAI(base_url=f"{url}/v1", api_key=api_key, max_retries=0)
            routes = {k: v.model_dump(exclude_none=True) for k, v in settings.routes.items()}
            results = _send_all(client, sample, echo, list(routes))
    summary = _report(results, sample, echo, routes)
    if sample.quality is None:
        echo(DATA_HINT)
    return summary


def _promise(route: Route) -> str:
    """What a route promises, as the demo prints it."""
    if route.max_drop is not None:
        return f"within {route.max_drop:g} of its reference"
    return f"λ={route.cost_weight}"


def _reference(url: str, api_key: str) -> str | None:
    """The `auto` route's reference backend, as GET /v1/models names it."""
    r = httpx.get(f"{url}/v1/models", headers={"authorization": f"Bearer {api_key}"},
                  timeout=30)
    r.raise_for_status()
    for entry in r.json()["data"]:
        if entry["id"] == "auto":
            return ((entry.get("tollgate") or {}).get("promise") or {}).get("reference")
    return None


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


def _send_all(client: Any, sample: Sample, echo: Echo, routes: list[str]
              ) -> list[dict[str, Any]]:
    col = {m: j for j, m in enumerate(sample.models)}
    strongest = sample.strongest
    graded = sample.quality is not None

    def q_of(k: int, model: str) -> float | None:
        return float(sample.quality[k, col[model]]) if graded else None

    results = []
    if graded:
        echo(f"q: the routed model's recorded RouterBench score on the prompt (0 to 1, "
             f"rounded); cost $: what the gateway charged; q*, cost* $: the same for always "
             f"{strongest}")
        echo(f"{'#':>3}  {'task':<14} {'routed to':<34} {'q':>2} {'cost $':>10}   "
             f"{'q*':>2} {'cost* $':>10}")
    else:
        echo(f"cost $: what the gateway charged; cost* $: the same for always {strongest}")
        echo(f"{'#':>3}  {'task':<14} {'routed to':<34} {'cost $':>10}   {'cost* $':>10}")
    for k, prompt in enumerate(sample.prompts):
        messages = [{"role": "user", "content": prompt}]
        raw = client.chat.completions.with_raw_response.create(model="auto", messages=messages)
        routed = raw.headers["x-tollgate-model"]
        cost = float(raw.headers["x-tollgate-cost-usd"])
        raw_s = client.chat.completions.with_raw_response.create(model=strongest,
                                                                 messages=messages)
        cost_s = float(raw_s.headers["x-tollgate-cost-usd"])
        q, q_s = q_of(k, routed), q_of(k, strongest)
        task = sample.tasks[k][:14]
        if graded:
            echo(f"{k + 1:>3}  {task:<14} {routed[:34]:<34} {q:>2.0f} {cost:>10.6f}   "
                 f"{q_s:>2.0f} {cost_s:>10.6f}")
        else:
            echo(f"{k + 1:>3}  {task:<14} {routed[:34]:<34} {cost:>10.6f}   {cost_s:>10.6f}")
        by_route = {"auto": (q, cost)}
        for name in (r for r in routes if r != "auto"):  # every route on the same prompt
            raw_r = client.chat.completions.with_raw_response.create(model=name,
                                                                     messages=messages)
            by_route[name] = (q_of(k, raw_r.headers["x-tollgate-model"]),
                              float(raw_r.headers["x-tollgate-cost-usd"]))
        results.append({"prompt": k, "routed": routed, "q": q, "cost": cost, "q_strongest": q_s,
                        "cost_strongest": cost_s, "routes": by_route,
                        "version": raw.headers["x-tollgate-router-version"]})
    return results


def _mean(values: list[float | None]) -> float | None:
    return None if not values or values[0] is None else sum(values) / len(values)


def _route_table(results: list[dict[str, Any]], routes: dict[str, dict], strongest: str,
                 echo: Echo) -> dict[str, dict[str, float | None]]:
    """Each route's spend saving (and, with the data, quality) beside always sending the
    strongest model."""
    spend_s = sum(r["cost_strongest"] for r in results)
    quality_s = _mean([r["q_strongest"] for r in results])
    graded = quality_s is not None
    q_head = f" {'quality':>8} {'vs strongest':>13}" if graded else ""
    echo(f"{'route':<24} {'promise':>28} {'saves':>7}{q_head}")
    q_cells = f" {quality_s:8.3f} {'':>13}" if graded else ""
    echo(f"{'always ' + strongest:<24} {'-':>28} {'0.0%':>7}{q_cells}".rstrip())
    out: dict[str, dict[str, float | None]] = {}
    for name, cfg in routes.items():
        spend = sum(r["routes"][name][1] for r in results)
        quality = _mean([r["routes"][name][0] for r in results])
        saves = 1 - spend / spend_s if spend_s > 0 else 0.0
        promise = (f"within {cfg['max_drop']:g} of reference" if cfg.get("max_drop") is not None
                   else f"λ={cfg.get('cost_weight', 0.5)}")
        q_cells = (f" {quality:8.3f} {quality - quality_s:>+13.3f}"
                   if graded and quality is not None else "")
        echo(f"{name:<24} {promise:>28} {saves:>7.1%}{q_cells}")
        out[name] = {"saves": saves, "quality": quality}
    return out


def _report(results: list[dict[str, Any]], sample: Sample, echo: Echo,
            routes: dict[str, dict] | None = None) -> dict[str, Any]:
    strongest = str(sample.strongest)
    n = len(results)
    spend = sum(r["cost"] for r in results)
    spend_s = sum(r["cost_strongest"] for r in results)
    quality = _mean([r["q"] for r in results])
    quality_s = _mean([r["q_strongest"] for r in results])
    mix = Counter(r["routed"] for r in results)
    echo("")
    label = "always " + strongest
    width = max(len(label), 14) + 2

    def q_text(q: float | None) -> str:
        return f"   mean quality {q:.3f}" if q is not None else ""

    echo(f"{'router version':<{width}}{results[0]['version'] if results else '-'}")
    echo(f"{'auto (routed)':<{width}}spend ${spend:.6f}{q_text(quality)}")
    echo(f"{label:<{width}}spend ${spend_s:.6f}{q_text(quality_s)}")
    saved = 1 - spend / spend_s if spend_s > 0 else 0.0
    at = (f" at {quality - quality_s:+.3f} quality"
          if quality is not None and quality_s is not None else "")
    echo(f"auto spends {spend / spend_s:.1%} of the strongest model's cost "
         f"(saves {saved:.1%}){at}")
    echo("routed to: " + ", ".join(f"{m} {c}" for m, c in mix.most_common()))
    by_route = _route_table(results, routes, strongest, echo) if routes and n else {}
    return {"n": n, "spend": spend, "spend_strongest": spend_s, "quality": quality,
            "quality_strongest": quality_s, "mix": dict(mix), "strongest": strongest,
            "routes": by_route, "graded": sample.quality is not None,
            "source": "routerbench" if sample.quality is not None else "built-in"}
