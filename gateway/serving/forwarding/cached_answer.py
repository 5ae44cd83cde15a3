"""One request's use of the response cache: its key, its ``cache`` controls, a hit replayed.

The key (LiteLLM's semantics, per tenant and per backend):
  key = HMAC-SHA256(k, tenant ‖ backend ‖ namespace ‖ SHA-256(canonical JSON of messages and
        every forwarded parameter that shapes the answer))
with k the deployment's prompt-key secret (gateway/store/prompt_keys.py), so a stored key
neither leaks a prompt nor can be confirmed against a guess without the secret, one tenant
never reads another's answer, and a key names the backend that answered. Left out of the key:
what does not shape the answer (``user``, ``metadata``, ``store``, ``safety_identifier``,
``prompt_cache_key``) and ``stream``: a streamed request is served from a non-streamed answer
and back. Like LiteLLM, answers are cached whatever the temperature (a repeated sampled
request gets the first sample; ``no-cache`` asks for a fresh one).

Per request, LiteLLM's ``cache`` object (docs.litellm.ai/docs/proxy/caching_controls and
litellm/caching/caching_handler.py): ``no-cache`` true = do not read, ``no-store`` true = do
not write, ``ttl`` = seconds this answer is kept (cut to the operator's ``cache.max_ttl_s``),
``s-maxage`` = accept only answers at most this old, ``namespace`` = a separate key space.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi.responses import JSONResponse, Response
from starlette.background import BackgroundTask

from gateway.context import GatewayContext
from gateway.serving.forwarding.answer import DONE, SettlingStream, sse
from gateway.serving.forwarding.response_cache import ResponseCache
from gateway.serving.request.cache_control import CacheControl

NOT_IN_KEY = frozenset({"user", "metadata", "store", "safety_identifier", "prompt_cache_key"})
INLINE_HASH_BYTES = 16_384  # a larger request is hashed in a worker thread


def _request_digest(messages: list[dict], params: dict[str, Any]) -> bytes:
    shaped = {k: v for k, v in params.items() if k not in NOT_IN_KEY}
    canonical = json.dumps({"messages": messages, "params": shaped}, sort_keys=True,
                           separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).digest()


class RequestCache:
    """The cache as one request sees it (built by ``for_request``)."""

    def __init__(self, cache: ResponseCache, secret: bytes, tenant_id: str, digest: bytes,
                 control: CacheControl) -> None:
        self.cache, self.secret, self.control = cache, secret, control
        self.tenant_id, self.digest = tenant_id, digest
        self.key: str | None = None  # the last key looked up or stored (a response header)
        self.state = "miss"  # "hit" once an answer came from the cache

    @classmethod
    async def for_request(cls, ctx: GatewayContext, tenant_id: str, messages: list[dict],
                          params: dict[str, Any], control: CacheControl) -> RequestCache | None:
        """None when caching is off or the deployment secret is not loaded yet."""
        cache = ctx.response_cache
        secret = None if cache is None else ctx.store.prompt_secret
        if cache is None or secret is None:
            return None
        plain = all(isinstance(m.get("content"), str | None) for m in messages)
        size = sum(len(m.get("content") or "") for m in messages) if plain else 0
        if plain and size <= INLINE_HASH_BYTES and not any(
                isinstance(v, list | dict) for v in params.values()):
            digest = _request_digest(messages, params)
        else:  # CPU work proportional to the request: off the event loop
            digest = await anyio.to_thread.run_sync(_request_digest, messages, params)
        return cls(cache, secret, str(tenant_id), digest, control)

    def key_for(self, backend: str) -> str:
        ns = self.control.namespace or self.cache.settings.namespace or ""
        head = json.dumps([self.tenant_id, backend, ns]).encode()
        return hmac.new(self.secret, b"response-cache\0" + head + b"\0" + self.digest,
                        hashlib.sha256).hexdigest()

    async def lookup(self, backend: str) -> dict[str, Any] | None:
        """``backend``'s stored answer for this request (None: a miss or ``no-cache``)."""
        self.key = self.key_for(backend)
        if self.control.no_cache:
            return None
        entry = await self.cache.get(self.key)
        max_age = self.control.max_age_s
        if entry is not None and max_age is not None and not (
                time.time() - float(entry.get("stored_at") or 0) <= max_age):
            entry = None
        self.cache.counter.labels("hit" if entry is not None else "miss").inc()
        if entry is not None:
            self.state = "hit"
        return entry

    async def store(self, backend: str, body: dict[str, Any]) -> None:
        """Keep ``backend``'s answer (unless ``no-store``) for the request's ttl or the
        configured one, at most the operator's ``max_ttl_s``."""
        if self.control.no_store or self.state == "hit":
            return
        self.key = self.key_for(backend)
        settings = self.cache.settings
        ttl = min(self.control.ttl_s or settings.ttl_s, settings.max_ttl_s)
        if await self.cache.put(self.key, body, ttl):
            self.cache.counter.labels("store").inc()

    def headers(self) -> dict[str, str]:
        h = {"x-tollgate-cache": self.state}
        if self.key is not None:
            h["x-litellm-cache-key"] = self.key  # LiteLLM's header name (a keyed hash here)
        return h


