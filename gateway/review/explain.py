"""``GET /v1/routing/{request_id}``: why a request went where it went.

Built from the request's log row (and the feedback rows the learning loop stores): every
candidate the router scored with its similarity s_h = q·e_h, calibrated quality p̂_h,
normalised cost c̃_h, predicted USD and score a_h = p̂_h − λ·c̃_h; the δ-equivalent set E;
the winner and the reason ("cheapest of 3 equivalent ..."); on a route with a promise, the
route's reference with its p̂ on this prompt (also when the request could not use it) and the
winner's estimated drop from it; every forwarding attempt (the
fallbacks); tokens, cost and timing; the feedback received. The key that made the request
sees it, and so do its team's admins (``gateway.auth.may_act_on_request``) and the admin key;
anyone else, another key of the same team included, gets the same 404 as for an unknown id.

Unknown ids are cheap (issue 48, item 7): an id the gateway cannot have issued is a 404
without a database read; a missing row is re-read a bounded number of times
(``REREAD_AFTER_S``, 5 reads in 2 s) rather than polled; a key has at most
``WAITS_PER_KEY`` lookups in flight (a 429 past that, before any read); and each lookup
counts against the key's request rate limit like any other call. A refused lookup's 429 is
sent after its ``retry-after`` (``Reliability.pause_refusal``, shared with count_tokens' 413;
at most 256 refusals pause at once per replica, the rest are answered at once): a loop that polls on refusals otherwise turns them into
a flood of cheap requests that takes the event loop from other tenants (measured on this
machine by the hostile bench: 9975 refusals in its window, a neighbour's p50 ×4.6).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from gateway.auth import Principal, may_act_on_request, require_principal
from gateway.context import GatewayContext
from gateway.errors import GatewayError
from gateway.review.dashboard.access import not_found
from gateway.review.dashboard.queries import fetch_log

BUDGET_SKIP = "budget"
REQUEST_ID = re.compile(r"tg-[0-9a-f]{32}")  # what gateway/serving/endpoint.py issues
# a missing row is re-read after these pauses (the log writer writes in batches after the
# response is sent): 5 reads over 2 s, where polling every 50 ms made 40
REREAD_AFTER_S = (0.1, 0.2, 0.5, 1.2)
WAITS_PER_KEY = 2


class Waits:
    """Lookups in flight, per key: at most ``limit`` at once (one per app)."""

    def __init__(self, limit: int = WAITS_PER_KEY) -> None:
        self.limit = limit
        self._waiting: Counter[str] = Counter()

    @asynccontextmanager
    async def slot(self, who: Principal, pause: Callable[[], Awaitable[Any]] | None = None
                   ) -> AsyncIterator[None]:
        """A slot to wait in; 429 when ``who`` already waits for ``limit`` rows, sent after
        ``pause()`` (the replica's ``Reliability.pause_refusal``)."""
        name = "admin" if who.admin else f"key:{who.key_id or who.tenant_id}"
        if self._waiting[name] >= self.limit:
            if pause is not None:
                await pause()
            raise GatewayError(429, f"this key already has {self.limit} routing lookups in "
                               "flight; retry in a second",
                               "rate_limit_error", code="routing_lookups_waiting",
                               headers={"retry-after": "1"})
        self._waiting[name] += 1
        try:
            yield
        finally:
            self._waiting[name] -= 1
            if not self._waiting[name]:
                del self._waiting[name]


def _is_upstream_attempt(a: dict[str, Any]) -> bool:
    """An attempt that reached an upstream (not a candidate skipped for budget)."""
    return not str(a.get("error") or "").startswith(BUDGET_SKIP)


def _candidate(i: int, c: dict[str, Any], equivalent: list[str]) -> dict[str, Any]:
    return {
        "rank": i + 1,
        "backend": c.get("backend") or c.get("model"),
        "router_model": c.get("model"),
        "similarity": c.get("similarity"),
        "quality": c.get("quality"),
        "cost": c.get("cost"),
        "cost_usd": c.get("cost_usd"),
        "score": c.get("score"),
        "equivalent": (c.get("backend") or c.get("model")) in equivalent,
        "chosen": i == 0,
        "prior": c.get("known") == "prior",  # a cold-start guess, not yet learned from data
        # a route with a promise: p̂ and its pseudo-count n, the lower bound, the bound on the
        # drop from the reference, whether it is within the promise, how its quality is known
        **({"promise": c["promise"]} if c.get("promise") else {}),
    }


def _summary(row: dict[str, Any], winner: str | None, answered: str | None, routed: bool,
             n_tried: int) -> str:
    """One line: who won and why, and who answered when a fallback did."""
    reason = row.get("reason")
    if routed:
        summary = f"{winner}: {reason}"
    elif reason == "passthrough":
        summary = f"{row.get('chosen_model')}: named by the client (passthrough, not routed)"
    else:
        summary = reason or "no routing decision"
    if answered and answered != winner and routed:
        summary += f"; answered by {answered} after {n_tried - 1} failed attempt(s)"
    return summary


def explain_row(row: dict[str, Any]) -> dict[str, Any]:
    """The explanation document of one log row (pure: no I/O)."""
    cands = list(row.get("candidates") or [])
    equivalent = list(row.get("equivalent") or [])
    attempts = list(row.get("attempts") or [])
    routed = bool(cands)
    winner = (cands[0].get("backend") or cands[0].get("model")) if routed else None
    answered = row.get("chosen_model") if row.get("status") == 200 or any(
        a.get("status") == 200 for a in attempts) else None
    tried = [a for a in attempts if _is_upstream_attempt(a)]
    fallbacks = [
        {**a, "reason": "skipped: " + str(a.get("error"))} if not _is_upstream_attempt(a)
        else a
        for a in attempts[1:]
    ]
    feedback = list(row.get("feedback") or [])
    scores = [float(f["score"]) for f in feedback if f.get("score") is not None]
    candidates = [_candidate(i, c, equivalent) for i, c in enumerate(cands)]
    reason = row.get("reason")
    summary = _summary(row, winner, answered, routed, len(tried))
    ts = row.get("created_at")
    return {
        "object": "routing.explanation",
        "id": row["id"],
        "tenant_id": row.get("tenant_id"),
        "created_at": ts.isoformat() if hasattr(ts, "isoformat") else ts,
        "route": row.get("route"),
        "routed": routed,
        "cost_weight": row.get("lam"),
        "router_version": row.get("router_version"),
        "summary": summary,
        "decision": {
            "winner": winner,
            "reason": reason,
            "equivalent": equivalent,
            "candidates": candidates,
            # a promise: the reference's p̂ here, allowed or not, and the estimated drop
            "reference": cands[0].get("promised_reference") if routed else None,
            # the route's certificate from judged pairs, when it decided: region, mix, evidence
            "certificate": cands[0].get("certificate") if routed else None,
        },
        "answered_by": answered,
        "attempts": attempts,
        "fallbacks": fallbacks,
        "usage": {"prompt_tokens": row.get("prompt_tokens"),
                  "completion_tokens": row.get("completion_tokens")},
        "cost_usd": row.get("cost_usd"),
        "reserved_usd": row.get("reserved_usd"),
        "latency_ms": row.get("latency_ms"),
        "ttft_ms": row.get("ttft_ms"),
        "stream": row.get("stream"),
        "status": row.get("status"),
        "error": row.get("error"),
        "feedback": {
            "count": len(feedback),
            "mean_score": sum(scores) / len(scores) if scores else None,
            "items": feedback,
        },
    }


async def _read_waiting(ctx: GatewayContext, request_id: str) -> dict[str, Any] | None:
    """The row, re-read after each of ``REREAD_AFTER_S`` while missing (rows this replica
    still holds are flushed first)."""
    engine, writer = ctx.store.engine, ctx.log_writer
    row = None
    for pause in REREAD_AFTER_S:
        if writer.pending:
            await writer.flush(pause)
        else:
            await anyio.sleep(pause)
        row = await anyio.to_thread.run_sync(fetch_log, engine, request_id)
        if row is not None:
            break
    return row


async def load_explanation(ctx: GatewayContext, who: Principal, request_id: str,
                           waits: Waits | None = None,
                           admit: Callable[[], Awaitable[Any]] | None = None
                           ) -> dict[str, Any]:
    """The explanation if ``who`` may see it; 404 otherwise.

    A lookup holds one of the key's few slots (``Waits``) from before its first read: a key
    past them gets a 429 that costs no database read and no rate-limit round trip. Inside,
    ``admit`` counts it against the key's rate limit, and the row is read; it is queued after
    the response is sent and written in batches, so a client asking right away may be ahead
    of the writer: a missing row is re-read a few times (module docstring)."""
    if not REQUEST_ID.fullmatch(request_id):
        raise not_found(request_id)
    async with (waits or Waits()).slot(who, ctx.reliability.pause_refusal):
        if admit is not None:
            await admit()
        row = await anyio.to_thread.run_sync(fetch_log, ctx.store.engine, request_id)
        if row is None:
            row = await _read_waiting(ctx, request_id)
    if row is None or not await may_act_on_request(ctx, who, row.get("tenant_id"),
                                                   row.get("key_id")):
        raise not_found(request_id)
    return explain_row(row)


def build_router() -> APIRouter:
    r = APIRouter(tags=["review"])
    waits = Waits()

    async def get_explanation(request_id: str, request: Request) -> Response:
        """GatewayError (401, 404, 429) is answered by the app as an OpenAI error body."""
        ctx: GatewayContext = request.app.state.ctx
        who = await require_principal(request)
        tenant, reliability = who.tenant, ctx.reliability

        async def admit() -> None:  # the key's RPM, like any call
            if tenant is not None and reliability is not None:
                await reliability.admit(tenant)

        return JSONResponse(await load_explanation(ctx, who, request_id, waits, admit))

    r.add_api_route("/v1/routing/{request_id}", get_explanation, methods=["GET"])
    return r
