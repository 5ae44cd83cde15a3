"""The frame every endpoint's story runs in: ``async with Frame(request) as frame``.

Every endpoint runs in it: chat completions, Responses, text completions and Messages, which
differ only in how a body is parsed, planned, forwarded and relayed, and embeddings and the
unit endpoints (images, speech, transcription, moderations, rerank), which name their backend
and make one call (gateway/serving/named_call.py). What surrounds the story is here,
so a fix to it reaches every endpoint: the request id, its trace (current while the story runs,
so litellm's spans nest under it), its timing, authentication and the ``Outcome`` created right
after it (the one record of every request), the rate limit, and the error mapping: whatever
ends the story early (a refusal in the endpoint's error shape, the client gone, a cancellation
or a bug) settles and logs the request exactly once, with its access line and span even when
no tenant was found.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from types import TracebackType
from typing import Any, Self

import anyio
from fastapi import Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from gateway.auth import authenticate
from gateway.context import GatewayContext
from gateway.errors import CLIENT_GONE, GatewayError
from gateway.serving.plan.planning import Plan, start_plan
from gateway.serving.plan.session_affinity import conversation_key
from gateway.serving.record.access_log import log_access
from gateway.serving.record.attribution import attribution
from gateway.serving.record.outcome import Outcome
from gateway.serving.request.chat_request import ChatRequest
from gateway.serving.request.validation import json_body
from gateway.serving.response_headers import RATELIMIT_STATE
from gateway.serving.tracing import start_request_trace

# a refusal's response in the endpoint's error shape (OpenAI's unless the endpoint says)
Render = Callable[[GatewayError, dict[str, str]], Response]
Planner = Callable[[GatewayContext, Plan], Awaitable[Plan]]


def new_request_id() -> str:
    return "tg-" + uuid.uuid4().hex


def openai_error(e: GatewayError, headers: dict[str, str]) -> Response:
    """A refusal in OpenAI's error shape, the default of every endpoint."""
    return e.response(headers)


async def refused(record: Outcome, e: BaseException, render: Render) -> Response | None:
    """``record`` finished for what ended it early: a refusal is answered with its error; a
    client that hung up before its body was read (Starlette's ``ClientDisconnect``) is a 499
    like one gone mid-answer (nothing is raised, so no traceback is logged for what any
    client can do at will). A cancellation (client gone, shutdown past its grace) or a bug
    still releases the held money and logs the request, and has no response (None): it
    propagates."""
    if isinstance(e, GatewayError):
        await record.finish(e.status, e.message)
        return render(e, record.headers())
    if isinstance(e, ClientDisconnect):
        await record.finish(499, CLIENT_GONE)
        return Response(status_code=499)  # nobody reads it: uvicorn drops it with the socket
    with anyio.CancelScope(shield=True):
        cancelled = isinstance(e, anyio.get_cancelled_exc_class())
        await record.finish(499 if cancelled else 500,
                            "cancelled" if cancelled else f"internal error: {type(e).__name__}")
    return None


class Frame:
    """Tracing, timing and error mapping around one request's story; refusals are answered by
    ``render`` (Anthropic's error shape on /v1/messages) as ``response``. ``unit``: the label
    of an endpoint that names its backend and is billed by the unit (its metrics' route, its
    row's reason); ``by_tokens``: its input is counted in the token metrics (embeddings)."""

    def __init__(self, request: Request, render: Render = openai_error,
                 unit: str | None = None, by_tokens: bool = False) -> None:
        self.request, self.render = request, render
        self.unit, self.by_tokens = unit, by_tokens
        self.ctx: GatewayContext = request.app.state.ctx
        self.t0 = time.perf_counter()
        self.rid = new_request_id()
        self.trace = start_request_trace(request.method, request.url.path, request.headers,
                                         self.rid, unit)
        self.out: Outcome | None = None  # from authentication on
        self.refusal: Response | None = None
        self._current = contextlib.ExitStack()

    async def __aenter__(self) -> Self:
        self._current.enter_context(self.trace.current())  # litellm's spans nest under it
        return self

    async def __aexit__(self, kind: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> bool:
        try:
            if e is None:
                return False
            if self.out is not None:
                self.refusal = await refused(self.out, e, self.render)
            elif isinstance(e, GatewayError):  # no tenant: nothing held, only counted and logged
                self.ctx.metrics.requests.labels(self.unit or "unknown", "none", str(e.status),
                                                 "false" if self.unit else "unknown").inc()
                log_access({"id": self.rid, "status": e.status,
                            "latency_ms": (time.perf_counter() - self.t0) * 1000}, None)
                self.trace.end(e.status, e.message)
                self.refusal = self.render(e, {"x-tollgate-request-id": self.rid})
            return self.refusal is not None
        finally:
            self._current.close()

    def response(self) -> Response:
        """The refusal's response, after a story that ended early."""
        assert self.refusal is not None
        return self.refusal

    async def authenticate(self) -> Outcome:
        """The tenant (401), and the request's record from here on."""
        tenant = await authenticate(self.ctx, self.request)
        self.out = Outcome(self.ctx, tenant, self.rid, self.t0, self.trace,
                           client_gone=self.request.is_disconnected, unit=self.unit,
                           by_tokens=self.by_tokens)
        return self.out

    async def take_slot(self, out: Outcome) -> None:
        """The tenant admitted: 429 + Retry-After over the rate limit (the x-ratelimit-*
        headers of the response), and a slot of max_parallel_requests, given back when the
        request is settled; before the body is read, so an upload in flight is a request in
        flight."""
        setattr(self.request.state, RATELIMIT_STATE, await self.ctx.reliability.admit(out.tenant))
        out.admitted(await self.ctx.reliability.take_slot(out.tenant, self.rid))

    async def admit(self, out: Outcome) -> Any:
        """The JSON body, once the tenant is admitted (``take_slot``); who it is for
        (gateway/serving/record/attribution.py)."""
        await self.take_slot(out)
        body = await json_body(self.request)
        out.attributed(attribution(out.tenant.key_user_id, self.request.headers, body))
        return body

    async def plan(self, out: Outcome, chat: ChatRequest, planner: Planner) -> Plan:
        """The plan of a request's chat view over one pool (whatever hot-swaps), kept on
        ``out`` at each step so a refusal is logged with as much of it as was made; its
        routing span."""
        plan = start_plan(self.ctx.pool.current, out.tenant, chat)
        if plan.route is not None:  # a conversation stays where its prompt cache is
            plan = replace(plan, conversation=conversation_key(
                out.tenant.id, out.attribution.session_id, chat.messages))
        plan = out.planned(plan)
        started_ns = time.time_ns()
        plan = out.planned(await planner(self.ctx, plan))
        self.trace.routed(plan, started_ns, self.ctx.encoder.kind)
        return plan


UnitStory = Callable[[Outcome, Request], Awaitable[Response]]


async def serve_unit(request: Request, unit: str, story: UnitStory,
                     by_tokens: bool = False) -> Response:
    """An endpoint that names its backend (embeddings, the unit endpoints): ``story`` told in
    the frame once the tenant is admitted, before its body is read."""
    async with Frame(request, unit=unit, by_tokens=by_tokens) as frame:
        out = await frame.authenticate()
        await frame.take_slot(out)
        return await story(out, request)
    return frame.response()  # a refusal, settled and logged
