"""Wire helpers the fake upstream's handlers share (``upstream_handler.py`` for chat and
embeddings, ``upstream_responses.py`` for Responses and text completions,
``upstream_messages.py`` for Anthropic's Messages): JSON replies, the opening of an event
stream, a message's text, the reply cut to its cap, and the word-count token tally. Imports nothing of the sandbox,
so both handler modules sit above it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any


@dataclass(frozen=True)
class StreamEnd:
    """How one streamed answer ended: ``how`` is "done", "peer_closed" (the caller closed
    the connection mid-stream), "stalled", "malformed" or "ended_early" (a clean end half
    way, no final usage); ``chunks`` words were sent."""

    model: str
    chunks: int
    how: str


def word_count(text: str) -> int:
    """The default token count: words."""
    return len(text.split())


def text_of(content: Any) -> str:
    """A message's text: its string, or its parts' (blocks') texts joined by spaces."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def capped_words(text: str, cap: Any) -> tuple[list[str], bool]:
    """The reply's words, cut to the body's output cap when it is an integer, and whether
    they were cut."""
    words = text.split()
    cut = isinstance(cap, int) and cap < len(words)
    return (words[:cap] if cut else words), cut


def count_prompt_tokens(body: dict, count: Callable[[str], int] | None = None) -> int:
    """Tokens of every message's text (default: words), plus one per tool."""
    count = count or word_count
    n = 0
    for m in body.get("messages", []):
        content = m.get("content")
        if isinstance(content, str):
            n += count(content)
        elif isinstance(content, list):
            n += sum(count(str(p.get("text", ""))) for p in content if isinstance(p, dict))
    n += len(body.get("tools") or [])
    return max(n, 1)


def send_json(handler: BaseHTTPRequestHandler, status: int, obj: Any) -> None:
    """One JSON response with its length (the connection stays open for the next request)."""
    send_bytes(handler, status, json.dumps(obj).encode())


def send_bytes(handler: BaseHTTPRequestHandler, status: int, data: bytes) -> None:
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def open_event_stream(handler: BaseHTTPRequestHandler) -> None:
    """The headers of a server-sent event stream; the connection closes when it ends."""
    handler.send_response(200)
    handler.send_header("content-type", "text/event-stream")
    handler.send_header("cache-control", "no-cache")
    handler.send_header("connection", "close")
    handler.end_headers()
    handler.close_connection = True
