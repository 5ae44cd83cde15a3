"""The frame every endpoint handler shares: authenticate → record → answer → finish once.

Chat completions, Responses and text completions differ only in how a body is parsed, planned
and attempted; what surrounds that (the request id, authentication, the ``Outcome`` created
right after it, the rate limit, and settling and logging exactly once whatever way the request
ends) is here, so a fix to it reaches every endpoint. Embeddings keep their own record
(gateway/serving/embeddings_handler.py) but end through the same ``finished``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
from fastapi import Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from gateway.auth import authenticate
from gateway.context import GatewayContext
from gateway.errors import CLIENT_GONE, GatewayError
from gateway.serving.access_log import log_access
from gateway.serving.chat_request import ChatRequest
from gateway.serving.outcome import Outcome
from gateway.serving.planning import Plan, admissible, start_plan
from gateway.serving.response_headers import RATELIMIT_STATE
from gateway.serving.tracing import start_request_trace
from gateway.serving.validation import json_body

Answer = Callable[[Outcome, Any], Awaitable[Response]]  # (outcome, JSON body) → response
# a refusal's response in the endpoint's error shape (OpenAI's unless the endpoint says)
Render = Callable[[GatewayError, dict[str, str]], Response]
Planner = Callable[[GatewayContext, Plan], Awaitable[Plan]]


class Record(Protocol):
    """What ``finished`` needs of a request's record (an ``Outcome``, an embeddings call)."""

    async def finish(self, status: int, error: str | None) -> None: ...

    def headers(self) -> dict[str, str]: ...


def new_request_id() -> str:
    return "tg-" + uuid.uuid4().hex


def openai_error(e: GatewayError, headers: dict[str, str]) -> Response:
    """A refusal in OpenAI's error shape, the default of every endpoint."""
    return e.response(headers)


async def finished(record: Record, work: Callable[[], Awaitable[Response]],
                   render: Render = openai_error) -> Response:
    """``work``'s response; a refusal is finished and answered with its error, and a
    cancellation (client gone, shutdown past its grace) or a bug still releases the held money
    and logs the request before it propagates. A client that hung up before its body was read
    (Starlette's ``ClientDisconnect``) is a 499 like one gone mid-answer, not a server error:
    nothing is raised, so no traceback is logged for what any client can do at will."""
    try:
        return await work()
    except GatewayError as e:
        await record.finish(e.status, e.message)
        return render(e, record.headers())
    except ClientDisconnect:
        await record.finish(499, CLIENT_GONE)
        return Response(status_code=499)  # nobody reads it: uvicorn drops it with the socket
    except BaseException as e:
        with anyio.CancelScope(shield=True):
            cancelled = isinstance(e, anyio.get_cancelled_exc_class())
            await record.finish(499 if cancelled else 500,
                                "cancelled" if cancelled else f"internal error: {type(e).__name__}")
        raise


async def serve(request: Request, answer: Answer, render: Render = openai_error) -> Response:
    """One request to an endpoint answered by ``answer(outcome, body)``. The ``Outcome``
    exists from authentication on, so every later refusal (rate limit, bad body, planning,
    budget, upstream) and every cancellation settles and logs once; refusals are answered
    by ``render`` (Anthropic's error shape on /v1/messages)."""
    ctx: GatewayContext = request.app.state.ctx
    t0 = time.perf_counter()
    rid = new_request_id()
    trace = start_request_trace(request.method, request.url.path, request.headers, rid)
    try:
        tenant = await authenticate(ctx, request)
    except GatewayError as e:  # no tenant: nothing held, only counted and the access line
        ctx.metrics.requests.labels("unknown", "none", str(e.status), "unknown").inc()
        log_access({"id": rid, "status": e.status,
                    "latency_ms": (time.perf_counter() - t0) * 1000}, None)
        trace.end(e.status, e.message)
        return render(e, {"x-tollgate-request-id": rid})
    out = Outcome(ctx, tenant, rid, t0, trace)
    out.hold.client_gone = request.is_disconnected  # ends a wait for the budget

    async def work() -> Response:
        # 429 + Retry-After over the rate limit; the x-ratelimit-* headers of the response
        setattr(request.state, RATELIMIT_STATE, await ctx.reliability.admit(tenant))
        # a slot of max_parallel_requests, given back when the request is finished
        out.parallel_slot = await ctx.reliability.take_slot(tenant, rid)
        return await answer(out, await json_body(request))

    with trace.current():  # litellm's spans nest under the request's
        return await finished(out, work, render)


async def planned(out: Outcome, chat: ChatRequest, plan: Planner) -> Plan:
    """The admissible plan of a request's chat view, kept on ``out`` at each step so a refusal
    is logged with as much of the plan as was made."""
    ctx = out.ctx
    out.plan = start_plan(ctx.pool.current, out.tenant, chat)  # one pool, whatever hot-swaps
    started_ns = time.time_ns()
    out.plan = await plan(ctx, out.plan)
    out.trace.routed(out.plan, started_ns, ctx.encoder.kind)
    out.plan = admissible(out.plan)
    return out.plan
