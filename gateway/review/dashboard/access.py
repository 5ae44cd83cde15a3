"""The dashboard's login cookie and the 404 that review surfaces share.

Who may look is decided in ``gateway.auth`` (the admin key or a tenant key); this module
only says where the dashboard keeps the key between pages.
"""

from __future__ import annotations

from fastapi import Request

from gateway.auth import Principal, require_principal
from gateway.errors import GatewayError

COOKIE = "tollgate_dashboard"


async def dashboard_principal(request: Request) -> Principal:
    """The caller from ``Authorization: Bearer`` or the dashboard's login cookie."""
    return await require_principal(request, cookie_key=request.cookies.get(COOKIE))


def not_found(request_id: str) -> GatewayError:
    """Unknown id and another tenant's id look the same, so ids cannot be probed."""
    return GatewayError(404, f"No request {request_id!r} found for this key.",
                        "invalid_request_error", code="request_not_found", param="request_id")
