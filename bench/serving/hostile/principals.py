"""Hostile scenario (issue 48.11): one user's keys are one client to the circuit breakers.

A user with three keys, one in each of two teams and one without a team, makes 12
generations longer than the echo backend's timeout (ambiguous failures: a request can provoke
them); then another tenant sends 8 short requests to the same backend on the same replica.
``breaker_keys_as_tenants`` = those 8 answered 503 (target 0): before, each key's team (or
its user) counted as its own tenant, so one user met the breaker's ``min_tenants`` alone.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from bench.serving.hostile.common import LONG_GENERATION, chat_url
from bench.serving.replica_env import MSG, Env

LAST_LINE = ("breaker_keys_as_tenants",)


def _key(env: Env, **body: Any) -> str:
    r = env.admin("POST", "/key/generate", json=body)
    r.raise_for_status()
    return r.json()["key"]


def _post(url: str, key: str, **body: Any) -> int:
    try:
        return httpx.post(url, json=body, timeout=60,
                          headers={"authorization": f"Bearer {key}"}).status_code
    except httpx.HTTPError:
        return 599


def user_keys_scenario(env: Env, failures: int = 12, probes: int = 8) -> dict[str, Any]:
    user = "u-" + uuid.uuid4().hex[:8]
    _, team_a = env.tenant(budget_usd=5.0)
    _, team_b = env.tenant(budget_usd=5.0)
    keys = [_key(env, team_id=team_a, user_id=user), _key(env, team_id=team_b, user_id=user),
            _key(env, user_id=user, max_budget=5.0)]
    url = chat_url(env, 0)
    long = {"model": "echo", "max_tokens": LONG_GENERATION,
            "messages": [{"role": "user", "content": "Write the longest essay you can."}]}
    with ThreadPoolExecutor(len(keys)) as pool:
        codes = list(pool.map(lambda i: _post(url, keys[i % len(keys)], **long),
                              range(failures)))
    other, _ = env.tenant()
    after = [_post(url, other, model="echo", messages=MSG, max_tokens=16)
             for _ in range(probes)]
    return {"user_codes": sorted(set(codes)), "other_codes": sorted(set(after)),
            "breaker_keys_as_tenants": after.count(503)}
