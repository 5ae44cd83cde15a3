"""A streamed text completion (``/v1/completions`` with ``stream: true``) as OpenAI streams it.

The upstream is always asked for its usage (``stream_options.include_usage``: the answer is
settled from it) and its chunks, litellm's ``TextCompletionStreamWrapper`` items, are relayed
by chat's stream relay (``Attempts._relay``, gateway/serving/attempts.py): each chunk one
``data:`` event with the backend's name as ``model``, the usage-only chunk sent only when the
client asked for it, settled before ``data: [DONE]``, closed, counted and logged however the
stream ends. What that relay reads of a chat chunk (a delta's content) a text chunk does not
have, so ``TextCompletionStream`` adds each chunk's text to the answer itself (what is counted
when no usage comes, and what the learning loop reads) and gives every choice OpenAI's fields
(``text``, ``index``, ``logprobs``, ``finish_reason``; litellm leaves out the ``None`` ones).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from gateway.serving.outcome import Outcome
from gateway.serving.upstream import OpenStream

UPSTREAM_STREAM_OPTIONS = {"include_usage": True}  # we settle from the usage chunk


def text_choice(choice: dict) -> dict:
    """One streamed choice in OpenAI's form (every field present, ``None`` as null)."""
    text = choice.get("text")
    return {"text": text if isinstance(text, str) else "", "index": choice.get("index", 0),
            "logprobs": choice.get("logprobs"), "finish_reason": choice.get("finish_reason")}


@dataclass(frozen=True)
class TextChunk:
    """A text completion chunk as chat's relay reads one (``model_dump``)."""

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


@dataclass
class TextCompletionStream:
    """An opened text completion stream read as chat's relay reads an ``OpenStream``."""

    opened: OpenStream
    out: Outcome

    async def chunks(self) -> AsyncIterator[TextChunk]:
        async for chunk in self.opened.chunks():
            converted = text_chunk(chunk)
            self.out.answer_text += "".join(c["text"] for c in converted.body["choices"])
            yield converted

    async def close(self) -> None:
        await self.opened.close()
