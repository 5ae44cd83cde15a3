"""Each route's learning, as the operator's dashboard shows it: how many judged outcomes the
route has gathered so far, the saving it makes now (the summary's own per-route saving over
the window), what its exploration has spent against what its share of spend allows, and
where its next saving is expected (gateway/pool/exploring.py, ``next_saving``).

``route_learning`` runs in the serving process (it reads the pool); ``judged_by_route`` and
``learning_rows`` run where the summary is computed (a worker process: plain data only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Engine

JUDGED_SOURCES = ("paired", "judge", "shadow", "feedback")


def route_learning(pool: Any) -> dict[str, dict[str, Any]]:
    """route -> what the pool says of its learning: reference, judge, ε, share bound and the
    next expected saving (every promising route)."""
    from gateway.pool.exploring import exploring, next_saving

    x = exploring(pool)
    return {route: {"reference": p.reference, "max_drop": p.max_drop,
                    **x.entry(pool, route), "next_saving": next_saving(pool, route)}
            for route, p in pool.promises.items()}


def judged_by_route(engine: Engine) -> dict[str, int]:
    """route -> judged outcomes gathered on its requests (every observation of a judged
    source attached to a request the route served), all time."""
    from gateway.learning.tables import observations_t, requests_t

    q = (sa.select(requests_t.c.route, sa.func.count())
         .select_from(observations_t.join(
             requests_t, observations_t.c.request_id == requests_t.c.request_id))
         .where(observations_t.c.source.in_(JUDGED_SOURCES), requests_t.c.route.is_not(None))
         .group_by(requests_t.c.route))
    with engine.connect() as conn:
        return {str(r): int(n) for r, n in conn.execute(q).all()}


def learning_rows(static: Mapping[str, Mapping[str, Any]], judged: Mapping[str, int],
                  shares: Mapping[str, Mapping[str, float]],
                  savings: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per promising route (pure): the module docstring's four facts."""
    saving = {s["route"]: s for s in savings}
    rows = []
    for route, info in static.items():
        share = shares.get(route) or {}
        spent = float(share.get("spent_usd", 0.0)) + float(share.get("reserved_usd", 0.0))
        allowed = float(share.get("budget_usd", 0.0))
        bound = info.get("max_share")
        route_spend = allowed / bound if bound else None
        rows.append({
            "route": route, "reference": info.get("reference"), "judge": info.get("judge"),
            "exploring": info.get("exploring"), "max_share": bound,
            "judged_outcomes": int(judged.get(route, 0)),
            "saving_share": (saving.get(route) or {}).get("saving_share"),
            "exploration_spent_usd": spent, "exploration_allowed_usd": allowed,
            "exploration_share": spent / route_spend if route_spend else None,
            "next_saving": info.get("next_saving"),
        })
    return rows
