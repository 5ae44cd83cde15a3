"""Refusals in Anthropic's error shape, for the endpoints Anthropic's SDKs call (/v1/messages).

Anthropic answers ``{"type": "error", "error": {"type", "message"}, "request_id"}`` with the
error type its HTTP status names (https://docs.anthropic.com/en/api/errors): 400
invalid_request_error, 401 authentication_error, 403 permission_error, 404 not_found_error,
413 request_too_large, 429 rate_limit_error, 500 api_error, 529 overloaded_error. The gateway
keeps its own status (a 502 from a failed upstream stays a 502, a type of api_error; a 503 is
overloaded_error) and its ``code`` rides along in the message, so a client's SDK raises the
exception it raises for Anthropic's own API and a person reads why.
"""

from __future__ import annotations

import json

from fastapi.responses import JSONResponse, Response

from gateway.errors import GatewayError

# the paths answered in this shape
ANTHROPIC_PATHS = frozenset({"/v1/messages", "/messages", "/v1/messages/count_tokens",
                             "/messages/count_tokens"})
TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
         404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
         503: "overloaded_error", 529: "overloaded_error"}


def error_type(status: int) -> str:
    """Anthropic's error type of an HTTP status (another 4xx is invalid_request_error, as
    Anthropic says it may use; another 5xx api_error)."""
    return TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def anthropic_error_body(status: int, message: str, request_id: str | None = None) -> dict:
    body: dict = {"type": "error", "error": {"type": error_type(status), "message": message}}
    if request_id is not None:
        body["request_id"] = request_id
    return body


def anthropic_error(e: GatewayError, headers: dict[str, str]) -> Response:
    """A refusal as Anthropic's API answers one (the endpoint frame's ``render``)."""
    message = f"{e.message} ({e.code})" if e.code else e.message
    return JSONResponse(
        anthropic_error_body(e.status, message, headers.get("x-tollgate-request-id")),
        status_code=e.status, headers={**e.headers, **headers})


def anthropic_error_event(status: int, message: str) -> bytes:
    """A mid-stream error as Anthropic streams one (``event: error``)."""
    return f"event: error\ndata: {json.dumps(anthropic_error_body(status, message))}\n\n".encode()
