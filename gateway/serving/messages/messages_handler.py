"""POST /v1/messages (Anthropic's Messages API): the story of one request, as chat's
(gateway/serving/chat/handler.py) on the request's chat view
(gateway/serving/messages/messages_request.py), answered and refused in Anthropic's shapes
(gateway/serving/request/anthropic_errors.py).

A backend name is a passthrough; a route name (``auto`` ...) is routed from the same
system/user text as chat. The plan, the reservation (N_prompt of everything sent plus
``max_tokens`` × the output price, ``max_tokens`` always sent upstream), fallbacks, circuit
breakers, settlement, rate limits and the log row are chat's. Each attempt is one
``litellm.anthropic_messages`` call (gateway/provider/litellm_transport.py): Anthropic's own API
for an Anthropic-wire backend, else litellm's bridge (to the Responses API for OpenAI's, to chat
completions for the others). Non-streamed, the answer is the message with ``model`` the
backend's name, settled at its usage before it is sent; streamed, Anthropic's events, settled
at the usage they carry before ``message_stop`` is sent.

Usage: the prompt is ``input_tokens`` + the cached input (Anthropic's ``input_tokens`` leaves
it out), each cached token counted at its own price as a share of the input price: a cache
write (``cache_creation_input_tokens``; its 1-hour part at the 1-hour price) and a cache read
(``cache_read_input_tokens``) at ``cache_creation_input_token_cost`` /
``cache_read_input_token_cost`` (``..._above_1hr``) of the backend's model_info, else of
litellm's map (Anthropic: writes 1.25x, 1-hour writes 2x, reads 0.1x the input price,
https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching#pricing), at the input
price where neither says. So the log row's ``prompt_tokens`` are input-price equivalents and
the charge is what the provider bills, still within the reservation (whose byte bound is
far above 1.25x the tokens). The output is ``output_tokens`` (a stream's last
``message_delta`` count is cumulative).
"""

from __future__ import annotations

import codecs
import functools
import json
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from gateway.config import Backend
from gateway.config.model_map import map_entry
from gateway.provider import litellm_maps
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
from gateway.serving.messages.messages_request import MessagesRequest, parse_messages_request
from gateway.serving.plan.planning import admissible, record_routing
from gateway.serving.plan.responses_mode import plan_responses
from gateway.serving.request.anthropic_errors import anthropic_error, anthropic_error_event

WRITE, READ, WRITE_1H = ("cache_creation_input_tokens", "cache_read_input_tokens",
                         "ephemeral_1h_input_tokens")
CACHE_PRICES = {WRITE: "cache_creation_input_token_cost", READ: "cache_read_input_token_cost",
                WRITE_1H: "cache_creation_input_token_cost_above_1hr"}


def cache_ratios(backend: Backend) -> dict[str, float]:
    """Each cached-input count's price over the input price (module docstring): the config's
    pair when it gives the cache price, else litellm's map's pair (a 0 there is no price); 1
    where neither does."""
    own, own_in = backend.model_info.model_extra or {}, backend.input_cost_per_token
    mapped = map_entry(backend.model_info, backend.litellm_params)
    pairs = ((own, own_in, 0.0), (mapped, mapped.get("input_cost_per_token"), None))
    ratios = {}
    for count, price in CACHE_PRICES.items():
        ratios[count] = next((float(table[price]) / float(p_in) for table, p_in, floor in pairs
                              if isinstance(table.get(price), (int, float))
                              and (table[price] > 0 or table[price] == floor)
                              and isinstance(p_in, (int, float)) and p_in > 0), 1.0)
    return ratios


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def usage_counts(usage: Any, ratios: dict[str, float]) -> dict:
    """{prompt_tokens, completion_tokens} of an Anthropic usage (module docstring)."""
    if not isinstance(usage, dict):
        return {}
    detail = usage.get("cache_creation")
    hour = _count(detail.get(WRITE_1H)) if isinstance(detail, dict) else 0
    write = max(0, _count(usage.get(WRITE)) - hour)
    cached = (write * ratios.get(WRITE, 1.0) + hour * ratios.get(WRITE_1H, 1.0)
              + _count(usage.get(READ)) * ratios.get(READ, 1.0))
    prompt = _count(usage.get("input_tokens")) + math.ceil(cached)
    return {"prompt_tokens": prompt if usage.get("input_tokens") is not None else None,
            "completion_tokens": usage.get("output_tokens")}


def content_text(blocks: Any) -> str:
    """The text a message's content blocks carry: text, thinking and tool inputs (JSON)."""
    out = []
    for b in blocks if isinstance(blocks, list) else ():
        if not isinstance(b, dict):
            continue
        if isinstance(b.get("text"), str):
            out.append(b["text"])
        elif isinstance(b.get("thinking"), str):
            out.append(b["thinking"])
        elif "input" in b:
            out.append(json.dumps(b["input"]))
    return "".join(out)


