"""The servers, the interleaved wrk rounds and ``main`` (the package docstring says what)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

import bench.serving.overhead as package
from bench.serving.overhead.decision import routing_decisions, served_minilm_share
from bench.serving.overhead.report import report
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


def measure(a: argparse.Namespace, wrk: str, lua: Path, targets: list[Target]) -> None:
    """Every cell (concurrency × streamed) over every target, rotating the order each round."""
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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(package.__doc__ or "").split("\n")[0])
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
        auto = next(t for t in targets if t.name == "auto")
        served = served_minilm_share(auto.server.url, auto.admin_key)
        routing = routing_decisions(a.routing_samples, a.router_path)
    report(targets, routing, a, served)
