"""What routing costs a request: Tollgate (passthrough and ``auto``) beside LiteLLM's proxy.

One run, side by side, interleaved, with ``wrk`` (a C load generator: a Python client would
itself be the bottleneck) against one local fake OpenAI-compatible upstream:
  upstream     wrk straight to the fake upstream (the floor; it must not be the bottleneck)
  litellm      LiteLLM's proxy (``litellm[proxy]`` in its own venv, no database, no routing)
  passthrough  ``tollgate serve`` naming the backend (auth, budget, forwarding, log row)
  auto         ``tollgate serve`` with ``model="auto"`` (adds encode + head + search)
Each server runs one worker (``--workers``); Tollgate logs to SQLite in a temporary directory
(or ``--database-url``). Every request carries a unique ~50-token prompt (a wrk Lua script),
so no cache can answer it. Each round runs c=1 and c=32, streamed and not, over every target
in turn; the table shows medians over rounds, RSS is the peak of the largest process of each
server. ``routing_p50_ms`` is the decision alone (encode + head + search + tie-break) in this
process, for 20, 50 and 200-token prompts. The last line:
``routing_p50_ms=… added_p50_ms=… litellm_added_p50_ms=… throughput_ratio_c32=… rss_mb=…
errors=…`` (added = p50 at c=1 minus the upstream's; the ratio is auto's req/s at c=32 over
LiteLLM's; errors are the proxies', Tollgate's and LiteLLM's, over every cell).

    python -m bench.serving.overhead [--rounds 3] [--duration 10] [--database-url postgresql://...]
                             [--encoder minilm-onnx-int8 | --router ARTIFACT] [--workers N]

Installs ``wrk`` with apt-get and LiteLLM's proxy into ``$TOLLGATE_CACHE_DIR/bench`` when
missing (needs the package registries once).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from bench.serving.servers import (
    WRK_LUA,
    Target,
    ensure_litellm_proxy,
    ensure_wrk,
    run_wrk,
    served_router,
    start_all,
)

CONCURRENCY = (1, 32)


def routing_decision_ms(n_samples: int, router_path: str | None) -> dict[int, float]:
    """p50 of the decision alone (encode + head + search + tie-break), as the gateway makes
    it, for prompts of about 20, 50 and 200 tokens (cl100k, the gateway's prompt counter)."""
    from gateway.config import DEFAULT_CONFIG_PATH, load_settings
    from gateway.pool.known import know_backends
    from gateway.serving.routing import route_request
    from router_core.artifact import load_router
    from router_core.encoders import encoder_for_router
    from router_core.litellm_env import litellm

    settings = load_settings(DEFAULT_CONFIG_PATH)
    router = load_router(router_path)
    encoder = encoder_for_router(router.config, threads=settings.encoder_threads)
    by_rm: dict[str, str] = {}  # expert -> backend, every backend the artifact knows
    for k in know_backends(settings, router, [b.model_name for b in settings.model_list]):
        if k.expert is not None:
            by_rm.setdefault(k.expert, k.backend)
    costs = {b: 1e-4 * (i + 1) for i, b in enumerate(by_rm.values())}
    vocab = WRK_LUA.split('"')[1].split() + ["market", "energy", "river", "theorem"]
    rng = random.Random(0)
    out = {}
    for n_tokens in (20, 50, 200):
        texts = []
        for i in range(n_samples + 10):
            words = [f"Request {i}:"]
            while litellm.token_counter(model="gpt-4", text=" ".join(words)) < n_tokens:
                words.append(rng.choice(vocab))
            texts.append(" ".join(words))
        times = []
        for i, text in enumerate(texts):
            t = time.perf_counter()
            phi = encoder.encode([text])
            route_request(router, phi, lam=0.2, delta=None, backends_by_router_model=by_rm,
                          costs_usd_by_backend=costs, max_cost_usd=None)
            if i >= 10:  # the first calls warm the encoder
                times.append((time.perf_counter() - t) * 1000)
        out[n_tokens] = statistics.median(times)
    return out


def measure(a: argparse.Namespace, wrk: str, lua: Path, targets: list[Target]) -> None:
    for t in targets:  # warm-up: connections, lazy imports, first-call caches
        run_wrk(wrk, lua, t, 4, False, 2)
        run_wrk(wrk, lua, t, 4, True, 1)
    for r in range(a.rounds):
        for conc in CONCURRENCY:
            for stream in (False, True):
                order = targets[r % len(targets):] + targets[:r % len(targets)]
                for t in order:
                    res = run_wrk(wrk, lua, t, conc, stream, a.duration)
                    t.runs.setdefault((conc, stream), []).append(res)
                    t.server.sample_rss()
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)


