"""``GET /v1/routing/{request_id}``: why a request went where it went.

Built from the request's log row (and the feedback rows the learning loop stores): every
candidate the router scored with its similarity s_h = q·e_h, calibrated quality p̂_h,
normalised cost c̃_h, predicted USD and score a_h = p̂_h − λ·c̃_h; the δ-equivalent set E;
the winner and the reason ("cheapest of 3 equivalent ..."); on a route with a promise, the
route's reference with its p̂ on this prompt (also when the request could not use it) and the
winner's estimated drop from it; every forwarding attempt (the
fallbacks); tokens, cost and timing; the feedback received. The tenant that made the
request sees it; the admin key sees all; anyone else gets the same 404 as for an unknown id.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from gateway.auth import Principal, require_principal
from gateway.context import GatewayContext
from gateway.review.dashboard.access import not_found
from gateway.review.dashboard.queries import fetch_log

BUDGET_SKIP = "budget"
FLUSH_WAIT_S = 2.0


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


async def load_explanation(ctx: GatewayContext, who: Principal, request_id: str
                           ) -> dict[str, Any]:
    """The explanation if ``who`` may see it; 404 otherwise.

    The row is queued after the response is sent and written in batches, so a client asking
    right away may be ahead of the writer: on a miss, flush and look again for up to
    ``FLUSH_WAIT_S`` (ids are random UUIDs, so only a just-finished request waits)."""
    engine = ctx.store.engine
    writer = ctx.log_writer
    deadline = time.monotonic() + FLUSH_WAIT_S
    row = await anyio.to_thread.run_sync(fetch_log, engine, request_id)
    while row is None and time.monotonic() < deadline:
        if writer.pending:
            await writer.flush(max(0.0, deadline - time.monotonic()))
        else:
            await anyio.sleep(0.05)
        row = await anyio.to_thread.run_sync(fetch_log, engine, request_id)
    if row is None or not who.can_see(row.get("tenant_id")):
        raise not_found(request_id)
    return explain_row(row)


async def get_explanation(request_id: str, request: Request) -> Response:
    """GatewayError (401, 404) is answered by the app as an OpenAI error body."""
    ctx: GatewayContext = request.app.state.ctx
    who = await require_principal(request)
    return JSONResponse(await load_explanation(ctx, who, request_id))


def build_router() -> APIRouter:
    r = APIRouter(tags=["review"])
    r.add_api_route("/v1/routing/{request_id}", get_explanation, methods=["GET"])
    return r
