"""Hostile scenarios on a key's limits (issue 35 findings 1, 2, 3, 7): a key's ``models``
against fallbacks, its ``max_budget`` through a database outage and concurrent overruns,
and waiting in the budget line (deleting a key under waiting requests; a team-mate's
latency beside another key's burst). Each returns its result with its last-line field.
Plain httpx, not the run's Recorder: requests refused 401 (a deleted key) have no log row.
"""

from __future__ import annotations

import statistics
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from bench.serving.hostile.common import (
    HANGING,
    OUTAGE_ALLOWANCE_USD,
    PRICES,
    VERBOSE_WORDS,
    Hostile,
    chat_url,
)
from bench.serving.replica_env import Env

STRONG_MAX_OUT = 4096  # fake-strong's max_output_tokens: asking for it carries no exposure


def _post(url: str, key: str, timeout: float = 60, **body: Any) -> httpx.Response:
    try:
        return httpx.post(url, json=body, timeout=timeout,
                          headers={"authorization": f"Bearer {key}"})
    except httpx.HTTPError:
        return httpx.Response(599)


def _key(env: Env, **body: Any) -> str:
    r = env.admin("POST", "/key/generate", json=body)
    r.raise_for_status()
    return r.json()["key"]


def _key_info(env: Env, key: str, timeout_s: float = 60) -> dict[str, Any]:
    """/key/info once nothing of the key is reserved."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = env.admin("GET", "/key/info", params={"key": key}).json()["info"]
        if info["tollgate"]["reserved_usd"] == 0 or time.monotonic() > deadline:
            return info


def models_bypass_scenario(env: Env) -> dict[str, Any]:
    """A key limited to a backend that times out for everyone asks for it with ``fallbacks``
    to a backend outside its list, on chat, /v1/responses and /v1/completions: bypass = the
    answers a backend outside the key's list gave."""
    allowed = HANGING[0]
    key = _key(env, models=[allowed])
    base = env.replicas[0].base_url
    fallbacks = {"fallbacks": ["fake-cheap"]}
    calls = {
        "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                          "max_tokens": 16}),
        "responses": ("/v1/responses", {"input": "hi", "max_output_tokens": 16}),
        "completions": ("/v1/completions", {"prompt": "hi", "max_tokens": 16}),
    }
    codes, bypass = {}, 0
    for name, (path, body) in calls.items():
        r = _post(base + path, key, model=allowed, **body, **fallbacks)
        codes[name] = r.status_code
        answered_by = r.headers.get("x-tollgate-model") if r.status_code == 200 else None
        bypass += int(answered_by is not None and answered_by != allowed)
    return {"codes": codes, "key_models_bypass": bypass}


def outage_scenario(env: Env, budget: float = 0.02, n: int = 30) -> dict[str, Any]:
    """Outage policy ``allow`` (allowance OUTAGE_ALLOWANCE_USD per replica): a key without
    a team and a team key, each with ``max_budget`` ``budget``, send ``n`` requests each over
    both replicas while the database is cut; multiple = the key's spend after the journal's
    replay / its max_budget (the larger of the two). Bound: warm-up + allowance × replicas."""
    _, tid = env.tenant(budget_usd=5.0)
    keys = {"own": _key(env, max_budget=budget), "team": _key(env, max_budget=budget,
                                                               team_id=tid)}
    body = {"model": "fake-strong", "max_tokens": 64,
            "messages": [{"role": "user", "content": "outage " * 20}]}
    for key in keys.values():  # each replica knows the keys before the database goes
        for i in range(len(env.replicas)):
            _post(chat_url(env, i), key, **body)
    before = {n_: _key_info(env, k)["spend"] for n_, k in keys.items()}
    env.proxy.stop()
    codes: dict[str, dict[int, int]] = {}
    try:
        for name, key in keys.items():
            got = [_post(chat_url(env, i), key, **body).status_code for i in range(n)]
            codes[name] = {c: got.count(c) for c in set(got)}
    finally:
        env.proxy.start()
    after: dict[str, float] = {}
    deadline = time.monotonic() + 90
    for name, key in keys.items():  # the journal replays every 2 s once the database is back
        while True:
            after[name] = _key_info(env, key)["spend"]
            if after[name] > before[name] or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    time.sleep(3)  # a second replica's journal
    after = {name: _key_info(env, key)["spend"] for name, key in keys.items()}
    multiple = max(after.values()) / budget
    return {"codes": codes, "spend_before": before, "spend_after": after,
            "bound_usd": round(max(before.values()) + OUTAGE_ALLOWANCE_USD
                               * len(env.replicas), 6),
            "key_outage_overspend_multiple": round(multiple, 3)}


