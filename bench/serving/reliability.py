"""Reliability report: budgets, shutdown, a database outage, fuzzing and upstream faults on two
`tollgate serve` replicas sharing PostgreSQL (behind a TCP proxy the bench can cut) and Redis.

    python -m bench.serving.reliability            # full size (a few minutes)
    python -m bench.serving.reliability --small    # the sizes the tests use

Scenarios (each also runs, smaller, in tests/gateway/reliability/test_replicas.py):
1. budget: N concurrent requests from one tenant, spread over both replicas, against a hard
   budget that fits about N/4 of them; overspend = max(0, settled spend − budget).
2. SIGTERM with M requests in flight on one replica (a slow backend holds them): every
   accepted request must be answered and have its log row.
3. database outage of D seconds under steady load on both replicas: requests during it get
   503 (never 401); the time until the first 200 after the database is back is the recovery;
   every request that got an answer (any status) must have its log row.
4. schemathesis over the app's OpenAPI schema (positive and negative cases): 5xx count.
5. every fault mode of the fake upstream on the routed choice, streaming and not, before the
   first byte: the share answered in full by the fallback.
The last line: ``overspend_usd=… lost_rows=… fuzz_5xx=… fallback_success=…
recovered_after_db_outage=…``.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench.serving.cluster import run_fuzz
from bench.serving.fake_router import REPLIES
from bench.serving.replica_env import ADMIN_KEY, MSG, Env, start_env, stop_env

FAULT_MODES = ["error_500", "error_429", "hang", "reset", "malformed_json", "stall_mid_stream"]
PRE_BYTE_STREAM_MODES = ["error_500", "error_429", "hang", "reset"]
FULL = {"n": 200, "fits": 50, "in_flight": 100, "outage_s": 10.0, "examples": 25}
SMALL = {"n": 40, "fits": 10, "in_flight": 10, "outage_s": 3.0, "examples": 5}


def chat(base_url: str, key: str, model: str = "cheap", stream: bool = False,
         timeout: float = 120, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": MSG, "stream": stream, **extra}
    return httpx.post(base_url + "/v1/chat/completions", json=body, timeout=timeout,
                      headers={"authorization": f"Bearer {key}"})


# -- scenarios ---------------------------------------------------------------------------------
def budget_scenario(env: Env, n: int = 200, fits: int = 50) -> dict[str, Any]:
    """n concurrent requests vs a budget that fits about ``fits`` settled requests."""
    probe_key, _ = env.tenant()
    r = chat(env.replicas[0].base_url, probe_key, model="fake-cheap", max_tokens=4)
    # a request holds its bound (gateway/pricing.py), several times what it settles: the
    # budget fits ``fits`` reservations at once
    one = env.reserved_usd(r.headers["x-tollgate-request-id"])
    budget = round(one * fits, 9)
    key, tid = env.tenant(budget_usd=budget)
    reps = env.replicas
    with ThreadPoolExecutor(64) as pool:
        codes = list(pool.map(
            lambda i: chat(reps[i % len(reps)].base_url, key, model="fake-cheap",
                           max_tokens=4).status_code, range(n)))
    info = env.settled(tid)
    return {"requests": n, "ok": codes.count(200), "refused_429": codes.count(429),
            "other": len(codes) - codes.count(200) - codes.count(429), "budget_usd": budget,
            "spent_usd": info["spent_usd"], "reserved_usd": info["reserved_usd"],
            "overspend_usd": max(0.0, round(info["spent_usd"] - budget, 12))}


def sigterm_scenario(env: Env, in_flight: int = 100, delay_s: float = 3.0) -> dict[str, Any]:
    """SIGTERM one replica while ``in_flight`` requests wait on a slow backend."""
    rep = env.replicas[-1]
    key, _ = env.tenant()
    env.upstream.backends["fake-cheap"].delay_s = delay_s
    before = len(env.upstream.requests_for("fake-cheap"))
    results: list[httpx.Response | Exception] = []
    lock = threading.Lock()

    def one(_: int) -> None:
        try:
            resp = chat(rep.base_url, key, model="fake-cheap")
        except Exception as e:  # noqa: BLE001 - counted as a failure below
            resp = e
        with lock:
            results.append(resp)

    pool = ThreadPoolExecutor(in_flight)
    for i in range(in_flight):
        pool.submit(one, i)
    deadline = time.monotonic() + 120
    while (len(env.upstream.requests_for("fake-cheap")) - before < in_flight
           and time.monotonic() < deadline):
        time.sleep(0.05)
    rep.proc.send_signal(15)  # SIGTERM
    time.sleep(0.5)
    try:
        refused_new = chat(rep.base_url, key, timeout=5).status_code != 200
    except httpx.HTTPError:
        refused_new = True
    pool.shutdown(wait=True)
    code = rep.proc.wait(timeout=120)
    env.upstream.backends["fake-cheap"].delay_s = 0.0
    answered = [r for r in results if isinstance(r, httpx.Response)]
    ids = [r.headers["x-tollgate-request-id"] for r in answered
           if "x-tollgate-request-id" in r.headers]
    return {"in_flight": in_flight, "answered_200": sum(r.status_code == 200 for r in answered),
            "failed": len(results) - len(answered), "exit_code": code,
            "new_connections_refused": refused_new, "lost_rows": env.missing_rows(ids)
            + (in_flight - len(ids))}


def outage_scenario(env: Env, outage_s: float = 10.0, rps: float = 10.0) -> dict[str, Any]:
    """Steady load on every live replica; the database disappears for ``outage_s``."""
    key, _ = env.tenant()
    chat(env.replicas[0].base_url, key)  # auth cached on the replica
    stop = threading.Event()
    log: list[tuple[float, int, str | None]] = []
    lock = threading.Lock()

    def load(base_url: str) -> None:
        chat(base_url, key)
        while not stop.is_set():
            t = time.monotonic()
            try:
                r = chat(base_url, key, timeout=30)
                rec = (t, r.status_code, r.headers.get("x-tollgate-request-id"))
            except httpx.HTTPError:
                rec = (t, -1, None)
            with lock:
                log.append(rec)
            time.sleep(max(0.0, 1.0 / rps - (time.monotonic() - t)))

    threads = [threading.Thread(target=load, args=(r.base_url,)) for r in env.replicas]
    for t in threads:
        t.start()
    time.sleep(2)
    down_at = time.monotonic()
    env.proxy.stop()
    time.sleep(outage_s)
    env.proxy.start()
    up_at = time.monotonic()
    deadline = up_at + 120
    recovered_at = None
    while time.monotonic() < deadline and recovered_at is None:
        with lock:
            after = [rec for rec in log if rec[0] >= up_at and rec[1] == 200]
        if after:
            recovered_at = after[0][0]
        time.sleep(0.1)
    time.sleep(2)
    stop.set()
    for t in threads:
        t.join()
    during = [rec for rec in log if down_at <= rec[0] < up_at]
    ids = [rec[2] for rec in log if rec[2]]
    return {"requests": len(log), "during_outage": len(during),
            "during_503": sum(rec[1] == 503 for rec in during),
            "during_401": sum(rec[1] == 401 for rec in log),
            "errors_without_answer": sum(rec[1] == -1 for rec in log),
            "recovered": recovered_at is not None,
            "recovery_s": None if recovered_at is None else round(recovered_at - up_at, 2),
            "lost_rows": env.missing_rows(ids)}


def fuzz_scenario(env: Env, max_examples: int = 25) -> dict[str, Any]:
    key, _ = env.tenant(budget_usd=10.0)
    report = run_fuzz(env.replicas[0].base_url, key, ADMIN_KEY, max_examples=max_examples)
    return {"cases": report["cases"], "fuzz_5xx": report["server_errors"],
            "failures": report["failures"]}


def faults_scenario(env: Env, repeats: int = 2) -> dict[str, Any]:
    """Each fault mode on fake-mid (the routed choice of ``auto``): the fallback answers."""
    key, _ = env.tenant()
    ok = total = 0
    per_mode: dict[str, str] = {}
    base = env.replicas[0].base_url
    for mode in FAULT_MODES:
        streams = [False, True] if mode in PRE_BYTE_STREAM_MODES else [False]
        good = tries = 0
        for stream in streams:
            for _ in range(repeats):
                env.upstream.set_mode("fake-mid", mode)
                r = chat(base, key, model="auto", stream=stream)
                text = r.text
                full = (r.status_code == 200 and r.headers.get("x-tollgate-model") == "fake-cheap"
                        and (REPLIES["fake-cheap"] in text if not stream
                             else "[DONE]" in text and "error" not in text))
                good += full
                tries += 1
        env.upstream.set_mode("fake-mid", "ok")
        per_mode[mode] = f"{good}/{tries}"
        ok += good
        total += tries
    return {"per_mode": per_mode, "fallback_success": round(ok / total, 4)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--small", action="store_true", help="the sizes of the pytest scenarios")
    a = p.parse_args(argv)
    sizes = SMALL if a.small else FULL
    with tempfile.TemporaryDirectory(prefix="tollgate-bench-") as tmp:
        t0 = time.monotonic()
        env = start_env(Path(tmp))
        print(f"started fake upstream, PostgreSQL (via TCP proxy), Redis and "
              f"{len(env.replicas)} replicas in {time.monotonic() - t0:.1f}s", flush=True)
        try:
            budget = budget_scenario(env, sizes["n"], sizes["fits"])
            print("budget:", budget, flush=True)
            faults = faults_scenario(env)
            print("upstream faults:", faults, flush=True)
            outage = outage_scenario(env, sizes["outage_s"])
            print("database outage:", outage, flush=True)
            term = sigterm_scenario(env, sizes["in_flight"])
            print("sigterm:", term, flush=True)
            # last: its wrong keys throttle this address, the admin key included (README,
            # "Hostile tenants"), and the scenarios above create tenants through /admin
            fuzz = fuzz_scenario(env, sizes["examples"])
            print("fuzz:", fuzz, flush=True)
        finally:
            stop_env(env)
    print(f"overspend_usd={budget['overspend_usd']} "
          f"lost_rows={term['lost_rows'] + outage['lost_rows']} "
          f"fuzz_5xx={fuzz['fuzz_5xx']} fallback_success={faults['fallback_success']} "
          f"recovered_after_db_outage={'true' if outage['recovered'] else 'false'}")


if __name__ == "__main__":
    main()
