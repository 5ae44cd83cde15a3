"""Budgets against what providers do: a burst the budget pays part of (is that part served?),
timeouts (is the tenant charged what the provider bills?), parameters that carry fees beyond
token prices (are they priced or refused?), and usage past every reservation (how far past
the budget can concurrent requests go?)."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai

from bench.serving.hostile.common import (
    PRICES,
    VERBOSE_WORDS,
    Hostile,
    chat_url,
    log_costs,
)
from bench.serving.probes import Recorder
from bench.serving.replica_env import Env
from gateway.config import Settings
from gateway.sandbox.local_upstream import FakeUpstream, count_prompt_tokens

BURST_PROMPT = "Say hello to the burst, in one short sentence."


def _unit_cost(env: Env, body: dict, paid: int, n: int) -> float:
    """What one answer costs in a burst like the main one: routing reads the budget (a
    tight one goes to cheaper backends), so a pre-burst of n/5 requests on a budget paying
    for paid/5 at an unbudgeted answer's cost, then its spend per answer."""
    key, tid = env.tenant()
    url = env.replicas[0].base_url + "/v1"
    openai.OpenAI(base_url=url, api_key=key, max_retries=0).chat.completions.create(**body)
    alone = env.settled(tid)["spent_usd"]
    key, tid = env.tenant(budget_usd=paid // 5 * alone)
    client = openai.OpenAI(base_url=url, api_key=key)

    def one(_: int) -> bool:
        try:
            client.chat.completions.create(**body)
            return True
        except openai.APIStatusError:
            return False

    with ThreadPoolExecutor(n // 5) as pool:
        answered = sum(pool.map(one, range(n // 5)))
    spent = env.settled(tid)["spent_usd"]
    return spent / answered if answered and spent else alone


def burst_scenario(env: Env, rec: Recorder, n: int = 200, paid: int = 50) -> dict[str, Any]:
    """n concurrent ``auto`` requests (OpenAI SDK, its retries as shipped, max_tokens=64)
    over the replicas, on a budget that pays for ``paid`` of them at what one cost in a
    pre-burst (``_unit_cost``): burst_served_share = answered / min(n, budget / c), c the
    burst's own cost per answer."""
    body = {"model": "auto", "max_tokens": 64,
            "messages": [{"role": "user", "content": BURST_PROMPT}]}
    unit = _unit_cost(env, body, paid, n)
    budget = paid * unit
    key, tid = env.tenant(budget_usd=budget)
    clients = [openai.OpenAI(base_url=r.base_url + "/v1", api_key=key) for r in env.replicas]

    answered_ids: list[str] = []

    def one(i: int) -> str:
        try:
            raw = clients[i % len(clients)].chat.completions.with_raw_response.create(**body)
        except openai.APIStatusError as e:
            rec.ids.append(e.response.headers.get("x-tollgate-request-id", ""))
            return f"{e.status_code} {(e.body or {}).get('code', '')}"
        rec.ids.append(raw.headers.get("x-tollgate-request-id", ""))
        answered_ids.append(raw.headers.get("x-tollgate-request-id", ""))
        return "answered"

    with ThreadPoolExecutor(n) as pool:
        outcomes = list(pool.map(one, range(n)))
    info = env.settled(tid)
    answered = outcomes.count("answered")
    # what one answer of the burst cost (a tight budget may route to cheaper backends than
    # the probe's): the budget pays for budget / that many
    burst_unit = info["spent_usd"] / answered if answered else unit
    payable = min(n, budget / burst_unit) if burst_unit > 0 else n
    # the most a hard bound can serve: requests are admitted while the settled spend leaves
    # room for one more reservation (the prompt's byte bound and the client's max_tokens)
    held = env.reserved_usd(answered_ids[0]) if answered_ids else 0.0
    bound_ceiling = (min(n, (budget - held) // burst_unit + 1) if burst_unit > 0 and held
                     else payable)
    return {"unit_usd": unit, "burst_unit_usd": burst_unit, "budget_usd": budget,
            "answered": answered, "payable": round(payable, 1),
            "refused": {o: outcomes.count(o) for o in set(outcomes) - {"answered"}},
            "spent_share": round(info["spent_usd"] / budget, 3) if budget else None,
            "reserved_per_answer_usd": held,
            "bound_ceiling_share": round(min(1.0, bound_ceiling / payable), 3),
            "burst_served_share": round(min(1.0, answered / payable), 3)}


def _billable(up: FakeUpstream, marker: str) -> tuple[float, int]:
    """What the provider bills for the requests carrying ``marker``: it generates (and
    bills) up to the output cap it was sent, answered or not; and how many it received."""
    usd, n = 0.0, 0
    for name, (p_in, p_out) in PRICES.items():
        for body in up.requests_for(name):
            if marker in str(body.get("messages")):
                cap = int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
                usd += (count_prompt_tokens(body) * p_in + cap * p_out) / 1e6
                n += 1
    return usd, n


def timeout_scenario(h: Hostile, rec: Recorder) -> dict[str, Any]:
    """Non-streamed requests whose backend times out: 5 without fallbacks, 1 with two body
    ``fallbacks`` (every one of them times out too); undercharge = Σ max(0, billable −
    charged) over the two tenants."""
    env, out, under = h.env, {}, 0.0
    cases = {"plain": ({"model": "slow-a"}, 5),
             "fallbacks": ({"model": "slow-b", "fallbacks": ["slow-c", "slow-a"]}, 1)}
    for name, (extra, n) in cases.items():
        key, tid = env.tenant(budget_usd=5.0)
        marker = f"timeout-{uuid.uuid4().hex[:8]}"
        body = {**extra, "max_tokens": 1024,
                "messages": [{"role": "user", "content": f"{marker} " + "time out " * 50}]}
        with ThreadPoolExecutor(n) as pool:
            codes = list(pool.map(lambda i, b=body, k=key: rec.post(
                chat_url(env, i), k, json=b).status_code, range(n)))
        charged = env.settled(tid)["spent_usd"]
        billable, attempts = _billable(h.tricky, marker)
        under += max(0.0, billable - charged)
        out[name] = {"codes": codes, "attempts_upstream": attempts,
                     "charged_usd": round(charged, 6), "billable_usd": round(billable, 6)}
    return {**out, "timeout_undercharge_usd": round(under, 6)}


FEE_PARAMS = {  # parameters a provider bills beyond token prices
    "web_search_options": {"web_search_options": {"search_context_size": "high"}},
    "service_tier_priority": {"service_tier": "priority"},
}


def fee_params_scenario(env: Env, rec: Recorder) -> dict[str, Any]:
    """Each fee-carrying parameter beside the same request without it: unpriced when it was
    answered, reached the upstream, and was booked no dearer than the plain request."""
    key, _ = env.tenant(budget_usd=5.0)
    ids, codes, sent = {}, {}, {}
    for name, extra in {"plain": {}, **FEE_PARAMS}.items():
        marker = f"fees-{name}-{uuid.uuid4().hex[:6]}"
        r = rec.post(chat_url(env, 0), key, json={
            "model": "fake-cheap", "max_tokens": 16, **extra,
            "messages": [{"role": "user", "content": f"{marker} what is new today?"}]})
        ids[name], codes[name] = r.headers.get("x-tollgate-request-id", ""), r.status_code
        sent[name] = [b for b in env.upstream.requests_for("fake-cheap")
                      if marker in str(b.get("messages"))]
    costs = log_costs(env, list(ids.values()))
    plain = (costs.get(ids["plain"]) or (0.0,))[0] or 0.0
    unpriced = []
    for name, extra in FEE_PARAMS.items():
        param = next(iter(extra))
        forwarded = any(param in b for b in sent[name])
        cost = (costs.get(ids[name]) or (None,))[0]
        if codes[name] == 200 and forwarded and cost is not None and cost <= plain * (1 + 1e-9):
            unpriced.append(name)
    return {"codes": codes, "forwarded": {k: len(v) for k, v in sent.items()},
            "unpriced": unpriced, "fee_params_unpriced": len(unpriced)}


def overrun_scenario(h: Hostile, rec: Recorder, budget: float = 0.05, n: int = 20
                     ) -> dict[str, Any]:
    """n concurrent requests to a backend that answers VERBOSE_WORDS tokens whatever cap it
    was sent (within its max_output_tokens), on a ``budget`` tenant: overrun_multiple =
    what the provider billed / budget (the ledger's spent + overrun is printed beside it). budget_gate.py's bound: ≤ 1 + R × exposure (per replica)
    + R × one request's bill / budget, R replicas, exposure = budget_overrun_exposure."""
    env = h.env
    key, tid = env.tenant(budget_usd=budget)
    marker = f"overrun-{uuid.uuid4().hex[:8]}"
    body = {"model": "verbose", "max_tokens": 16,
            "messages": [{"role": "user", "content": f"{marker} tell me everything"}]}
    with ThreadPoolExecutor(n) as pool:
        codes = list(pool.map(lambda i: rec.post(chat_url(env, i), key, json=body).status_code,
                              range(n)))
    info = env.settled(tid)
    provider_usd, received = _billable_answers(h.tricky, marker)
    one = provider_usd / received if received else 0.0
    replicas = len(env.replicas)
    exposure = Settings().budget_overrun_exposure or 0.0
    bound = 1 + replicas * exposure + replicas * one / budget
    return {"codes": {c: codes.count(c) for c in set(codes)}, "spent_usd": info["spent_usd"],
            "overrun_usd": info["overrun_usd"], "provider_billed_usd": round(provider_usd, 6),
            "bound_multiple": round(bound, 2),
            "overrun_multiple": round(provider_usd / budget, 3)}


def _billable_answers(up: FakeUpstream, marker: str) -> tuple[float, int]:
    """What the verbose backend billed for the requests carrying ``marker`` (it answers
    every one in full)."""
    p_in, p_out = PRICES["verbose"]
    bodies = [b for b in up.requests_for("verbose") if marker in str(b.get("messages"))]
    usd = sum(count_prompt_tokens(b) * p_in + VERBOSE_WORDS * p_out for b in bodies) / 1e6
    return usd, len(bodies)
