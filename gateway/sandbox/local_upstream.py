"""A small real OpenAI-compatible HTTP server: several local backends, each with its own
reply, prices and failure mode. Tests start it as their upstream (``tests.fakes.upstream``
re-exports it), and ``tollgate demo`` serves recorded benchmark answers with it.

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
import select
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

MODES = (
    "ok",
    "error_500",  # HTTP 500 with an OpenAI error body
    "error_429",  # HTTP 429 rate limited
    "error_400",  # HTTP 400: the upstream refuses the request itself (not worth a fallback)
    "hang",  # accept, then send nothing until ``hang_s`` passes (past any sane timeout)
    "reset",  # close the TCP connection with RST before any response byte
    "stall_mid_stream",  # streams: half the content, then nothing; non-streams: like "hang"
    "malformed_json",  # HTTP 200 with a body that is not JSON (streams: a broken data line)
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
        chunk_delay_s: streams: the wait between two words (a slow, long stream).
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
    chunk_delay_s: float = 0.0
    calls: int = 0

    def text_for(self, body: dict) -> str:
        text = self.reply(body) if callable(self.reply) else self.reply
        fmt = body.get("response_format") or {}
        if fmt.get("type") in ("json_object", "json_schema"):
            return json.dumps({"answer": text})
        return text


@dataclass(frozen=True)
class StreamEnd:
    """How one streamed answer ended: ``how`` is "done", "peer_closed" (the caller closed
    the connection mid-stream), "stalled" or "malformed"; ``chunks`` words were sent."""

    model: str
    chunks: int
    how: str


def _words(text: str) -> int:
    return len(text.split())


def count_prompt_tokens(body: dict, count: Callable[[str], int] | None = None) -> int:
    """Tokens of every message's text (default: words), plus one per tool."""
    count = count or _words
    n = 0
    for m in body.get("messages", []):
        content = m.get("content")
        if isinstance(content, str):
            n += count(content)
        elif isinstance(content, list):
            n += sum(count(str(p.get("text", ""))) for p in content if isinstance(p, dict))
    n += len(body.get("tools") or [])
    return max(n, 1)


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
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer((host, port), _make_handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # lifecycle -------------------------------------------------------------------------
    def start(self) -> FakeUpstream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
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

    def _take_mode(self, name: str) -> str:
        with self._lock:
            b = self.backends[name]
            b.calls += 1
            mode = b.mode
            if b.times is not None:
                b.times -= 1
                if b.times <= 0:
                    b.mode, b.times = "ok", None
            return mode

    def _record(self, body: dict, headers: dict) -> None:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)

    def _stream_ended(self, end: StreamEnd) -> None:
        with self._lock:
            self.streams.append(end)


def _completion_id() -> str:
    return "chatcmpl-fake-" + uuid.uuid4().hex[:16]


def _tool_call(body: dict, b: FakeBackend) -> dict | None:
    tools = body.get("tools") or []
    choice = body.get("tool_choice")
    if not tools or choice == "none":
        return None
    name = tools[0]["function"]["name"]
    if isinstance(choice, dict):
        name = choice.get("function", {}).get("name", name)
    return {
        "id": "call_" + uuid.uuid4().hex[:12],
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(b.tool_arguments)},
    }


def send_json(handler: BaseHTTPRequestHandler, status: int, obj: Any) -> None:
    """One JSON response with its length (the connection stays open for the next request)."""
    send_bytes(handler, status, json.dumps(obj).encode())


