"""POST /v1/responses (OpenAI's Responses API): the story of one request, as chat's
(gateway/serving/chat/handler.py) on the request's chat view
(gateway/serving/responses/responses_request.py).

A backend name is a passthrough; a route name (``auto`` ...) is routed from the same
system/user text as chat. The plan, the reservation (N_prompt of everything sent, with
``max_output_tokens`` as the output cap, always sent upstream), fallbacks, circuit breakers,
settlement, rate limits and the log row are chat's. Each attempt is one ``litellm.aresponses``
call (gateway/provider/litellm_transport.py): the provider's own Responses API where litellm has
one (OpenAI's), else litellm's bridge to the backend's chat completions. Non-streamed, the answer
is the provider's response object with ``model`` the backend's name, settled at its usage
before it is sent; streamed, OpenAI's events (``event:`` + ``data:`` lines, no ``[DONE]``),
settled before the terminal ``response.completed`` / ``response.incomplete`` event is sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from gateway.provider.open_stream import OpenStream
from gateway.provider.transport import ProviderRequest
from gateway.serving.delivery import (
    SETTLE,
    Event,
    Failed,
    Text,
    Usage,
    send_body,
    send_stream,
)
from gateway.serving.endpoint import Frame
from gateway.serving.forwarding.answer import Answer
from gateway.serving.forwarding.attempts import Call
from gateway.serving.plan.planning import admissible, record_routing
from gateway.serving.plan.responses_mode import plan_responses
from gateway.serving.record.outcome import answered_name
from gateway.serving.responses.responses_request import ResponsesRequest, parse_responses_request

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


def forward_responses(req: ResponsesRequest, call: Call) -> ProviderRequest:
    """One Responses attempt, with the attempt's output cap as ``max_output_tokens``."""
    params = {**req.params, "input": req.input, "max_output_tokens": call.cap}
    if req.stream:
        params["stream"] = True
    return ProviderRequest("responses", call.backend, params, stream=bool(params.get("stream")))


def responses_answer(reply: Any, model: str) -> Answer:
    """The provider's response object with ``model`` the backend's name."""
    body = _dump(reply)
    body["model"] = model
    return Answer(body, usage_counts(body.get("usage")), output_text(body.get("output")))


@dataclass
class ResponsesRelay:
    """OpenAI's Responses events with ``model`` the backend's name; settled before the
    terminal event is sent."""

    model: str
    seq: int = 0  # the last event's sequence_number: the error event's is the next

    async def events(self, opened: OpenStream) -> AsyncIterator[Event]:
        async for ev in opened.chunks():
            data = _dump(ev)
            kind = str(data.get("type") or "message")
            self.seq = data.get("sequence_number", self.seq)
            if kind in ("response.output_text.delta", "response.function_call_arguments.delta"):
                yield Text(str(data.get("delta") or ""))
            resp = data.get("response")
            if isinstance(resp, dict):
                resp["model"] = self.model
                if kind in TERMINAL:
                    if resp.get("usage"):
                        yield Usage(usage_counts(resp["usage"]))
                    if kind == "response.failed":
                        yield Failed(502, f"response failed: {resp.get('error')}")
                    yield SETTLE
            elif kind == "error":
                yield Failed(502, f"upstream error event: {data.get('message')}")
            yield event(kind, data)
        yield SETTLE

    def broken(self, status: int, error: str) -> bytes:
        return event("error", {"type": "error", "code": "stream_interrupted", "message": error,
                               "param": None, "sequence_number": self.seq + 1})


async def responses_endpoint(request: Request) -> Response:
    """OpenAI's Responses API (``client.responses.create``), top to bottom."""
    async with Frame(request) as frame:  # tracing, timing, errors in OpenAI's shape
        out = await frame.authenticate()  # the tenant; the request's record from here on
        req = parse_responses_request(await frame.admit(out))  # rate limit, slot, body
        plan = await frame.plan(out, req.chat, plan_responses)  # on its chat view: pure
        record_routing(out.ctx, plan)  # what routing decided, counted
        plan = out.planned(admissible(plan))  # the candidates that can take it (400: none)
        plan = await out.reserve_tokens(plan)  # the tenant's tokens per minute
        tried = await out.attempt(plan, partial(forward_responses, req))  # budget per attempt
        model = answered_name(out)
        if req.stream:  # settled before the terminal event, logged when it ends
            return send_stream(out, tried, ResponsesRelay(model))
        return await send_body(out, responses_answer(tried.reply, model))  # settle, send, log
    return frame.response()  # a refusal, settled and logged
