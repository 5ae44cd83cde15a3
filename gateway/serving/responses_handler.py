"""POST /v1/responses (OpenAI's Responses API): authenticate → admit → parse → plan →
attempts → response, the chat completions flow (gateway/serving/handler.py) on the request's
chat view (gateway/serving/responses_request.py).

A backend name is a passthrough; a route name (``auto`` ...) is routed from the same
system/user text as chat. The plan, the reservation (N_prompt of everything sent, with
``max_output_tokens`` as the output cap, always sent upstream), fallbacks, circuit breakers,
settlement, rate limits and the log row are chat's. Each attempt is one ``litellm.aresponses``
call (gateway/serving/upstream.py): the provider's own Responses API where litellm has one
(OpenAI's), else litellm's bridge to the backend's chat completions. Non-streamed, the answer
is the provider's response object with ``model`` the backend's name, settled at its usage
before it is sent; streamed, OpenAI's events (``event:`` + ``data:`` lines, no ``[DONE]``),
settled before the terminal ``response.completed`` / ``response.incomplete`` event is sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import anyio
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.background import BackgroundTask

from gateway.auth import authenticate
from gateway.config import Backend
from gateway.context import GatewayContext
from gateway.errors import GatewayError, model_not_found
from gateway.serving.access_log import log_access
from gateway.serving.attempts import Attempts
from gateway.serving.handler import new_request_id
from gateway.serving.outcome import Outcome
from gateway.serving.planning import (
    Plan,
    admissible,
    measure,
    plan_request,
    priced,
    start_plan,
    with_plan_fallbacks,
)
from gateway.serving.response_headers import RATELIMIT_STATE
from gateway.serving.responses_request import ResponsesRequest, parse_responses_request
from gateway.serving.upstream import OpenStream, UpstreamFailure, classify, responses
from gateway.serving.validation import json_body

RESPONSES_MODE = "responses"  # litellm's mode of a model served by the Responses API only
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def usage_counts(usage: Any) -> dict:
    """{prompt_tokens, completion_tokens} of a Responses usage (or a bridged chat usage)."""
    if hasattr(usage, "model_dump"):
        usage = usage.model_dump()
    if not isinstance(usage, dict):
        return {}
    return {"prompt_tokens": usage.get("input_tokens", usage.get("prompt_tokens")),
            "completion_tokens": usage.get("output_tokens", usage.get("completion_tokens"))}


def output_text(output: Any) -> str:
    """The text of a response's output items (messages' text, function calls' arguments)."""
    text = []
    for item in output if isinstance(output, list) else ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            text += [str(p.get("text") or "") for p in item.get("content") or []
                     if isinstance(p, dict)]
        elif isinstance(item.get("arguments"), str):
            text.append(item["arguments"])
    return "".join(text)


def _dump(obj: Any) -> dict:
    if isinstance(obj, dict):
        return obj
    return obj.model_dump(mode="json", warnings=False)


def event(kind: str, data: dict) -> bytes:
    """One server-sent event as OpenAI sends Responses events."""
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()