def send_bytes(handler: BaseHTTPRequestHandler, status: int, data: bytes) -> None:
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class _Handler(BaseHTTPRequestHandler):
    """The routes of a ``FakeUpstream`` (``up``, set by ``_make_handler``)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall on keep-alive replies
    up: FakeUpstream

    def log_message(self, *args: object) -> None:  # keep test output quiet
        pass

    # helpers -------------------------------------------------------------------------------
    def _error(self, status: int, message: str, type_: str) -> None:
        send_json(self, status, {"error": {"message": message, "type": type_, "code": None}})

    def _wait(self, seconds: float) -> None:
        self.up._stop.wait(seconds)

    def _wait_watching(self, seconds: float) -> bool:
        """Wait ``seconds`` (or until the server stops); True as soon as the peer closes the
        connection (readable with nothing to read, or reset)."""
        deadline = time.monotonic() + seconds
        while not self.up._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            readable, _, _ = select.select([self.connection], [], [], min(left, 0.05))
            if readable:
                try:
                    if self.connection.recv(1, socket.MSG_PEEK) == b"":
                        return True
                except OSError:
                    return True
                self._wait(left)  # bytes from the caller: not a close; just wait
                return False
        return False

    def _reset(self) -> None:
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    # routes --------------------------------------------------------------------------------
    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            data = [{"id": n, "object": "model", "owned_by": "fake"} for n in self.up.backends]
            send_json(self, 200, {"object": "list", "data": data})
        else:
            self._error(404, f"no route {self.path}", "invalid_request_error")

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._error(404, f"no route {self.path}", "invalid_request_error")
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._error(400, "body is not JSON", "invalid_request_error")
            return
        self.up._record(body, {k.lower(): v for k, v in self.headers.items()})
        b = self.up.backends.get(body.get("model"))
        if b is None:
            self._error(404, f"model {body.get('model')!r} not found", "invalid_request_error")
            return
        mode = self.up._take_mode(b.name)
        if b.delay_s:
            self._wait(b.delay_s)
        stream = bool(body.get("stream"))
        if not self._fail(mode, b, stream):
            self._stream(body, b, mode) if stream else self._complete(body, b)

    def _fail(self, mode: str, b: FakeBackend, stream: bool) -> bool:
        """Answer as failure ``mode`` says; False when the request is to be answered."""
        if mode == "error_500":
            self._error(500, "the fake upstream failed", "server_error")
        elif mode == "error_429":
            self._error(429, "rate limited by the fake upstream", "rate_limit_error")
        elif mode == "error_400":
            self._error(400, "the fake upstream refuses this request", "invalid_request_error")
        elif mode == "hang" or (mode == "stall_mid_stream" and not stream):
            self._wait(b.hang_s)
            self.close_connection = True
        elif mode == "reset":
            self._reset()
        elif mode == "malformed_json" and not stream:
            send_bytes(self, 200, b'{"id": "chatcmpl-broken", "choices": [{"message": ')
        else:
            return False
        return True

    def _usage(self, body: dict, completion_tokens: int) -> dict:
        p = count_prompt_tokens(body, self.up.count_tokens)
        b = self.up.backends.get(str(body.get("model")))
        if b is not None and b.image_tokens:
            p += b.image_tokens * sum(
                1 for m in body.get("messages", []) if isinstance(m.get("content"), list)
                for part in m["content"]
                if isinstance(part, dict) and part.get("type") == "image_url")
        return {"prompt_tokens": p, "completion_tokens": completion_tokens,
                "total_tokens": p + completion_tokens}

    def _complete(self, body: dict, b: FakeBackend) -> None:
        call = _tool_call(body, b)
        text = b.text_for(body)
        n = int(body.get("n") or 1)
        choices = []
        for i in range(n):
            if call is not None:
                msg = {"role": "assistant", "content": None, "tool_calls": [call]}
                finish = "tool_calls"
            else:
                msg = {"role": "assistant", "content": text}
                finish = "stop"
            choices.append({"index": i, "message": msg, "finish_reason": finish, "logprobs": None})
        count = self.up.count_tokens or _words
        completion = 8 if call is not None else count(text) * n
        send_json(self, 200, {
            "id": _completion_id(), "object": "chat.completion", "created": int(time.time()),
            "model": b.name, "system_fingerprint": "fp_fake", "choices": choices,
            "usage": self._usage(body, completion),
        })

    def _stream(self, body: dict, b: FakeBackend, mode: str) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        cid, created = _completion_id(), int(time.time())

        def chunk(delta: dict | None, finish: str | None = None, usage: dict | None = None) -> None:
            obj: dict[str, Any] = {
                "id": cid, "object": "chat.completion.chunk", "created": created, "model": b.name,
                "choices": [] if delta is None
                else [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            if usage is not None:
                obj["usage"] = usage
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            self.wfile.flush()

        sent = [0]
        try:
            chunk({"role": "assistant", "content": ""})
            call = _tool_call(body, b)
            if call is not None:
                chunk({"tool_calls": [{"index": 0, **call}]})
                completion, finish = 8, "tool_calls"
            else:
                how = self._stream_words(b.text_for(body).split(), mode, b, chunk, sent)
                if how != "done":
                    self.up._stream_ended(StreamEnd(b.name, sent[0], how))
                    return
                completion = (self.up.count_tokens or _words)(b.text_for(body))
                finish = "stop"
            chunk({}, finish)
            if (body.get("stream_options") or {}).get("include_usage"):
                chunk(None, usage=self._usage(body, completion))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.up._stream_ended(StreamEnd(b.name, sent[0], "peer_closed"))
            return
        self.up._stream_ended(StreamEnd(b.name, sent[0], "done"))

    def _stream_words(self, words: list[str], mode: str, b: FakeBackend,
                      chunk: Callable[[dict], None], sent: list[int]) -> str:
        """The reply word by word (``sent[0]`` counts them): "done", or how it was cut off
        ("stalled", "malformed", "peer_closed")."""
        half = len(words) // 2
        for i, w in enumerate(words):
            if mode == "stall_mid_stream" and i == max(half, 1):
                return "peer_closed" if self._wait_watching(b.hang_s) else "stalled"
            if mode == "malformed_json" and i == max(half, 1):
                self.wfile.write(b"data: {not json\n\n")
                self.wfile.flush()
                return "malformed"
            if i and b.chunk_delay_s and self._wait_watching(b.chunk_delay_s):
                return "peer_closed"
            chunk({"content": w if i == 0 else " " + w})
            sent[0] += 1
        return "done"


def _make_handler(up: FakeUpstream) -> type[BaseHTTPRequestHandler]:
    return type("Handler", (_Handler,), {"up": up})
