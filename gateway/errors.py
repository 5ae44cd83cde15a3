"""OpenAI-shaped errors: every failure the client sees is ``{"error": {message, type, param,
code}}`` with the HTTP status OpenAI would use, so SDK clients raise their usual exceptions."""

from __future__ import annotations

from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

CLIENT_GONE = "client disconnected"  # the error of a request whose client went away (499)


class GatewayError(Exception):
    """An error the gateway returns to the client as an OpenAI error body."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        *,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, code=self.code, param=self.param)

    def response(self, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(
            self.body(), status_code=self.status, headers={**self.headers, **(headers or {})}
        )


def error_body(
    message: str, type_: str, *, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def as_gateway_error(exc: BaseException) -> GatewayError | None:
    """The OpenAI error for an exception FastAPI or the gateway raised; None for the rest
    (the host app answers those as a 500, a router may first map its own)."""
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, RequestValidationError):
        return request_invalid(exc)
    if isinstance(exc, ClientDisconnect):  # the client hung up before its body was read
        return GatewayError(499, CLIENT_GONE, "invalid_request_error",
                            code="client_disconnected")
    if isinstance(exc, HTTPException):
        type_ = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return GatewayError(exc.status_code, str(exc.detail), type_, code=str(exc.status_code),
                            headers=getattr(exc, "headers", None))
    return None


def request_invalid(exc: RequestValidationError) -> GatewayError:
    """400 for a request FastAPI could not validate; ``param`` is the first bad field's path
    without its ``body``/``query``/``path`` prefix."""
    err = exc.errors()[0] if exc.errors() else {}
    loc = [str(x) for x in err.get("loc", ())]
    if loc and loc[0] in ("body", "query", "path", "header", "cookie"):
        loc = loc[1:]
    return invalid(str(err.get("msg", "invalid request")), ".".join(loc) or None)


def invalid(message: str, param: str | None = None, code: str | None = None) -> GatewayError:
    """400: the request itself is wrong; ``param`` names the field."""
    return GatewayError(400, message, "invalid_request_error", param=param, code=code)


def unauthorized(message: str = "Incorrect API key provided.") -> GatewayError:
    return GatewayError(401, message, "invalid_request_error", code="invalid_api_key")


def model_not_found(name: str) -> GatewayError:
    return GatewayError(
        404,
        f"The model `{name}` does not exist or you do not have access to it.",
        "invalid_request_error",
        code="model_not_found",
        param="model",
    )


def budget_exceeded(message: str) -> GatewayError:
    """429 that no retry can fix: ``x-should-retry: false`` stops OpenAI's SDKs retrying it."""
    return GatewayError(429, message, "budget_exceeded", code="budget_exceeded",
                        headers={"x-should-retry": "false"})


def budget_busy(message: str, retry_after_s: int = 1) -> GatewayError:
    """429 that a retry may fix: the budget pays for the request once the tenant's requests
    in flight settle. ``Retry-After`` and no ``x-should-retry: false``: SDKs retry it."""
    return GatewayError(429, message, "rate_limit_error", code="budget_busy",
                        headers={"retry-after": str(max(1, retry_after_s))})


def store_unavailable(message: str = "The gateway's database is unavailable.") -> GatewayError:
    return GatewayError(503, message, "service_unavailable", code="store_unavailable")
