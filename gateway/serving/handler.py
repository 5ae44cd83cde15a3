"""POST /v1/chat/completions: authenticate → admit → parse → plan → attempts → response.

The ``Outcome`` is created right after authentication, so every later refusal (rate limit,
bad body, planning, budget, upstream) and every cancellation still settles and logs once;
the attempt loop is built only from a complete plan.
"""

from __future__ import annotations

import time
import uuid

import anyio
from fastapi import Request
from fastapi.responses import Response

from gateway.auth import authenticate
from gateway.context import GatewayContext
from gateway.errors import GatewayError
from gateway.serving.access_log import log_access
from gateway.serving.attempts import Attempts
from gateway.serving.chat_request import parse_chat_request
from gateway.serving.outcome import Outcome
from gateway.serving.planning import admissible, plan_request, start_plan
from gateway.serving.response_headers import RATELIMIT_STATE
from gateway.serving.validation import json_body


def new_request_id() -> str:
    return "tg-" + uuid.uuid4().hex


async def chat_completions(request: Request) -> Response:
    """The OpenAI chat completions endpoint."""
    ctx: GatewayContext = request.app.state.ctx
    t0 = time.perf_counter()
    rid = new_request_id()
    try:
        tenant = await authenticate(ctx, request)
    except GatewayError as e:
        ctx.metrics.requests.labels("unknown", "none", str(e.status), "unknown").inc()
        log_access({"id": rid, "status": e.status,
                    "latency_ms": (time.perf_counter() - t0) * 1000}, None)
        return e.response({"x-tollgate-request-id": rid})
    out = Outcome(ctx, tenant, rid, t0)
    out.hold.client_gone = request.is_disconnected  # ends a wait for the budget
    try:
        # 429 + Retry-After over the rate limit; the x-ratelimit-* headers of the response
        setattr(request.state, RATELIMIT_STATE, await ctx.reliability.admit(tenant))
        req = parse_chat_request(await json_body(request))
        pool = ctx.pool.current  # one pool for the whole request, whatever hot-swaps
        out.plan = start_plan(pool, tenant, req)
        out.plan = await plan_request(ctx, out.plan)
        out.plan = admissible(out.plan)
        return await Attempts(out, out.plan).respond()
    except GatewayError as e:
        await out.finish(e.status, e.message)
        return e.response(out.headers())
    except BaseException as e:  # cancelled (client gone, shutdown past its grace) or a bug:
        with anyio.CancelScope(shield=True):  # still release the money and log the request
            cancelled = isinstance(e, anyio.get_cancelled_exc_class())
            await out.finish(499 if cancelled else 500,
                            "cancelled" if cancelled else f"internal error: {type(e).__name__}")
        raise