def delta_text(delta: Any) -> str:
    """The text one ``content_block_delta`` adds."""
    if not isinstance(delta, dict):
        return ""
    for key in ("text", "thinking", "partial_json"):
        if isinstance(delta.get(key), str):
            return delta[key]
    return ""


class SSEFrames:
    """Anthropic's event stream as (event, data) frames, whatever the chunks: litellm relays
    a native stream's bytes as the socket gave them, so a frame may be split across chunks
    (or a chunk hold several); a bridged stream yields whole frames, or event objects."""

    def __init__(self) -> None:
        self._buffer = ""
        self._utf8 = codecs.getincrementaldecoder("utf-8")()  # a character split, too

    def feed(self, chunk: Any) -> list[tuple[str, dict]]:
        """The frames completed by ``chunk`` (the rest is kept for the next)."""
        if isinstance(chunk, dict):
            return [(str(chunk.get("type") or "message"), chunk)]
        text = self._utf8.decode(chunk) if isinstance(chunk, (bytes, bytearray)) else str(chunk)
        self._buffer += text.replace("\r\n", "\n")
        *blocks, self._buffer = self._buffer.split("\n\n")
        return [f for f in map(self._parse, blocks) if f is not None]

    def end(self) -> list[tuple[str, dict]]:
        """A last frame the stream did not end with a blank line."""
        block, self._buffer = self._buffer + self._utf8.decode(b"", final=True), ""
        parsed = self._parse(block)
        return [parsed] if parsed is not None else []

    @staticmethod
    def _parse(block: str) -> tuple[str, dict] | None:
        data = "".join(line[5:].strip() for line in block.splitlines()
                       if line.startswith("data:"))
        if not data:
            return None
        parsed = json.loads(data)
        return str(parsed.get("type") or "message"), parsed


def frame(kind: str, data: dict) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()


# Providers litellm sends Anthropic's Messages to natively (Anthropic's API, Claude on Bedrock,
# Vertex AI and Azure AI Foundry): they get the client's anthropic-* headers and
# context_management; litellm keeps on Bedrock and Vertex the betas each supports.
ANTHROPIC_WIRE = frozenset({"anthropic", "bedrock", "vertex_ai", "vertex_ai_beta", "azure_ai"})
# Request headers Claude Code's gateway protocol says to forward unchanged
# (https://code.claude.com/docs/en/llm-gateway-protocol: "anthropic-beta and anthropic-version")
FORWARDED_HEADERS = ("anthropic-version", "anthropic-beta")


def anthropic_headers(request: Request) -> dict[str, str]:
    """The client's ``FORWARDED_HEADERS``, as sent (a repeated header joined with commas)."""
    out = {}
    for name in FORWARDED_HEADERS:
        values = request.headers.getlist(name)
        if values:
            out[name] = ",".join(values)
    return out


def anthropic_wire(backend: Backend) -> bool:
    """Whether litellm calls ``backend``'s provider on Anthropic's Messages wire."""
    return _anthropic_wire_model(backend.litellm_model)


@functools.lru_cache(maxsize=1024)
def _anthropic_wire_model(model: str) -> bool:
    """Cached: a pure function of the model, and litellm's look-up costs CPU per attempt."""
    try:
        provider = litellm_maps.llm_provider(model)
    except Exception:  # noqa: BLE001 - a model litellm cannot place: not Anthropic's wire
        return False
    return provider in ANTHROPIC_WIRE


def forward_messages(req: MessagesRequest, headers: dict[str, str],
                     call: Call) -> ProviderRequest:
    """One Messages attempt, with the attempt's output cap as ``max_tokens``: Anthropic's own
    API for an Anthropic-wire provider, with the client's anthropic-* ``headers`` and its
    ``context_management``; else litellm's bridge to the Responses API or chat (which know
    neither: a clearing edit left out only sends more input, which the hold already covers)."""
    params = {**req.params, "messages": req.messages, "max_tokens": call.cap}
    if anthropic_wire(call.backend):
        if headers:
            params["extra_headers"] = dict(headers)
    else:
        params.pop("context_management", None)
    if req.stream:
        params["stream"] = True
    return ProviderRequest("anthropic_messages", call.backend, params,
                           stream=bool(params.get("stream")))


def messages_answer(reply: Any, b: Backend) -> Answer:
    """The message with ``model`` the backend's name, its usage as module docstring says."""
    body = dict(reply) if isinstance(reply, dict) else reply.model_dump(mode="json")
    body["model"] = b.model_name
    return Answer(body, usage_counts(body.get("usage"), cache_ratios(b)),
                  content_text(body.get("content")))


