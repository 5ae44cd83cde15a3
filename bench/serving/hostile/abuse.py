"""The abuses earlier rounds found and fixed, replayed: overspend with hostile shapes, client
faults that must stay 4xx, NUL bytes that must not lose log rows, /metrics without the key,
feedback floods, and key guessing."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import sqlalchemy as sa

from bench.serving.hostile.common import chat_url, hostile_messages
from bench.serving.probes import Blackhole, Recorder
from bench.serving.replica_env import ADMIN_KEY, MSG, Env
from gateway.learning import tables as ldb


# -- scenarios ---------------------------------------------------------------------------------
def overspend_scenario(env: Env, rec: Recorder, hole: Blackhole) -> dict[str, Any]:
    budget = 0.5
    key, tid = env.tenant(budget_usd=budget)
    extra = {"functions": [{"name": "lookup", "parameters": {"type": "object", "properties": {
        "q": {"type": "string", "description": "検索語" * 200}}}}],
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "answer", "schema": {"type": "object", "description": "答え" * 300}}}}
    body = {"model": "pricey", "messages": hostile_messages(hole.url), "max_tokens": 16,
            **extra}
    with ThreadPoolExecutor(10) as pool:
        codes = list(pool.map(lambda i: rec.post(chat_url(env, i), key, json=body).status_code,
                              range(10)))
    info = env.settled(tid)
    overspend = max(0.0, info["spent_usd"] + info["overrun_usd"] - budget)
    return {"codes": {c: codes.count(c) for c in set(codes)}, "budget_usd": budget,
            "spent_usd": info["spent_usd"], "overrun_usd": info["overrun_usd"],
            "overspend_usd": round(overspend, 9), "image_fetches": hole.accepted}


CLIENT_FAULTS: list[tuple[str, bytes]] = [
    ("untyped_part", json.dumps({"model": "auto", "messages": [
        {"role": "user", "content": [1]}]}).encode()),
    ("nan_temperature", (b'{"model": "auto", "messages": [{"role": "user", "content": "x"}],'
                        b' "temperature": NaN}')),
    ("tools_not_objects", json.dumps({"model": "auto", "messages": MSG,
                                      "tools": [1]}).encode()),
    ("text_part_without_text", json.dumps({"model": "auto", "messages": [
        {"role": "user", "content": [{"type": "text"}]}]}).encode()),
    ("huge_n", json.dumps({"model": "auto", "messages": MSG, "n": 10**16,
                           "max_tokens": 1}).encode()),
    ("deep_json", b'{"model": "auto", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ("nan_cost_weight", (b'{"model": "auto", "messages": [{"role": "user", "content": "x"}],'
                        b' "tollgate": {"cost_weight": NaN}}')),
    ("both_caps_huge", json.dumps({"model": "auto", "messages": MSG, "max_tokens": 4,
                                   "max_completion_tokens": 10**12}).encode()),
]


def client_faults_scenario(env: Env, rec: Recorder, rounds: int = 3) -> dict[str, Any]:
    key, _ = env.tenant()
    statuses: dict[str, list[int]] = {}
    for i in range(rounds * len(env.replicas)):
        for name, body in CLIENT_FAULTS:
            statuses.setdefault(name, []).append(
                rec.post(chat_url(env, i), key, content=body).status_code)
    other, _ = env.tenant()
    after = rec.post(chat_url(env, 0), other, json={"model": "auto", "messages": MSG}).status_code
    return {"statuses": {k: sorted(set(v)) for k, v in statuses.items()},
            "not_4xx": sum(1 for v in statuses.values() for s in v if not 400 <= s < 500),
            "next_tenant_status": after}


def lost_rows_scenario(env: Env, rec: Recorder) -> dict[str, Any]:
    key, _ = env.tenant()
    codes = []
    for i in range(len(env.replicas) * 2):
        codes.append(rec.post(chat_url(env, i), key, json={"model": "fake-cheap", "messages": [
            {"role": "user", "content": "a NUL \x00 in the prompt"}]}).status_code)
        codes.append(rec.post(chat_url(env, i), key, json={"model": "no\x00such",
                                                        "messages": MSG}).status_code)
    return {"codes": sorted(set(codes))}


def metrics_scenario(env: Env) -> dict[str, Any]:
    key, _ = env.tenant()
    open_ = 0
    for r in env.replicas:
        for headers in ({}, {"authorization": f"Bearer {key}"}):
            open_ += httpx.get(r.base_url + "/metrics", headers=headers,
                               timeout=60).status_code != 401
    return {"metrics_open": open_}


def feedback_scenario(env: Env, rec: Recorder) -> dict[str, Any]:
    key, _ = env.tenant()
    r = rec.post(chat_url(env, 0), key, json={"model": "auto", "messages": MSG})
    rid = r.headers["x-tollgate-request-id"]
    urls = [rep.base_url + "/v1/feedback" for rep in env.replicas]
    codes = [rec.post(urls[i % len(urls)], key, json={"request_id": rid, "score": 0.5})
             .status_code for i in range(200)]
    engine = sa.create_engine(env.db_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        n = conn.execute(sa.select(sa.func.count()).select_from(ldb.observations_t)
                         .where(ldb.observations_t.c.request_id == rid)).scalar_one()
    engine.dispose()
    big = rec.post(urls[0], key, json={"request_id": rid, "score": 1, "comment": "x" * 8_000_000})
    nul = rec.post(urls[0], key, json={"request_id": rid, "score": 1, "comment": "a\x00b"})
    t = time.perf_counter()
    unknown = rec.post(urls[0], key, json={"request_id": "tg-" + "0" * 32, "score": 1})
    return {"feedback_codes": sorted(set(codes)), "observations": n,
            "8mb_comment": big.status_code, "nul_comment": nul.status_code,
            "unknown_id": unknown.status_code,
            "unknown_id_wait_s": round(time.perf_counter() - t, 2)}


def login_scenario(env: Env, key: str) -> dict[str, Any]:
    """Wrong tenant keys, then wrong admin keys, from this address on one replica (429 past
    20); the admin key from another loopback address (127.0.0.2) is still answered. ``key``:
    a tenant's, made before anything throttled this address (the fuzz's wrong keys do)."""
    base = env.replicas[0].base_url
    codes = [httpx.post(base + "/v1/chat/completions", json={"model": "auto", "messages": MSG},
                        headers={"authorization": f"Bearer sk-tg-guess{i}"},
                        timeout=30).status_code for i in range(25)]
    admin_codes = [httpx.get(base + "/admin/tenants", timeout=30,
                             headers={"authorization": f"Bearer {guess}"}).status_code
                   for guess in ("admin-guess", ADMIN_KEY)]
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"),
                      timeout=30) as other:
        elsewhere = other.get(base + "/admin/tenants",
                              headers={"authorization": f"Bearer {ADMIN_KEY}"}).status_code
    login = httpx.post(env.replicas[-1].base_url + "/dashboard/login", data={"key": key},
                       timeout=30)
    cookie = login.cookies.get("tollgate_dashboard", "")
    return {"wrong_key_codes": {c: codes.count(c) for c in set(codes)},
            "admin_key_codes_after": admin_codes, "admin_key_elsewhere": elsewhere,
            "cookie_is_not_the_key": bool(cookie) and key not in cookie}