def overrun_scenario(h: Hostile, budget: float = 0.05, n: int = 20) -> dict[str, Any]:
    """n concurrent requests (max_tokens 16) of a key without a team, max_budget
    ``budget``, to the backend that answers VERBOSE_WORDS tokens whatever cap it was sent:
    multiple = what the key was charged (its spend) / max_budget; the provider's bill for
    the key's requests is printed beside it as a multiple too."""
    env = h.env
    key = _key(env, max_budget=budget)
    marker = f"key-overrun-{uuid.uuid4().hex[:8]}"
    body = {"model": "verbose", "max_tokens": 16,
            "messages": [{"role": "user", "content": f"{marker} tell me everything"}]}
    with ThreadPoolExecutor(n) as pool:
        codes = list(pool.map(lambda i: _post(chat_url(env, i), key, **body).status_code,
                              range(n)))
    p_in, p_out = PRICES["verbose"]
    received = [b for b in h.tricky.requests_for("verbose") if marker in str(b.get("messages"))]
    billed = len(received) * (20 * p_in + VERBOSE_WORDS * p_out) / 1e6
    spend = _key_info(env, key)["spend"]
    return {"codes": {c: codes.count(c) for c in set(codes)}, "key_spend_usd": spend,
            "provider_billed_multiple": round(billed / budget, 3),
            "key_overrun_multiple": round(spend / budget, 3)}


def delete_while_waiting_scenario(env: Env, n: int = 40) -> dict[str, Any]:
    """A key without a team (max_budget paying one request at a time) and a team key (the
    team's budget pays one at a time): n slow requests each, over both replicas; the key is
    deleted while n − 1 wait. Counts the 5xx and the requests the upstream got after it."""
    up = env.upstream
    strong = up.backends["fake-strong"]
    saved, strong.delay_s = strong.delay_s, 1.0
    out: dict[str, Any] = {}
    fivexx = 0
    try:
        for name in ("own", "team"):
            if name == "own":
                key = _key(env, max_budget=0.15)
            else:
                _, tid = env.tenant(budget_usd=0.15)
                key = _key(env, team_id=tid)
            marker = f"del-{uuid.uuid4().hex[:8]}"
            body = {"model": "fake-strong", "max_tokens": STRONG_MAX_OUT,
                    "messages": [{"role": "user", "content": f"{marker} hello"}]}
            with ThreadPoolExecutor(n) as pool:
                futs = [pool.submit(_post, chat_url(env, i), key, **body) for i in range(n)]
                time.sleep(0.6)
                env.admin("POST", "/key/delete", json={"keys": [key]})
                deleted_at = len([b for b in up.requests_for("fake-strong")
                                  if marker in str(b.get("messages"))])
                codes = [f.result().status_code for f in futs]
            reached = len([b for b in up.requests_for("fake-strong")
                           if marker in str(b.get("messages"))])
            fivexx += sum(c >= 500 for c in codes)
            out[name] = {"codes": {c: codes.count(c) for c in set(codes)},
                         "served_after_delete": reached - deleted_at}
    finally:
        strong.delay_s = saved
    return {**out, "waiting_delete_5xx": fivexx}


def teammate_scenario(env: Env, burst: int = 300, probes: int = 20) -> dict[str, Any]:
    """Team-mates A and B on a $0.15 budget: A's requests (fake-strong, slow, max_tokens at
    its max output) each hold most of it, so one runs and ``burst`` − 1 wait; B sends
    ``probes`` small requests one after another, idle and during A's burst: ratio = B's p50
    during / B's p50 idle (all on one replica)."""
    up = env.upstream
    _, tid = env.tenant(budget_usd=0.15)
    a, b = _key(env, team_id=tid), _key(env, team_id=tid)
    url = env.replicas[0].base_url + "/v1/chat/completions"
    small = {"model": "fake-cheap", "max_tokens": 16,
             "messages": [{"role": "user", "content": "a small question"}]}

    def probe() -> list[float]:
        times = []
        for _ in range(probes):
            t = time.perf_counter()
            r = _post(url, b, **small)
            if r.status_code == 200:
                times.append(time.perf_counter() - t)
        return times

    probe()  # warm
    idle = probe()
    strong = up.backends["fake-strong"]
    saved, strong.delay_s = strong.delay_s, 0.5
    big = {"model": "fake-strong", "max_tokens": STRONG_MAX_OUT,
           "messages": [{"role": "user", "content": "a long answer please"}]}
    try:
        with ThreadPoolExecutor(burst) as pool:
            futs = [pool.submit(_post, url, a, 30, **big) for _ in range(burst)]
            time.sleep(1.0)
            during = probe()
            codes = [f.result().status_code for f in futs]
    finally:
        strong.delay_s = saved
    p50_idle = statistics.median(idle) if idle else float("nan")
    p50_during = statistics.median(during) if during else float("inf")
    return {"burst_codes": {c: codes.count(c) for c in set(codes)},
            "probes_answered": len(during), "p50_idle_ms": round(p50_idle * 1e3, 1),
            "p50_during_ms": round(p50_during * 1e3, 1),
            "teammate_p50_ratio": round(p50_during / p50_idle, 2)}


LAST_LINE = ("key_models_bypass", "key_outage_overspend_multiple", "key_overrun_multiple",
             "waiting_delete_5xx", "teammate_p50_ratio")


def scenarios(h: Hostile) -> list[tuple[str, Any]]:
    """In the run's order (after the tenants' overrun: the verbose backend is untrusted)."""
    env = h.env
    return [
        ("key models", lambda: models_bypass_scenario(env)),
        ("key overrun", lambda: overrun_scenario(h)),
        ("key delete", lambda: delete_while_waiting_scenario(env)),
        ("key teammate", lambda: teammate_scenario(env)),
        ("key outage", lambda: outage_scenario(env)),
    ]