def assembled(events: list[dict[str, Any]], usage: dict[str, Any]) -> dict[str, Any] | None:
    """The chat completion a stream's events add up to (None when they hold no choice)."""
    if not events:
        return None
    choices: dict[int, dict[str, Any]] = {}
    for ev in events:
        for ch in ev.get("choices") or []:
            c = choices.setdefault(int(ch.get("index") or 0), {"role": "assistant",
                                                              "content": None, "calls": {}})
            delta = ch.get("delta") or {}
            if isinstance(delta.get("content"), str):
                c["content"] = (c["content"] or "") + delta["content"]
            for tc in delta.get("tool_calls") or []:
                call = c["calls"].setdefault(int(tc.get("index") or 0), {
                    "id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                call["id"] = tc.get("id") or call["id"]
                fn = tc.get("function") or {}
                call["function"]["name"] += fn.get("name") or ""
                call["function"]["arguments"] += fn.get("arguments") or ""
            if ch.get("finish_reason"):
                c["finish_reason"] = ch["finish_reason"]
    if not choices:
        return None
    out = []
    for i, c in sorted(choices.items()):
        message: dict[str, Any] = {"role": "assistant", "content": c["content"]}
        if c["calls"]:
            message["tool_calls"] = [c["calls"][j] for j in sorted(c["calls"])]
        out.append({"index": i, "message": message, "finish_reason": c.get("finish_reason")
                    or "stop"})
    first = events[0]
    return {"id": first.get("id"), "object": "chat.completion", "created": first.get("created"),
            "model": first.get("model"), "choices": out, "usage": usage}


def replay_events(body: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """A cached completion as the chunks a stream of it would have sent."""
    base = {"id": body.get("id"), "object": "chat.completion.chunk",
            "created": body.get("created"), "model": body.get("model")}
    events = []
    for ch in body.get("choices") or []:
        msg = dict(ch.get("message") or {})
        delta: dict[str, Any] = {"role": msg.get("role") or "assistant"}
        if msg.get("content") is not None:
            delta["content"] = msg["content"]
        if msg.get("tool_calls"):
            delta["tool_calls"] = [{**tc, "index": j} for j, tc in enumerate(msg["tool_calls"])]
        events.append({**base, "choices": [{"index": ch.get("index", 0), "delta": delta}]})
        events.append({**base, "choices": [{"index": ch.get("index", 0), "delta": {},
                                            "finish_reason": ch.get("finish_reason") or "stop"}]})
    if include_usage and body.get("usage"):
        events.append({**base, "choices": [], "usage": body["usage"]})
    return events


def replayed(body: dict[str, Any], stream: bool, include_usage: bool,
             headers: dict[str, str], finish: Any) -> Response:
    """The client's response from a cached body; ``finish(status, error)`` logs it after."""
    if not stream:
        return JSONResponse(body, headers=headers, background=BackgroundTask(finish, 200, None))

    async def events() -> AsyncIterator[bytes]:
        status = 499
        try:
            for ev in replay_events(body, include_usage):
                yield sse(ev)
            yield DONE
            status = 200
        finally:
            with anyio.CancelScope(shield=True):
                await finish(status, None if status == 200 else "client disconnected")

    async def abandoned() -> None:  # the client left before the first byte
        await finish(499, "client disconnected before the stream")

    return SettlingStream(events(), abandoned, media_type="text/event-stream",
                          headers={**headers, "cache-control": "no-cache"})
