"""LiteLLM Proxy's ``GET /spend/logs``, on the admin (LiteLLM master) key, read from the request
log: who spent what, per request.

    ?api_key=   a key (``sk-...``) or its token (the hash /key/generate answers)
    ?user_id=   the requests of the keys that user owns
    ?team_id=   a team's (tenant's) requests, by id or alias
    ?request_id=
    ?start_date=YYYY-MM-DD&end_date=YYYY-MM-DD   the days from start_date through end_date
    ?summarize=true (default with both dates): one entry per day, as LiteLLM's
               {"startTime", "spend", "users", "models", <token>: spend}, days without
               requests padded to end_date; false: the requests themselves

Each request: ``request_id``, ``call_type``, ``api_key`` (the key's token, never the key),
``spend``, ``total_tokens``, ``prompt_tokens``, ``completion_tokens``, ``startTime``,
``endTime``, ``model``, ``model_group`` (the route or backend asked for), ``user``,
``team_id``, ``metadata`` (status, error, route); newest first, at most 10,000 (then the
``x-litellm-spend-logs-truncated: true`` header, as LiteLLM). No prompt or answer text.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from gateway.admin.api import OpenAIErrorRoute, request_store, require_admin
from gateway.errors import invalid
from gateway.store.spend_logs import CAP, SpendFilter


def _day(value: str | None, param: str) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise invalid(f"{param} must be a date as YYYY-MM-DD, got {value!r}", param) from None


def daily(rows: list[dict[str, Any]], start: date, end: date) -> list[dict[str, Any]]:
    """LiteLLM's summary: per day, the spend in all, by user, by model and by key token;
    every day from the first with requests to ``end`` (LiteLLM pads after the last)."""
    days: dict[str, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: r["startTime"]):
        day = r["startTime"][:10]
        d = days.setdefault(day, {"spend": 0.0, "users": defaultdict(float),
                                  "models": defaultdict(float), "keys": defaultdict(float)})
        d["spend"] += r["spend"]
        d["users"][r["user"]] += r["spend"]
        d["models"][r["model"]] += r["spend"]
        if r["api_key"]:
            d["keys"][r["api_key"]] += r["spend"]
    out = [{**d["keys"], "startTime": day, "spend": d["spend"], "users": dict(d["users"]),
            "models": dict(d["models"])} for day, d in days.items()]
    last = max((date.fromisoformat(day) for day in days), default=None)
    if last is not None:
        out += [{"startTime": (last + timedelta(days=n)).isoformat(), "spend": 0,
                 "users": {}, "models": {}} for n in range(1, (end - last).days + 1)]
    return out


def build_router() -> APIRouter:
    r = APIRouter(tags=["spend"], route_class=OpenAIErrorRoute,
                  dependencies=[Depends(require_admin)])

    @r.get("/spend/logs")
    async def spend_logs(request: Request, response: Response, api_key: str | None = None,
                         user_id: str | None = None, team_id: str | None = None,
                         request_id: str | None = None, start_date: str | None = None,
                         end_date: str | None = None, summarize: bool = True
                         ) -> list[dict[str, Any]]:
        admin = request_store(request).litellm_admin
        start, end = _day(start_date, "start_date"), _day(end_date, "end_date")
        token = admin.key_hash(api_key) if api_key and api_key.startswith("sk-") else api_key
        rows = await admin.spend_rows(SpendFilter(
            key_hash=token, user_id=user_id, team_id=team_id, request_id=request_id,
            start=None if start is None else datetime.combine(start, time(), UTC),
            end=None if end is None else datetime.combine(end + timedelta(days=1), time(), UTC)))
        if len(rows) >= CAP:
            response.headers["x-litellm-spend-logs-truncated"] = "true"
        if start is not None and end is not None and summarize:
            return daily(rows, start, end)
        return rows

    return r
