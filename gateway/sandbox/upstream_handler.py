"""The HTTP side of ``FakeUpstream`` (``local_upstream.py``): the request handler that answers
each route in OpenAI's wire format, acts out the failure modes on the raw socket, and bills
deterministic usage. Kept apart from the server object so each file reads as one concept.

``/v1/responses`` and ``/v1/completions`` are answered in ``upstream_responses.py``,
``/v1/messages`` (Anthropic's wire) in ``upstream_messages.py``, images, audio,
moderations and rerank in ``upstream_media.py``; the wire
helpers both use (``send_json``, ``count_prompt_tokens``, ...) are in ``upstream_wire.py``.
``StreamEnd`` lives here because the handler makes it; ``local_upstream`` re-exports it.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from gateway.sandbox.upstream_media import ROUTES as MEDIA_ROUTES
from gateway.sandbox.upstream_messages import answer_messages
from gateway.sandbox.upstream_responses import answer_completions, answer_responses
from gateway.sandbox.upstream_wire import (
    StreamEnd,
    count_prompt_tokens,
    open_event_stream,
    send_bytes,
    send_json,
    word_count,
)

if TYPE_CHECKING:
    from gateway.sandbox.local_upstream import FakeBackend, FakeUpstream


@dataclass(frozen=True)
class Answerable:
    """A request the fake upstream answers (``UpstreamHandler.answerable``): its JSON body,
    the backend it names, the failure mode it took (a stream's act out mid-answer) and
    whether it streams."""

    body: dict
    backend: FakeBackend
    mode: str
    stream: bool


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


class UpstreamHandler(BaseHTTPRequestHandler):
    """The routes of a ``FakeUpstream`` (``up``, set by ``make_upstream_handler``)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall on keep-alive replies
    up: FakeUpstream

    def log_message(self, *args: object) -> None:  # keep test output quiet
        pass

    # helpers -------------------------------------------------------------------------------
    def answer_error(self, status: int, message: str, type_: str) -> None:
        send_json(self, status, {"error": {"message": message, "type": type_, "code": None}})

    def wait(self, seconds: float) -> None:
        self.up.stopping.wait(seconds)

    def wait_watching(self, seconds: float) -> bool:
        """Wait ``seconds`` (or until the server stops); True as soon as the peer closes the
        connection (readable with nothing to read, or reset)."""
        deadline = time.monotonic() + seconds
        while not self.up.stopping.is_set():
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
                self.wait(left)  # bytes from the caller: not a close; just wait
                return False
        return False

    def read_request(self, raw: bytes) -> tuple[dict, FakeBackend] | None:
        """The JSON body (recorded with its headers) and the backend it names; None once an
        error has been answered (a body that is not JSON, an unknown model)."""
        try:
            body = json.loads(raw)
        except ValueError:
            self.answer_error(400, "body is not JSON", "invalid_request_error")
            return None
        self.up.record(body, {k.lower(): v for k, v in self.headers.items()})
        b = self.up.backends.get(body.get("model"))
        if b is None:
            self.answer_error(404, f"model {body.get('model')!r} not found", "invalid_request_error")
            return None
        return body, b

    def ready(self, b: FakeBackend, stream: bool) -> str | None:
        """Take ``b``'s failure mode, wait its delay and act the mode out: None when that
        answered the request, else the mode, for the answer to follow."""
        mode = self.up.take_mode(b.name)
        if b.delay_s:
            self.wait(b.delay_s)
        return None if self.act_failure(mode, b, stream) else mode

    def answerable(self, raw: bytes, streams: bool = True) -> Answerable | None:
        """The request to answer (``streams``: a route whose body may ask to stream); None
        once it was answered otherwise: an error (``read_request``) or its backend's failure
        mode (``ready``). The preamble every JSON route of the fake shares."""
        req = self.read_request(raw)
        if req is None:
            return None
        body, b = req
        stream = streams and bool(body.get("stream"))
        mode = self.ready(b, stream)
        return None if mode is None else Answerable(body, b, mode, stream)

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
            self.answer_error(404, f"no route {self.path}", "invalid_request_error")

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        path = self.path.rstrip("/")
        if path == "/v1/chat/completions":
            self._chat(raw)
        elif path == "/v1/embeddings":
            self._embeddings(raw)
        elif path == "/v1/responses":
            answer_responses(self, raw)
        elif path == "/v1/completions":
            answer_completions(self, raw)
        elif path == "/v1/messages":
            answer_messages(self, raw)
        elif path in MEDIA_ROUTES:
            MEDIA_ROUTES[path](self, raw)
        else:
            self.answer_error(404, f"no route {self.path}", "invalid_request_error")

    def _chat(self, raw: bytes) -> None:
        call = self.answerable(raw)
        if call is not None and call.stream:
            self._stream(call.body, call.backend, call.mode)
        elif call is not None:
            self._complete(call.body, call.backend)

    def _embeddings(self, raw: bytes) -> None:
        """OpenAI's embeddings answer: a deterministic 8-dimensional vector per input, usage
        counted in words (token ids: one each), failure modes as for chat."""
        call = self.answerable(raw, streams=False)
        if call is None:
            return
        body, b = call.body, call.backend
        items = body["input"] if isinstance(body.get("input"), list) else [body.get("input")]
        if items and all(isinstance(t, int) for t in items):
            items = [items]
        data, used = [], 0
        for i, x in enumerate(items):
            used += len(x) if isinstance(x, list) else len(str(x).split())
            seed = sum(map(ord, str(x))) % 97
            data.append({"object": "embedding", "index": i,
                         "embedding": [((seed + j) % 10) / 10 for j in range(8)]})
        used += b.framing_tokens * len(items)
        if b.reported_tokens is not None:
            used = b.reported_tokens
        send_json(self, 200, {"object": "list", "data": data, "model": b.name,
                              "usage": {"prompt_tokens": used, "total_tokens": used}})

    def act_failure(self, mode: str, b: FakeBackend, stream: bool) -> bool:
        """Answer as failure ``mode`` says; False when the request is to be answered."""
        if mode == "error_500":
            self.answer_error(500, "the fake upstream failed", "server_error")
        elif mode == "error_429":
            self.answer_error(429, "rate limited by the fake upstream", "rate_limit_error")
        elif mode == "error_400":
            self.answer_error(400, "the fake upstream refuses this request", "invalid_request_error")
        elif mode == "hang" or (mode == "stall_mid_stream" and not stream):
            self.wait(b.hang_s)
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
        for kind, per in (("image_url", b.image_tokens if b else 0),
                          ("file", b.file_tokens if b else 0)):
            p += per * sum(
                1 for m in body.get("messages", []) if isinstance(m.get("content"), list)
                for part in m["content"] if isinstance(part, dict) and part.get("type") == kind)
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
        count = self.up.count_tokens or word_count
        completion = 8 if call is not None else count(text) * n
        send_json(self, 200, {
            "id": _completion_id(), "object": "chat.completion", "created": int(time.time()),
            "model": b.name, "system_fingerprint": "fp_fake", "choices": choices,
            "usage": self._usage(body, completion),
        })

    def _stream(self, body: dict, b: FakeBackend, mode: str) -> None:
        open_event_stream(self)
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
                    self.up.stream_ended(StreamEnd(b.name, sent[0], how))
                    return
                completion = (self.up.count_tokens or word_count)(b.text_for(body))
                finish = "stop"
            chunk({}, finish)
            if (body.get("stream_options") or {}).get("include_usage") and mode != "no_usage":
                chunk(None, usage=self._usage(body, completion))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.up.stream_ended(StreamEnd(b.name, sent[0], "peer_closed"))
            return
        self.up.stream_ended(StreamEnd(b.name, sent[0], "done"))

    def _stream_words(self, words: list[str], mode: str, b: FakeBackend,
                      chunk: Callable[[dict], None], sent: list[int]) -> str:
        """The reply word by word (``sent[0]`` counts them): "done", or how it was cut off
        ("stalled", "malformed", "peer_closed")."""
        half = len(words) // 2
        for i, w in enumerate(words):
            if mode == "stall_mid_stream" and i == max(half, 1):
                return "peer_closed" if self.wait_watching(b.hang_s) else "stalled"
            if mode == "malformed_json" and i == max(half, 1):
                self.wfile.write(b"data: {not json\n\n")
                self.wfile.flush()
                return "malformed"
            if i and b.chunk_delay_s and self.wait_watching(b.chunk_delay_s):
                return "peer_closed"
            chunk({"content": w if i == 0 else " " + w})
            sent[0] += 1
        return "done"


def make_upstream_handler(up: FakeUpstream) -> type[BaseHTTPRequestHandler]:
    return type("Handler", (UpstreamHandler,), {"up": up})
