"""POST /v1/responses (OpenAI's Responses API): authenticate → admit → parse → plan →
attempts → response, the chat completions flow (the frame of gateway/serving/endpoint.py) on
the request's chat view (gateway/serving/responses_request.py).

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
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import anyio
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.background import BackgroundTask

from gateway.config import Backend
from gateway.context import GatewayContext
from gateway.errors import CLIENT_GONE, model_not_found
from gateway.serving.attempts import Attempts
from gateway.serving.endpoint import planned, serve
from gateway.serving.outcome import Outcome
from gateway.serving.planning import (
    Plan,
    measure,
    plan_request,
    priced,
    with_plan_fallbacks,
)
from gateway.serving.responses_request import ResponsesRequest, parse_responses_request
from gateway.serving.upstream import Billed, OpenStream, classify, responses

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


class ForwardedAttempts(Attempts):
    """Chat's attempt loop (gateway/serving/attempts.py) for an endpoint whose body is
    forwarded as it came (Responses, text completions): each attempt is one litellm call
    (``_call``) with the attempt's output cap, and the first that answers is sent (``_answer``).
    One loop, so the failover, circuit and billing bookkeeping is the same on both."""

    CACHED = False  # the response cache serves chat completions only

    async def _forward(self, b: Backend, params: dict[str, Any], billed: Billed) -> Any:
        return await self._call(b, params["max_tokens"], billed)

    async def _reply(self, b: Backend, reply: Any) -> Response:
        return await self._answer(b, reply)

    async def _send(self, body: dict) -> Response:
        """A complete answer's body, settled before it is sent (as chat's: a client's next
        request must not meet this one's hold) and finished (logged) after."""
        await self.out.settle()
        headers = {**self.out.headers(), "x-tollgate-cost-usd": f"{self.out.cost_usd:.10f}"}
        return JSONResponse(body, headers=headers,
                            background=BackgroundTask(self.out.finish, 200, None))

    async def _call(self, b: Backend, cap: int, billed: Billed) -> Any:
        """One attempt on ``b`` with output cap ``cap``: its reply, or UpstreamFailure."""
        raise NotImplementedError

    async def _answer(self, b: Backend, reply: Any) -> Response:
        """The client's response from ``b``'s reply."""
        raise NotImplementedError


class ResponsesAttempts(ForwardedAttempts):
    """The attempts of a Responses request, each a ``litellm.aresponses`` call."""

    def __init__(self, outcome: Outcome, plan: Plan, req: ResponsesRequest) -> None:
        super().__init__(outcome, plan)
        self.req = req

    async def _call(self, b: Backend, cap: int, billed: Billed) -> Any:
        call = {**self.req.params, "input": self.req.input, "max_output_tokens": cap}
        if self.req.stream:
            call["stream"] = True
        return await responses(b, call, billed=billed, answered=self._answered)

    async def _answer(self, b: Backend, reply: Any) -> Response:
        if self.req.stream:
            return self._stream(b, reply)
        return await self._complete(b, reply)

    async def _complete(self, b: Backend, resp: Any) -> Response:
        body = _dump(resp)
        body["model"] = b.model_name
        self.out.answer_text = output_text(body.get("output"))
        self.out.take_usage(usage_counts(body.get("usage")))
        return await self._send(body)

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
            self.ctx.reliability.upstream_result(b.model_name, f, self.out.tenant.principal)
            status = 504 if f.kind == "timeout" else 502
            error = f"stream broken after first byte: {f}"
            self.out.attempts[-1]["error"] = error
            yield event("error", {"type": "error", "code": "stream_interrupted",
                                  "message": error, "param": None, "sequence_number": seq + 1})
        except BaseException:  # client went away (cancellation): settle what was streamed
            status, error = 499, CLIENT_GONE
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


async def answer_responses(out: Outcome, body: Any) -> Response:
    """A Responses body, planned on its chat view and attempted through the Responses API."""
    req = parse_responses_request(body)
    plan = await planned(out, req.chat, plan_responses)
    return await ResponsesAttempts(out, plan, req).respond()


async def responses_endpoint(request: Request) -> Response:
    """OpenAI's Responses API (``client.responses.create``)."""
    return await serve(request, answer_responses)
