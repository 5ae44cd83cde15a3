"""Router versions for the dashboard: what the learning loop recorded (``router_versions``,
with its evaluation metrics), what the log shows each version served, and the live one.

The deferral curve of a version is drawn by ``router_core.evaluation.plot`` (matplotlib,
server side) from the λ-sweep points its evaluation stored: ``metrics.candidate.points``
(and ``metrics.current.points`` for the router it was compared against), each a list of
(mean cost, mean quality); the curve is the upper Pareto frontier of those points anchored
at the cheapest one (docs/evaluation.md).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy import Engine

from gateway.store.models import request_logs


def _recorded(engine: Engine) -> list[dict[str, Any]]:
    if "router_versions" not in sa.inspect(engine).get_table_names():
        return []
    from gateway.learning import router_versions

    return router_versions.history(engine)


def _served(engine: Engine, tenant_id: str | None) -> dict[str, dict[str, Any]]:
    c = request_logs.c
    q = (sa.select(c.router_version, sa.func.count(), sa.func.min(c.created_at),
                   sa.func.max(c.created_at))
         .where(c.router_version.is_not(None)).group_by(c.router_version))
    if tenant_id is not None:
        q = q.where(c.tenant_id == tenant_id)
    with engine.connect() as conn:
        return {v: {"requests": int(n), "first_seen": lo, "last_seen": hi}
                for v, n, lo, hi in conn.execute(q)}


def _iso(v: Any) -> Any:
    return v.isoformat() if hasattr(v, "isoformat") else v


def curve_points(metrics: dict[str, Any] | None) -> dict[str, list[list[float]]]:
    """label -> λ-sweep points stored with a version's evaluation."""
    out: dict[str, list[list[float]]] = {}
    for label in ("candidate", "current"):
        part = (metrics or {}).get(label) or {}
        pts = part.get("points")
        if pts:
            out[label] = [[float(a), float(b)] for a, b in pts]
    return out


def list_versions(engine: Engine, live_version: str, live_metrics: dict[str, Any] | None,
                  tenant_id: str | None) -> list[dict[str, Any]]:
    """Every version known from the table, the log, or the live router; newest first."""
    served = _served(engine, tenant_id)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for rec in reversed(_recorded(engine)):
        m = rec.get("metrics") or {}
        cand = m.get("candidate") or {}
        cur = m.get("current") or {}
        v = rec["version"]
        seen.add(v)
        out.append({
            "version": v, "status": rec.get("status"), "active": bool(rec.get("active")),
            "parent": rec.get("parent"), "created_at": _iso(rec.get("created_at")),
            "n_observations": rec.get("n_observations"),
            "audc": cand.get("audc"), "qnc": cand.get("qnc"), "peak": cand.get("peak"),
            "parent_audc": cur.get("audc"), "reason": m.get("reason"),
            "has_curve": bool(curve_points(m)), "live": v == live_version,
            **_served_fields(served.get(v)),
        })
    extra = [v for v in served if v not in seen]
    if live_version not in seen and live_version not in extra:
        extra.insert(0, live_version)
    for item in out:
        if item["live"] and live_metrics:
            item["training"] = live_metrics
    for v in extra:
        out.append({
            "version": v, "status": "live" if v == live_version else "seen in log",
            "active": v == live_version, "live": v == live_version, "has_curve": False,
            "training": live_metrics if v == live_version else None,
            **_served_fields(served.get(v)),
        })
    return out


def _served_fields(s: dict[str, Any] | None) -> dict[str, Any]:
    s = s or {}
    return {"requests": s.get("requests", 0), "first_seen": _iso(s.get("first_seen")),
            "last_seen": _iso(s.get("last_seen"))}


def version_metrics(engine: Engine, version: str) -> dict[str, Any] | None:
    """The stored metrics of a recorded version (with its ``parent``), or None."""
    for rec in _recorded(engine):
        if rec["version"] == version:
            return {"parent": rec.get("parent"), **(rec.get("metrics") or {})}
    return None


def deferral_png(version: str, metrics: dict[str, Any]) -> bytes | None:
    """The deferral-curve figure of a recorded version as PNG bytes (None without points)."""
    from router_core.evaluation.metrics import audc, deferral_curve
    from router_core.evaluation.plot import plot_deferral_curves

    pts = curve_points(metrics)
    if not pts:
        return None
    arrays = {k: np.asarray(v, dtype=float) for k, v in pts.items()}
    allp = np.concatenate(list(arrays.values()))
    cheapest = allp[np.argmin(allp[:, 0])]
    c_min, c_max = float(allp[:, 0].min()), float(allp[:, 0].max())
    names = {"candidate": version, "current": f"parent {metrics.get('parent') or ''}".strip()}
    curves, points, areas = {}, {}, {}
    for k, p in arrays.items():
        curve = deferral_curve(p, (float(cheapest[0]), float(cheapest[1])))
        label = names.get(k, k)
        curves[label], points[label] = curve, p
        stored = (metrics.get(k) or {}).get("audc")
        areas[label] = float(stored) if stored is not None else (
            audc(curve, c_min, c_max) if c_max > c_min else float(curve[:, 1].max()))
    with tempfile.TemporaryDirectory() as tmp:
        path = plot_deferral_curves(
            curves, Path(tmp) / "deferral.png", c_min=c_min, c_max=max(c_max, c_min * 1.0001),
            title=f"router {version}: deferral curve on its held-out evaluation",
            points=points, audc=areas)
        return path.read_bytes()
