"""A small real OpenAI-compatible HTTP server: several local backends, each with its own
reply, prices and failure mode. Tests start it as their upstream (``tests.fakes.upstream``
re-exports it), and ``tollgate demo`` serves recorded benchmark answers with it.
This file holds the backends, their failure modes and the server object; the request
handler that answers on the wire is in ``upstream_handler.py``.

Why hand-written on ``http.server``: the failure modes need control of the raw socket (a TCP
reset, a stream that stops half way, bytes that are not JSON), which an ASGI framework hides.

Backends are selected by the ``model`` field of the request (litellm strips the ``openai/``
prefix, so a gateway backend with ``litellm_params.model: openai/fake-cheap`` reaches the
backend ``fake-cheap``). Usage is deterministic so tests can compute the expected cost: by
default ``prompt_tokens`` = whitespace-separated words over all message contents (plus the
tool names, plus the backend's ``image_tokens`` per image part), ``completion_tokens`` = words
of the reply (or 8 for a tool call); pass ``count_tokens`` to count with a real tokenizer, or
a harsher one (one token per UTF-8 byte: the most any byte-level tokenizer can count).

Example::

    with FakeUpstream([FakeBackend("fake-cheap", reply="hi there")]) as up:
        up.base_url                       # http://127.0.0.1:PORT/v1
        up.set_mode("fake-cheap", "error_500", times=1)   # the next request fails
        up.requests                       # every request body received, in order
        up.streams                        # how each stream ended: StreamEnd(model, chunks, how)

A stream that waits (``chunk_delay_s`` between words, or a stall) watches its socket, so
``StreamEnd.how == "peer_closed"`` says the caller closed the connection mid-stream.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any, Self

from gateway.sandbox.upstream_handler import StreamEnd, make_upstream_handler
from gateway.sandbox.upstream_wire import count_prompt_tokens, send_json

__all__ = [
    "MODES",
    "FakeBackend",
    "FakeUpstream",
    "StreamEnd",
    "count_prompt_tokens",
    "send_json",
]

MODES = (
    "ok",
    "error_500",  # HTTP 500 with an OpenAI error body
    "error_429",  # HTTP 429 rate limited
    "error_400",  # HTTP 400: the upstream refuses the request itself (not worth a fallback)
    "hang",  # accept, then send nothing until ``hang_s`` passes (past any sane timeout)
    "reset",  # close the TCP connection with RST before any response byte
    "stall_mid_stream",  # streams: half the content, then nothing; non-streams: like "hang"
    "malformed_json",  # HTTP 200 with a body that is not JSON (streams: a broken data line)
    "no_usage",  # streams: no usage chunk, whatever stream_options asks (some servers do not)
    "end_mid_stream",  # /v1/messages streams: half the content, then a clean end, no usage
)

Reply = str | Callable[[dict], str]


@dataclass
class FakeBackend:
    """One upstream model.

    Attributes:
        name: the model name requests carry.
        reply: fixed text, or a function of the request body returning the text.
        input_per_m / output_per_m: USD per 1M tokens, for :meth:`FakeUpstream.model_entry`.
        mode: one of ``MODES``; ``times`` limits it to the next N requests (then "ok").
        tool_arguments: the JSON arguments of the tool call made when the request has tools
            and ``tool_choice`` is not "none".
        delay_s: added before answering (to make a slow but healthy backend).
        hang_s: how long "hang" and "stall_mid_stream" wait before giving up.
        image_tokens: prompt tokens billed per image part (a provider's image tokens).
        image_output_tokens: /v1/images/generations: output image tokens per image, reported
            in a gpt-image ``usage`` (0: no usage in the reply, as dall-e answers).
        chunk_delay_s: streams: the wait between two words (a slow, long stream).
        split_frames: Anthropic streams (/v1/messages): each event sent in two writes split
            inside its bytes (as a socket may deliver them; mid-character for non-ASCII).
    """

    name: str
    reply: Reply = "Hello from the fake upstream."
    input_per_m: float = 1.0
    output_per_m: float = 2.0
    mode: str = "ok"
    times: int | None = None
    tool_arguments: dict = field(default_factory=lambda: {"city": "Paris"})
    delay_s: float = 0.0
    hang_s: float = 30.0
    image_tokens: int = 0
    image_output_tokens: int = 0
    # embeddings as providers miscount them: special tokens added per input (BGE-style
    # models count [CLS]/[SEP] and more), or a usage figure reported whatever the input
    framing_tokens: int = 0
    reported_tokens: int | None = None
    file_tokens: int = 0  # chat: prompt tokens billed per file part (a document read by id)
    chunk_delay_s: float = 0.0
    split_frames: bool = False
    calls: int = 0

    def text_for(self, body: dict) -> str:
        text = self.reply(body) if callable(self.reply) else self.reply
        fmt = body.get("response_format") or {}
        if fmt.get("type") in ("json_object", "json_schema"):
            return json.dumps({"answer": text})
        return text



class FakeUpstream:
    """Runs the backends on 127.0.0.1 in a daemon thread; a context manager."""

    def __init__(
        self,
        backends: list[FakeBackend],
        host: str = "127.0.0.1",
        port: int = 0,
        count_tokens: Callable[[str], int] | None = None,
    ) -> None:
        self.backends = {b.name: b for b in backends}
        self.count_tokens = count_tokens
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.streams: list[StreamEnd] = []
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self._server = ThreadingHTTPServer((host, port), make_upstream_handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # lifecycle -------------------------------------------------------------------------
    def start(self) -> FakeUpstream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # control ---------------------------------------------------------------------------
    def set_mode(self, name: str, mode: str, times: int | None = None) -> None:
        """Make backend ``name`` behave as ``mode`` (for the next ``times`` requests)."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; one of {MODES}")
        with self._lock:
            b = self.backends[name]
            b.mode, b.times = mode, times

    def reset(self) -> None:
        """Every backend back to "ok", request log emptied."""
        with self._lock:
            for b in self.backends.values():
                b.mode, b.times, b.calls = "ok", None, 0
            self.requests.clear()
            self.headers.clear()
            self.streams.clear()

    def requests_for(self, name: str) -> list[dict]:
        with self._lock:
            return [r for r in self.requests if r.get("model") == name]

    def model_entry(self, name: str, *, model_name: str | None = None, **model_info: Any) -> dict:
        """A LiteLLM ``model_list`` entry that points a gateway backend at this backend."""
        b = self.backends[name]
        info = {"input_cost_per_million": b.input_per_m, "output_cost_per_million": b.output_per_m}
        info.update(model_info)
        return {
            "model_name": model_name or name,
            "litellm_params": {
                "model": f"openai/{name}",
                "api_base": self.base_url,
                "api_key": "sk-fake-upstream",
            },
            "model_info": info,
        }

    def take_mode(self, name: str) -> str:
        with self._lock:
            b = self.backends[name]
            b.calls += 1
            mode = b.mode
            if b.times is not None:
                b.times -= 1
                if b.times <= 0:
                    b.mode, b.times = "ok", None
            return mode

    def record(self, body: dict, headers: dict) -> None:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)

    def stream_ended(self, end: StreamEnd) -> None:
        with self._lock:
            self.streams.append(end)

