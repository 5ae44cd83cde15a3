"""One access line per API request, for the operator reading the logs:

    tg-3f2a… tenant=acme auto → fake-mid 200 $0.000042 183ms attempts=1

(id, tenant, route → model that answered, status, cost, latency, upstream attempts). A
request no model answered names what it asked for instead (``passthrough → gpt-4o (asked, not
answered) 429``; a route is itself what was asked: ``auto → not answered 429``). Logged at
INFO on ``tollgate.access``; under ``--log-format json`` the same facts are fields.
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.store.records import Tenant

log = logging.getLogger("tollgate.access")


def access_fields(row: dict[str, Any], tenant_name: str | None) -> dict[str, Any]:
    """The access line's facts, from the request-log row."""
    attempts = [a for a in row.get("attempts") or []
                if not str(a.get("error") or "").startswith(("budget", "circuit"))]
    return {
        "request_id": row.get("id"),
        "tenant": tenant_name or row.get("tenant_id"),
        "route": row.get("route") or "passthrough",
        "model": row.get("chosen_model") if row.get("status") == 200 else None,
        # the model asked for: a route's name, else the backend named (a passthrough)
        "asked": row.get("route") or (row.get("chosen_model") if row.get("reason") else None),
        "status": row.get("status"),
        "cost_usd": row.get("cost_usd"),
        "latency_ms": row.get("latency_ms"),
        "attempts": len(attempts),
    }


def format_access(f: dict[str, Any]) -> str:
    cost = f"${f['cost_usd']:.6f}" if f.get("cost_usd") is not None else "$-"
    ms = f"{f['latency_ms']:.0f}ms" if f.get("latency_ms") is not None else "-ms"
    answered = f["model"] or (f"{f['asked']} (asked, not answered)"
                              if f.get("asked") and f["asked"] != f["route"] else "not answered")
    return (f"{f['request_id']} tenant={f['tenant'] or '-'} {f['route']} → {answered} "
            f"{f['status']} {cost} {ms} attempts={f['attempts']}")


def log_access(row: dict[str, Any], tenant: Tenant | None) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    fields = access_fields(row, tenant.name if tenant is not None else None)
    log.info(format_access(fields), extra={"fields": fields})