class ResponsesAttempts(Attempts):
    """Chat's attempt loop (gateway/serving/attempts.py) calling the Responses API."""

    def __init__(self, outcome: Outcome, plan: Plan, req: ResponsesRequest) -> None:
        super().__init__(outcome, plan)
        self.req = req

    async def respond(self) -> Response:
        plan, req = self.plan, self.req
        last: UpstreamFailure | None = None
        async for b, params in self._attempts(plan):
            call = {**req.params, "input": req.input, "max_output_tokens": params["max_tokens"]}
            if req.stream:
                call["stream"] = True
            started = time.perf_counter()
            try:
                reply = await responses(b, call, billed=self._billed(b, plan),
                                        answered=self._deployment)
            except UpstreamFailure as f:
                last = f
                self._upstream_result(b, f, started)
                if not f.retryable:
                    break
                continue
            self._upstream_result(b, None, started)
            self.out.answered = b
            if req.stream:
                return self._stream(b, reply)
            return await self._complete(b, reply)
        raise self._final_error(last)

    def _deployment(self, index: int) -> None:
        """Which deployment of the answering group answered (its price is settled)."""
        self.out.deployment = index

    async def _complete(self, b: Backend, resp: Any) -> Response:
        body = _dump(resp)
        body["model"] = b.model_name
        self.out.answer_text = output_text(body.get("output"))
        self.out.take_usage(usage_counts(body.get("usage")))
        await self.out.settle()  # before the body is sent, as chat
        headers = {**self.out.headers(), "x-tollgate-cost-usd": f"{self.out.cost_usd:.10f}"}
        return JSONResponse(body, headers=headers,
                            background=BackgroundTask(self.out.finish, 200, None))

    async def _relay(self, b: Backend, opened: OpenStream) -> AsyncIterator[bytes]:
        """OpenAI's events to the client; settles and logs whatever way the stream ends."""
        status, error, seq = 200, None, 0
        try:
            async for ev in opened.chunks():
                data = _dump(ev)
                kind = str(data.get("type") or "message")
                seq = data.get("sequence_number", seq)
                if kind in ("response.output_text.delta",
                            "response.function_call_arguments.delta"):
                    self.out.answer_text += str(data.get("delta") or "")
                resp = data.get("response")
                if isinstance(resp, dict):
                    resp["model"] = b.model_name
                    if kind in TERMINAL:
                        if resp.get("usage"):
                            self.out.take_usage(usage_counts(resp["usage"]))
                        if kind == "response.failed":
                            status, error = 502, f"response failed: {resp.get('error')}"
                        with anyio.CancelScope(shield=True):  # settled before the client has it
                            await self._count_streamed(b)
                            await self.out.settle()
                elif kind == "error":
                    status, error = 502, f"upstream error event: {data.get('message')}"
                yield event(kind, data)
            with anyio.CancelScope(shield=True):
                await self._count_streamed(b)
                await self.out.settle()
        except Exception as e:  # noqa: BLE001 - mid-stream failure: the client already has bytes
            f = classify(e)
            self.ctx.reliability.upstream_result(b.model_name, f)
            status = 504 if f.kind == "timeout" else 502
            error = f"stream broken after first byte: {f}"
            self.out.attempts[-1]["error"] = error
            yield event("error", {"type": "error", "code": "stream_interrupted",
                                  "message": error, "param": None, "sequence_number": seq + 1})
        except BaseException:  # client went away (cancellation): settle what was streamed
            status, error = 499, "client disconnected"
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await opened.close()
                await self._count_streamed(b)
                await self.out.finish(status, error)


def named_backend(plan: Plan) -> Backend:
    """The backend ``model`` names, if the tenant policy allows it (404 otherwise), by its
    name or (a model a wildcard backend matched) the wildcard's, as chat's passthrough, whatever
    its mode (the caller checks that)."""
    model, allowed = plan.request.model, plan.policy.allowed_models
    backend = plan.pool.backend(model)
    wildcard = getattr(backend, "wildcard", None)
    if backend is None or getattr(backend, "is_wildcard", False) or (
            allowed is not None and model not in allowed
            and (wildcard is None or wildcard not in allowed)):
        raise model_not_found(model)
    return backend


async def plan_responses(ctx: GatewayContext, plan: Plan) -> Plan:
    """Chat's planning, except that a backend of litellm's ``responses`` mode (served by the
    Responses API only) may be named as a passthrough too."""
    if plan.route is not None or plan.pool.modes.get(plan.request.model) != RESPONSES_MODE:
        return await plan_request(ctx, plan)
    backend = priced(plan, named_backend(plan))
    n_prompt, size = await measure(plan.request, backend)
    return with_plan_fallbacks(replace(plan, candidates=(backend.model_name,),
                                       prompt_tokens=n_prompt, prompt_size=size))


async def responses_endpoint(request: Request) -> Response:
    """OpenAI's Responses API (``client.responses.create``)."""
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
    out.hold.client_gone = request.is_disconnected
    try:
        setattr(request.state, RATELIMIT_STATE, await ctx.reliability.admit(tenant))
        req = parse_responses_request(await json_body(request))
        out.plan = start_plan(ctx.pool.current, tenant, req.chat)
        out.plan = await plan_responses(ctx, out.plan)
        out.plan = admissible(out.plan)
        return await ResponsesAttempts(out, out.plan, req).respond()
    except GatewayError as e:
        await out.finish(e.status, e.message)
        return e.response(out.headers())
    except BaseException as e:  # cancelled or a bug: still release the money and log
        with anyio.CancelScope(shield=True):
            cancelled = isinstance(e, anyio.get_cancelled_exc_class())
            await out.finish(499 if cancelled else 500,
                            "cancelled" if cancelled else f"internal error: {type(e).__name__}")
        raise
