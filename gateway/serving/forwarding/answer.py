"""An upstream answer as the client receives it: a JSON body, or server-sent events.

Both carry the backend's config name as ``model`` and drop litellm's
``provider_specific_fields``; each also yields the usage and the answer's text, which the
outcome settles from and hands to the learning loop (a complete one as a frozen ``Answer``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.responses import StreamingResponse

DONE = b"data: [DONE]\n\n"


def sse(data: Any) -> bytes:
    """One server-sent event carrying ``data`` (a JSON string, or an object to encode)."""
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


@dataclass(frozen=True)
class Answer:
    """A complete answer as the client receives it, with what it is settled from."""

    body: dict  # the client's body
    usage: dict  # as the upstream reported it (unclamped)
    text: str  # what the learning loop reads, and what is counted without usage


def completion_body(resp: Any, model: str) -> Answer:
    """A non-streamed chat answer: its text is the first choice's."""
    body = resp.model_dump(exclude_none=True)
    body["model"] = model
    choices = body.get("choices") or [{}]
    text = str((choices[0].get("message") or {}).get("content") or "")
    for ch in body.get("choices", []):
        (ch.get("message") or {}).pop("provider_specific_fields", None)
    return Answer(body, body.get("usage") or {}, text)


def stream_chunk(chunk: Any, model: str, include_usage: bool) -> tuple[str | None, dict, str]:
    """(the event data or None, the chunk's usage, the text it adds) of one streamed chunk.

    The usage-only chunk is sent only when the client asked for it (``include_usage``).
    """
    obj = chunk.model_dump(exclude_none=True)
    obj["model"] = model
    usage = obj.pop("usage", None) or {}
    text = ""
    for ch in obj.get("choices", []):
        delta = ch.get("delta") or {}
        delta.pop("provider_specific_fields", None)
        if isinstance(delta.get("content"), str):
            text += delta["content"]
        for tc in delta.get("tool_calls") or []:
            text += json.dumps(tc.get("function") or {})
    if usage and include_usage:
        obj["usage"] = usage
    elif not obj.get("choices"):
        return None, usage, text
    return json.dumps(obj), usage, text


class SettlingStream(StreamingResponse):
    """A StreamingResponse that closes its body generator and runs ``on_close`` however it
    ends. Starlette leaves a generator the client abandoned suspended (its ``finally``, which
    closes the upstream stream and settles, would wait for garbage collection); ``aclose``
    runs it now. ``on_close`` covers a client that left before the generator ever started
    (then its ``finally`` never runs)."""

    def __init__(self, content: Any, on_close: Callable[[], Awaitable[None]],
                 **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._on_close = on_close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                aclose = getattr(self.body_iterator, "aclose", None)
                if aclose is not None:
                    await aclose()
                await self._on_close()
