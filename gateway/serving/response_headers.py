"""Headers every API response carries, whichever path produced it (answer, error, stream).

- ``x-request-id``: the same id as ``x-tollgate-request-id``; OpenAI's SDKs read this one
  (``response._request_id``), so a client's logs and Tollgate's request log share the id.
- ``x-ratelimit-*``: what the rate limiter counted for this request
  (``request.state.ratelimit_headers``, set when the request is admitted).
"""

from __future__ import annotations

from typing import Any

RATELIMIT_STATE = "ratelimit_headers"


class ResponseHeaders:
    """Pure ASGI middleware (no body buffering, so streams pass through untouched)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = _added(list(message.get("headers") or []), scope)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _added(headers: list[tuple[bytes, bytes]], scope: dict) -> list[tuple[bytes, bytes]]:
    names = {k.lower() for k, _ in headers}
    for k, v in list(headers):
        if k.lower() == b"x-tollgate-request-id" and b"x-request-id" not in names:
            headers.append((b"x-request-id", v))
    extra = (scope.get("state") or {}).get(RATELIMIT_STATE) or {}
    for k, v in extra.items():
        if k.encode() not in names:
            headers.append((k.encode(), v.encode()))
    return headers
