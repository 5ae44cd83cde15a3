"""The request body's edge, before any endpoint reads it: ``BodyLimit``, an ASGI middleware
answering 413 for a body over ``max_body_bytes`` (from the ``content-length`` header or, for
chunked bodies, as soon as the bytes read pass it) and 408 for a body not whole
``body_timeout_s`` after the request's head arrived, each in the API's own error shape.
"""

from __future__ import annotations

import json

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import GatewayError
from gateway.serving.request.anthropic_errors import ANTHROPIC_PATHS, anthropic_error_body

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def too_large(limit: int) -> GatewayError:
    return GatewayError(413, f"The request body is larger than the limit of {limit} bytes.",
                        "invalid_request_error", code="request_too_large")


def body_timeout(timeout_s: float) -> GatewayError:
    """408 for a body not received within the body deadline; the connection is closed."""
    return BodyTimeout(408, f"The request body did not arrive within {timeout_s:g} s.",
                       "invalid_request_error", code="request_timeout",
                       headers={"connection": "close"})


class BodyTimeout(GatewayError):
    """Raised by ``receive`` past the body deadline: each endpoint answers it in its own error
    shape (its refusal path settles the request and gives its parallel slot back)."""


class BodyLimit:
    """413 for bodies over ``max_bytes`` (header check, then a running count); 408 for a body
    not whole ``timeout_s`` after the request's head arrived (a client trickling its body a
    byte at a time would otherwise hold the request, and its key's parallel slot, forever).
    The deadline covers the body only: once it is whole, ``receive`` waits for the client's
    disconnect (a stream's watch) without one."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float = 60.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._reject(send, scope.get("path", ""), too_large(self.max_bytes))
            return
        seen = 0
        started = False
        whole = False
        deadline = anyio.current_time() + self.timeout_s

        async def counting_receive() -> Message:
            nonlocal seen, whole
            if whole:
                return await receive()
            with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
                msg = await receive()
                if msg["type"] == "http.request":
                    seen += len(msg.get("body", b""))
                    whole = not msg.get("more_body", False)
                    if seen > self.max_bytes:
                        raise _TooLarge
                return msg
            raise body_timeout(self.timeout_s)

        async def tracking_send(msg: Message) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
                if not whole:  # answered before its body was read (a refusal): close, or
                    # the server keeps reading what a trickling client still sends
                    msg = {**msg, "headers": [*msg.get("headers", []),
                                              (b"connection", b"close")]}
            await send(msg)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._reject(send, scope.get("path", ""), too_large(self.max_bytes))
        except BodyTimeout as e:  # raised where no endpoint answered it
            if not started:
                await self._reject(send, scope.get("path", ""), e)

    async def _reject(self, send: Send, path: str, err: GatewayError) -> None:
        anthropic = path.rstrip("/") in ANTHROPIC_PATHS  # each API's clients read their own
        body = anthropic_error_body(err.status, err.message) if anthropic else err.body()
        data = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": err.status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(data)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": data})


class _TooLarge(Exception):
    pass
