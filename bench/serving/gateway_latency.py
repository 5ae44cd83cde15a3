"""The gateway's added latency over a direct upstream call (p50, concurrency 1).

One run, side by side, interleaved request by request so drift on a shared machine hits all
three paths alike:
  direct       the OpenAI SDK straight to a local OpenAI-compatible upstream
  passthrough  the same SDK through Tollgate naming the backend (auth, budget reserve/settle,
               litellm forwarding, log row; no routing)
  routed       through Tollgate with model="auto" (adds MiniLM on CPU + the packaged router)
The upstream answers instantly, so the differences are the gateway's own cost. Store:
SQLite in a temporary directory (or --database-url). Prints a table; the last line is
`added_p50_ms_routed=… added_p50_ms_passthrough=… ratio_routed=…`.

    python -m bench.serving.gateway_latency [--requests 200] [--database-url postgresql://...]
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
import openai
import uvicorn

from gateway.app import create_app
from gateway.config import DEFAULT_CONFIG_PATH, load_settings, settings_from_dict
from gateway.sandbox.local_server import free_port
from gateway.sandbox.local_upstream import FakeBackend, FakeUpstream

PROMPT = [{"role": "user", "content": "Which is heavier, a kilo of feathers or a kilo of "
                                      "steel? Answer in one sentence."}]
REPLY = "They weigh the same: one kilogram each."


def _pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1] if len(xs) > 1 else xs[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=200, help="timed requests per path")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--database-url", default=None)
    a = ap.parse_args()

    base = load_settings(DEFAULT_CONFIG_PATH)
    pool = base.model_list
    backends = [FakeBackend(b.model_name, reply=REPLY) for b in pool]
    admin = "bench-admin-" + secrets.token_hex(6)
    with tempfile.TemporaryDirectory() as tmp, FakeUpstream(backends) as up:
        raw = {
            "model_list": [up.model_entry(b.model_name,
                                          **b.model_info.model_dump(exclude_none=True))
                           for b in pool],
            "routes": {k: v.model_dump(exclude_none=True) for k, v in base.routes.items()},
            "database_url": a.database_url or f"sqlite:///{Path(tmp) / 'bench.db'}",
            "admin_key": admin,
            "reliability": {"spool_dir": str(Path(tmp) / "spool")},
        }
        settings = settings_from_dict(raw, source="bench")
        app = create_app(settings)
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                               log_level="warning", lifespan="on"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        gw = f"http://127.0.0.1:{port}"
        r = httpx.post(f"{gw}/admin/tenants", json={"name": "bench"},
                       headers={"authorization": f"Bearer {admin}"}, timeout=30)
        r.raise_for_status()
        key = r.json()["api_key"]
        backend = pool[0].model_name
        direct = openai.OpenAI(base_url=up.base_url, api_key="sk-direct", max_retries=0)
        via = openai.OpenAI(base_url=f"{gw}/v1", api_key=key, max_retries=0)
        paths = {
            "direct": lambda: direct.chat.completions.create(model=backend, messages=PROMPT),
            "passthrough": lambda: via.chat.completions.create(model=backend, messages=PROMPT),
            "routed": lambda: via.chat.completions.create(model="auto", messages=PROMPT),
        }
        encoder = app.state.ctx.encoder
        text = PROMPT[0]["content"]

        def encode() -> None:
            encoder.encode([text])

        times: dict[str, list[float]] = {k: [] for k in paths}
        times["encoder alone"] = []
        for i in range(a.warmup + a.requests):
            for name, call in [*paths.items(), ("encoder alone", encode)]:
                t = time.perf_counter()
                call()
                if i >= a.warmup:
                    times[name].append((time.perf_counter() - t) * 1000)
        server.should_exit = True
        thread.join(timeout=60)

    p50 = {k: statistics.median(v) for k, v in times.items()}
    print(f"gateway latency, concurrency 1, {a.requests} requests per path (interleaved), "
          f"database {'PostgreSQL' if a.database_url else 'SQLite'}")
    print(f"{'path':<12} {'p50 ms':>8} {'p90 ms':>8} {'added p50 ms':>13} {'ratio':>6}")
    for k in paths:
        added = p50[k] - p50["direct"]
        print(f"{k:<12} {p50[k]:>8.2f} {_pct(times[k], 90):>8.2f} {added:>13.2f} "
              f"{p50[k] / p50['direct']:>6.2f}")
    enc = times["encoder alone"]
    print(f"(MiniLM encode of the prompt alone, same process: p50 {p50['encoder alone']:.2f} ms, "
          f"p90 {_pct(enc, 90):.2f} ms; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs)")
    print(f"added_p50_ms_routed={p50['routed'] - p50['direct']:.2f} "
          f"added_p50_ms_passthrough={p50['passthrough'] - p50['direct']:.2f} "
          f"ratio_routed={p50['routed'] / p50['direct']:.2f}")


if __name__ == "__main__":
    main()