def med(t: Target, conc: int, stream: bool, key: str) -> float:
    return statistics.median(x[key] for x in t.runs[(conc, stream)])


def report(targets: list[Target], routing: dict[int, float], a: argparse.Namespace) -> None:
    by = {t.name: t for t in targets}
    ll, up = by["litellm"], by["upstream"]
    db = "PostgreSQL" if a.database_url else "SQLite"
    print(f"overhead: {a.rounds} interleaved rounds of {a.duration:g} s per cell, wrk, unique "
          f"prompts, 1 upstream, {a.workers} worker(s) each, Tollgate on {db}, encoder "
          f"{a.encoder or 'as the router records'}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    head = (f"{'target':<12} {'stream':<6} {'p50 c=1':>9} {'added':>7} {'req/s c=32':>11} "
            f"{'p99 c=32':>9} {'RSS MB':>7} {'added/LL':>9} {'req/s/LL':>9} {'RSS/LL':>7} "
            f"{'errors':>6}")
    print(head)
    for stream in (False, True):
        base = med(up, 1, stream, "p50_us") / 1000
        ll_added = med(ll, 1, stream, "p50_us") / 1000 - base
        for t in targets:
            p50 = med(t, 1, stream, "p50_us") / 1000
            rps = med(t, 32, stream, "rps")
            p99 = med(t, 32, stream, "p99_us") / 1000
            errors = sum(x["errors"] for k, v in t.runs.items() if k[1] == stream for x in v)
            rss = t.server.peak_rss_mb if t.name != "upstream" else float("nan")
            rel = t.name != "upstream"
            print(f"{t.name:<12} {'yes' if stream else 'no':<6} {p50:>9.2f} {p50 - base:>7.2f} "
                  f"{rps:>11.0f} {p99:>9.1f} {rss:>7.0f} "
                  f"{_ratio(p50 - base, ll_added, rel):>9} "
                  f"{_ratio(rps, med(ll, 32, stream, 'rps'), rel):>9} "
                  f"{_ratio(rss, ll.server.peak_rss_mb, rel):>7} {errors:>6}")
    print("(times in ms; added = p50 at c=1 minus the upstream's; /LL = ratio to LiteLLM proxy; "
          "the fake upstream ends a stream by closing the connection, which wrk counts as a "
          "read error on its own row)")
    print("routing decision p50 (encode + head + search + tie-break): " + ", ".join(
        f"{n} tokens {ms:.3f} ms" for n, ms in routing.items()))
    auto = by["auto"]
    base = med(up, 1, False, "p50_us") / 1000
    errors = sum(x["errors"] for t in targets if t.name != "upstream"
                 for v in t.runs.values() for x in v)
    print(f"routing_p50_ms={routing[50]:.3f} "
          f"added_p50_ms={med(auto, 1, False, 'p50_us') / 1000 - base:.2f} "
          f"litellm_added_p50_ms={med(ll, 1, False, 'p50_us') / 1000 - base:.2f} "
          f"throughput_ratio_c32={med(auto, 32, False, 'rps') / med(ll, 32, False, 'rps'):.2f} "
          f"rss_mb={auto.server.peak_rss_mb:.0f} errors={errors}")


def _ratio(x: float, y: float, show: bool) -> str:
    return f"{x / y:.2f}" if show and y > 0 and not math.isnan(x) else "-"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per wrk run")
    ap.add_argument("--workers", type=int, default=1, help="Tollgate's worker processes")
    ap.add_argument("--database-url", default=None, help="Tollgate's database (default SQLite)")
    ap.add_argument("--routing-samples", type=int, default=300)
    ap.add_argument("--router", default=None, help="router artifact to serve (default packaged)")
    ap.add_argument("--encoder", default=None,
                    help="serve the packaged router with this encoder kind of its vectors")
    a = ap.parse_args(argv)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    wrk = ensure_wrk()
    ensure_litellm_proxy()
    with tempfile.TemporaryDirectory(prefix="tollgate-overhead-") as tmpdir, ExitStack() as st:
        tmp = Path(tmpdir)
        lua = tmp / "bench.lua"
        lua.write_text(WRK_LUA)
        a.router_path = a.router or served_router(tmp, a.encoder)
        targets = start_all(st, a, tmp)
        measure(a, wrk, lua, targets)
        routing = routing_decision_ms(a.routing_samples, a.router_path)
    report(targets, routing, a)


if __name__ == "__main__":
    main()
