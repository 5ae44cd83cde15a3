"""The HTTP edge: whom to believe about the client's address, and how much of a request head,
for how long, a connection may send (``reliability:`` ``forwarded_allow_ips``,
``max_header_bytes``, ``header_timeout_s``; ``tollgate serve --forwarded-allow-ips``).

Trusted proxies. uvicorn believes ``X-Forwarded-For`` / ``X-Forwarded-Proto`` from
127.0.0.1 unless told otherwise, so anyone on the gateway's host (or a local proxy that passes
the header through unchanged) could pick the client address the wrong-key throttle counts
(``gateway.auth.FailedLogins``). Here no peer is trusted by default: the client is the socket's
peer and the headers are ignored; ``forwarded_allow_ips`` (addresses, CIDRs, or ``*``) names
the proxies whose headers set the client address and the scheme.

Request heads. uvicorn's default parser (httptools) has no limit on the size of a request
head and no deadline for receiving it (``timeout_keep_alive`` only covers idle time between
requests; a fresh connection, or one trickling a head a byte at a time, is held forever).
``EdgeHttpToolsProtocol`` adds both to uvicorn's httptools protocol, below the ASGI app:
- a head (request line and headers) larger than ``max_header_bytes`` is answered 431 and the
  connection closed, at most one read (64 KiB) past the limit is ever parsed;
- a connection that has not sent a whole head ``header_timeout_s`` after it opened, or after
  the first byte of its next request on a kept-alive connection, is answered 408 and closed.
Idle keep-alive connections are still closed by uvicorn's ``timeout_keep_alive``. Without
httptools, uvicorn's h11 protocol is used with ``h11_max_incomplete_event_size`` (the size
limit, answered 400 by uvicorn) and no header deadline.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.config import ReliabilitySettings

try:  # httptools is uvicorn[standard]'s parser; h11 is the fallback
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools is a dependency
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

CONFIG_ATTRIBUTE = "tollgate_edge"  # on uvicorn.Config; pickled to --workers processes


@dataclass(frozen=True)
class EdgeLimits:
    max_header_bytes: int = 64 * 1024
    header_timeout_s: float = 10.0


def limits(settings: ReliabilitySettings | None) -> EdgeLimits:
    if settings is None:
        return EdgeLimits()
    return EdgeLimits(settings.max_header_bytes, settings.header_timeout_s)


def uvicorn_options(settings: ReliabilitySettings | None,
                    forwarded_allow_ips: list[str] | None = None) -> dict[str, Any]:
    """``uvicorn.Config`` keyword arguments for the edge; ``forwarded_allow_ips`` (the CLI
    option) replaces the settings' list when given."""
    trusted = forwarded_allow_ips if forwarded_allow_ips is not None else (
        settings.forwarded_allow_ips if settings is not None else [])
    lim = limits(settings)
    options: dict[str, Any] = {
        "proxy_headers": bool(trusted),
        "forwarded_allow_ips": list(trusted) if trusted else None,
        "h11_max_incomplete_event_size": lim.max_header_bytes,
    }
    if HttpToolsProtocol is not None:
        options["http"] = "gateway.reliability.edge:EdgeHttpToolsProtocol"
    return options


def configure(config: Any, settings: ReliabilitySettings | None) -> Any:
    """Attach the head limits to a ``uvicorn.Config`` (read by ``EdgeHttpToolsProtocol``)."""
    setattr(config, CONFIG_ATTRIBUTE, limits(settings))
    return config


def _error(status: int, reason: str, message: str, code: str) -> bytes:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                 "param": None, "code": code}}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


HEAD_TOO_LARGE = _error(431, "Request Header Fields Too Large",
                        "The request's headers are too large.", "request_header_too_large")
HEAD_TIMEOUT = _error(408, "Request Timeout",
                      "The request's headers did not arrive in time.", "request_header_timeout")

if HttpToolsProtocol is not None:

    class EdgeHttpToolsProtocol(HttpToolsProtocol):  # type: ignore[misc,valid-type]
        """uvicorn's httptools protocol with a head size limit and a head deadline."""

        def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                     _loop: asyncio.AbstractEventLoop | None = None) -> None:
            super().__init__(config, server_state, app_state, _loop)
            lim = getattr(config, CONFIG_ATTRIBUTE, None) or EdgeLimits()
            self._max_head = lim.max_header_bytes
            self._head_timeout_s = lim.header_timeout_s
            self._in_head = True  # between a request's first byte (or the connection) and
            self._head_bytes = 0  # its end of headers
            self._head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_head_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._in_head:
                if self._head_bytes > self._max_head:
                    return self._refuse(HEAD_TOO_LARGE)
                self._head_bytes += len(data)
            super().data_received(data)
            if self._in_head and self._head_bytes > self._max_head:
                self._refuse(HEAD_TOO_LARGE)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if not self._in_head:  # the next request on a kept-alive connection
                self._in_head, self._head_bytes = True, 0
            self._arm_head_timer()

        def on_headers_complete(self) -> None:
            self._in_head, self._head_bytes = False, 0
            self._cancel_head_timer()
            super().on_headers_complete()

        def _arm_head_timer(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(self._head_timeout_s,
                                                        self._head_timed_out)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self._in_head:
                self._refuse(HEAD_TIMEOUT)

        def _refuse(self, response: bytes) -> None:
            self._cancel_head_timer()
            self._in_head = False
            if self.transport is None or self.transport.is_closing():
                return
            busy = self.cycle is not None and not self.cycle.response_complete
            if not busy:  # never interleave with a response being written (pipelining)
                self.transport.write(response)
            self.transport.close()
