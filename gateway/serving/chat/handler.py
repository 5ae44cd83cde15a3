"""POST /v1/chat/completions: the story of one chat request, top to bottom.

``chat_completions`` reads as the request goes: authenticate → admit and parse → plan (pure)
and count what routing decided → the response cache → reserve tokens → forward with attempts
(the budget held per attempt, fallbacks) → send, settle and log. The frame around it (tracing,
timing, errors in OpenAI's shape, settling and logging a request that ends early) is
gateway/serving/endpoint.py's; the attempt loop gateway/serving/forwarding/attempts.py's; sending,
settling and logging an answer gateway/serving/delivery.py's. What is chat's own is here:
how one attempt is forwarded (``forward_chat``) and how its stream is relayed (``ChatRelay``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
from fastapi import Request
from fastapi.responses import Response

from gateway.errors import error_body
from gateway.provider.open_stream import OpenStream
from gateway.provider.transport import ProviderRequest
from gateway.serving.delivery import (
    SETTLE,
    Event,
    Text,
    Usage,
    replay,
    send_body,
    send_stream,
)
from gateway.serving.endpoint import Frame
from gateway.serving.forwarding.answer import DONE, completion_body, sse, stream_chunk
from gateway.serving.forwarding.attempts import Call
from gateway.serving.forwarding.cached_answer import assembled
from gateway.serving.plan.planning import admissible, plan_request, record_routing
from gateway.serving.record.outcome import Outcome, answered_name
from gateway.serving.request.chat_request import ChatRequest, parse_chat_request


async def chat_completions(request: Request) -> Response:
    """The OpenAI chat completions endpoint."""
    async with Frame(request) as frame:  # tracing, timing, errors in OpenAI's shape
        out = await frame.authenticate()  # the tenant; the request's record from here on
        req = parse_chat_request(await frame.admit(out))  # rate limit, parallel slot, body
        plan = await frame.plan(out, req, plan_request)  # route, rank, fallbacks: pure
        record_routing(out.ctx, plan)  # what routing decided, counted
        plan = out.planned(admissible(plan))  # the candidates that can take it (400: none)
        if (cached := await replay(out, plan)) is not None:  # the response cache
            return cached
        plan = await out.reserve_tokens(plan)  # the tenant's tokens per minute
        tried = await out.attempt(plan, partial(forward_chat, req))  # budget held per attempt
        cache = out.cache if tried.cacheable else None
        if req.stream:  # settled before ``data: [DONE]``, logged when it ends
            return send_stream(out, tried, ChatRelay(out, req.include_usage, cache))
        return await send_body(out, completion_body(tried.reply, answered_name(out)), cache)
    return frame.response()  # a refusal, settled and logged


def forward_chat(req: ChatRequest, call: Call) -> ProviderRequest:
    """One chat attempt: the messages with the attempt's params (streamed as asked)."""
    return ProviderRequest("chat", call.backend, {**call.params, "messages": req.messages},
                           stream=req.stream)


@dataclass(frozen=True)
class ChatRelay:
    """Chat's server-sent events: each chunk with the backend's name as ``model``, the
    usage-only chunk only when the client asked for it; settled, and the whole stream stored in
    the response cache, before ``data: [DONE]``."""

    out: Outcome  # read only: the answering backend, the settled token counts
    include_usage: bool
    cache: Any = None  # the response cache (a RequestCache) when the answer may be stored
    chunks: list[dict] = field(default_factory=list)  # the stream's chunks, to store

    async def events(self, opened: OpenStream) -> AsyncIterator[Event]:
        model = answered_name(self.out)
        async for chunk in opened.chunks():
            data, usage, text = stream_chunk(chunk, model, self.include_usage)
            if usage:
                yield Usage(usage)
            if text:
                yield Text(text)
            if data is not None:
                if self.cache is not None:
                    self.chunks.append(chunk.model_dump(exclude_none=True))
                yield sse(data)
        yield SETTLE
        with anyio.CancelScope(shield=True):  # stored before the client has [DONE]
            await self.store(model)
        yield DONE

    async def store(self, model: str) -> None:
        """A whole stream, assembled into the completion it adds up to, into the cache."""
        if self.cache is None:
            return
        usage = {"prompt_tokens": self.out.prompt_tokens or 0,
                 "completion_tokens": self.out.completion_tokens or 0}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        body = assembled(self.chunks, usage)
        if body is not None:
            await self.cache.store(model, {**body, "model": model})

    def broken(self, status: int, error: str) -> bytes:
        return sse(error_body(error, "upstream_error", code="stream_interrupted"))
