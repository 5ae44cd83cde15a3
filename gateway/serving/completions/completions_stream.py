"""A streamed text completion (``/v1/completions`` with ``stream: true``) as OpenAI streams it.

The upstream is always asked for its usage (``stream_options.include_usage``: the answer is
settled from it). Its chunks, litellm's ``TextCompletionStreamWrapper`` items, are relayed as
chat's are (gateway/serving/chat/handler.py ``ChatRelay``; sent, settled, closed and logged by
gateway/serving/delivery.py): each chunk one ``data:`` event with the backend's name as
``model``, the usage-only chunk sent only when the client asked for it, settled before
``data: [DONE]``. A text chunk carries its text in ``choices[].text`` (what is counted when no
usage comes, and what the learning loop reads), and every choice gets OpenAI's fields
(``text``, ``index``, ``logprobs``, ``finish_reason``; litellm leaves out the ``None`` ones).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from gateway.errors import error_body
from gateway.provider.open_stream import OpenStream
from gateway.serving.delivery import SETTLE, Event, Text, Usage
from gateway.serving.forwarding.answer import DONE, sse, stream_chunk

UPSTREAM_STREAM_OPTIONS = {"include_usage": True}  # we settle from the usage chunk


def text_choice(choice: dict) -> dict:
    """One streamed choice in OpenAI's form (every field present, ``None`` as null)."""
    text = choice.get("text")
    return {"text": text if isinstance(text, str) else "", "index": choice.get("index", 0),
            "logprobs": choice.get("logprobs"), "finish_reason": choice.get("finish_reason")}


@dataclass(frozen=True)
class TextChunk:
    """A text completion chunk as chat's chunk reader reads one (``model_dump``)."""

    body: dict

    def model_dump(self, **_: Any) -> dict:
        return {**self.body, "choices": [dict(c) for c in self.body.get("choices", [])]}


def text_chunk(chunk: Any) -> TextChunk:
    """litellm's chunk (or a dict) with OpenAI's text completion fields."""
    body = chunk.model_dump(exclude_none=True) if hasattr(chunk, "model_dump") else dict(chunk)
    body["object"] = "text_completion"
    body["choices"] = [text_choice(c) for c in body.get("choices") or []
                       if isinstance(c, dict)]
    return TextChunk(body)


@dataclass(frozen=True)
class TextRelay:
    """A text completion stream's server-sent events (module docstring)."""

    model: str
    include_usage: bool

    async def events(self, opened: OpenStream) -> AsyncIterator[Event]:
        async for chunk in opened.chunks():
            converted = text_chunk(chunk)
            text = "".join(c["text"] for c in converted.body["choices"])
            if text:
                yield Text(text)
            data, usage, _ = stream_chunk(converted, self.model, self.include_usage)
            if usage:
                yield Usage(usage)
            if data is not None:
                yield sse(data)
        yield SETTLE
        yield DONE

    def broken(self, status: int, error: str) -> bytes:
        return sse(error_body(error, "upstream_error", code="stream_interrupted"))
