"""The overhead table and its last line (the package docstring says what each figure is)."""

from __future__ import annotations

import argparse
import math
import os
import statistics

from bench.serving.overhead.decision import DecisionTimes
from bench.serving.servers import Target


def med(t: Target, conc: int, stream: bool, key: str) -> float:
    return statistics.median(x[key] for x in t.runs[(conc, stream)])


def _ratio(x: float, y: float, show: bool) -> str:
    return f"{x / y:.2f}" if show and y > 0 and not math.isnan(x) else "-"


def _rows(targets: list[Target], stream: bool) -> list[str]:
    by = {t.name: t for t in targets}
    ll, up = by["litellm"], by["upstream"]
    base = med(up, 1, stream, "p50_us") / 1000
    ll_added = med(ll, 1, stream, "p50_us") / 1000 - base
    out = []
    for t in targets:
        p50 = med(t, 1, stream, "p50_us") / 1000
        rps = med(t, 32, stream, "rps")
        p99 = med(t, 32, stream, "p99_us") / 1000
        errors = sum(x["errors"] for k, v in t.runs.items() if k[1] == stream for x in v)
        rss = t.server.peak_rss_mb if t.name != "upstream" else float("nan")
        rel = t.name != "upstream"
        out.append(f"{t.name:<12} {'yes' if stream else 'no':<6} {p50:>9.2f} {p50 - base:>7.2f} "
                   f"{rps:>11.0f} {p99:>9.1f} {rss:>7.0f} "
                   f"{_ratio(p50 - base, ll_added, rel):>9} "
                   f"{_ratio(rps, med(ll, 32, stream, 'rps'), rel):>9} "
                   f"{_ratio(rss, ll.server.peak_rss_mb, rel):>7} {errors:>6}")
    return out


def report(targets: list[Target], routing: DecisionTimes, a: argparse.Namespace,
           served_share: float | None = None) -> None:
    by = {t.name: t for t in targets}
    ll, up, auto, passthrough = by["litellm"], by["upstream"], by["auto"], by["passthrough"]
    db = "PostgreSQL" if a.database_url else "SQLite"
    print(f"overhead: {a.rounds} interleaved rounds of {a.duration:g} s per cell, wrk, unique "
          f"prompts, 1 upstream, {a.workers} worker(s) each, Tollgate on {db}, encoder "
          f"{a.encoder or 'as the router records'}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'target':<12} {'stream':<6} {'p50 c=1':>9} {'added':>7} {'req/s c=32':>11} "
          f"{'p99 c=32':>9} {'RSS MB':>7} {'added/LL':>9} {'req/s/LL':>9} {'RSS/LL':>7} "
          f"{'errors':>6}")
    for stream in (False, True):
        print("\n".join(_rows(targets, stream)))
    print("(times in ms; added = p50 at c=1 minus the upstream's; /LL = ratio to LiteLLM proxy; "
          "the fake upstream ends a stream by closing the connection, which wrk counts as a "
          "read error on its own row)")
    print("routing decision (encode + head + search + tie-break), p50, share that ran "
          "MiniLM, share equal to MiniLM's own decision: " + ", ".join(
              f"{n} tokens {ms:.3f} ms ({routing.minilm_share[n]:.2f}, "
              f"{routing.agreement[n]:.3f})" for n, ms in routing.p50_ms.items()))
    served = "nan" if served_share is None else f"{served_share:.2f}"
    print(f"served auto route (its own rule, the wrk prompts): MiniLM ran on {served} of "
          "its decisions (tollgate_routing_decisions)")
    base = med(up, 1, False, "p50_us") / 1000
    errors = sum(x["errors"] for t in targets if t.name != "upstream"
                 for v in t.runs.values() for x in v)
    ll_rps = med(ll, 32, False, "rps")
    print(f"routing_p50_ms={routing.p50_ms[50]:.3f} "
          f"added_p50_ms={med(auto, 1, False, 'p50_us') / 1000 - base:.2f} "
          f"litellm_added_p50_ms={med(ll, 1, False, 'p50_us') / 1000 - base:.2f} "
          f"throughput_ratio_c32={med(auto, 32, False, 'rps') / ll_rps:.2f} "
          f"rss_mb={auto.server.peak_rss_mb:.0f} litellm_rss_mb={ll.server.peak_rss_mb:.0f} "
          f"passthrough_ratio_c32={med(passthrough, 32, False, 'rps') / ll_rps:.2f} "
          f"minilm_share={routing.overall_share:.2f} served_minilm_share={served} "
          f"errors={errors}")