@dataclass
class MessagesRelay:
    """Anthropic's events with ``model`` the backend's name; settled before ``message_stop``.

    ``message_start``'s ``output_tokens`` is a placeholder (Anthropic sends 1, a bridge 0):
    the output count is believed only from a ``message_delta``, which carries the cumulative
    count. A stream that ends before one (the client gone, the upstream ending cleanly
    mid-way) settles its output from the text relayed (``Outcome.settle`` counts it), so it
    pays for what the provider generated, not for one token."""

    backend: Backend
    prompt_tokens: int | None = None  # the plan's count of the prompt (for a bridged start)
    usage: dict[str, Any] = field(default_factory=dict)  # each count the largest seen
    output_known: bool = False  # a message_delta reported the output count

    async def events(self, opened: OpenStream) -> AsyncIterator[Event]:
        async for kind, data in frames(opened):
            if kind == "message_start" and isinstance(data.get("message"), dict):
                data["message"]["model"] = self.backend.model_name
                if self.took(data["message"].get("usage")):
                    yield self.counts()
                self.fill_input(data["message"])
            elif kind == "content_block_delta":
                yield Text(delta_text(data.get("delta")))
            elif kind == "message_delta":
                delta_usage = data.get("usage")
                if isinstance(delta_usage, dict) and "output_tokens" in delta_usage:
                    self.output_known = True
                if self.took(delta_usage):
                    yield self.counts()
            elif kind == "message_stop":
                yield SETTLE
            elif kind == "error":
                yield Failed(502, f"upstream error event: {data.get('error')}")
            yield frame(kind, data)
        yield SETTLE

    def fill_input(self, message: dict) -> None:
        """A bridged backend's ``message_start`` says ``input_tokens: 0`` (its provider
        reports usage at the end): the client is told the plan's count instead, as Anthropic's
        own start carries it. Only the event is changed: the bill takes reported counts."""
        usage = message.get("usage")
        if not isinstance(usage, dict):
            usage = message["usage"] = {}
        if not usage.get("input_tokens") and self.prompt_tokens:
            usage["input_tokens"] = self.prompt_tokens

    def took(self, usage: Any) -> bool:
        """A streamed usage (message_start, message_delta) taken: each count the largest
        seen; whether there is any."""
        for k, v in (usage or {}).items() if isinstance(usage, dict) else ():
            if isinstance(v, int) and not isinstance(v, bool):
                self.usage[k] = max(v, self.usage.get(k, 0))
            elif k == "cache_creation" and isinstance(v, dict):
                self.usage[k] = v
        return bool(self.usage)

    def counts(self) -> Usage:
        """The usage so far; the output count left out (counted from the text at settling)
        until a ``message_delta`` reports it (class docstring)."""
        counts = usage_counts(self.usage, cache_ratios(self.backend))
        if not self.output_known:
            counts["completion_tokens"] = None
        return Usage(counts)

    def broken(self, status: int, error: str) -> bytes:
        return anthropic_error_event(status, error)


async def frames(opened: OpenStream) -> AsyncIterator[tuple[str, dict]]:
    """The stream's (event, data) frames (``SSEFrames``)."""
    sse = SSEFrames()
    async for chunk in opened.chunks():
        for f in sse.feed(chunk):
            yield f
    for f in sse.end():
        yield f


async def messages_endpoint(request: Request) -> Response:
    """Anthropic's Messages API (``anthropic.Anthropic(base_url=...).messages.create``), top to
    bottom; refusals in Anthropic's error shape."""
    async with Frame(request, anthropic_error) as frame:  # tracing, timing, errors
        out = await frame.authenticate()  # the tenant; the request's record from here on
        req = parse_messages_request(await frame.admit(out))  # rate limit, slot, body
        plan = await frame.plan(out, req.chat, plan_responses)  # on its chat view: pure
        record_routing(out.ctx, plan)  # what routing decided, counted
        plan = out.planned(admissible(plan))  # the candidates that can take it (400: none)
        plan = await out.reserve_tokens(plan)  # the tenant's tokens per minute
        tried = await out.attempt(plan, partial(forward_messages, req,
                                                anthropic_headers(request)))  # budget per attempt
        assert tried.answered is not None
        if req.stream:  # settled before ``message_stop``, logged when it ends
            return send_stream(out, tried, MessagesRelay(tried.answered, out.prompt_tokens))
        return await send_body(out, messages_answer(tried.reply, tried.answered))
    return frame.response()  # a refusal, settled and logged
