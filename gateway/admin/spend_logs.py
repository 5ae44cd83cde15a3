"""LiteLLM Proxy's ``GET /spend/logs``, on the admin (LiteLLM master) key, read from the request
log: who spent what, per request.

    ?api_key=   a key (``sk-...``) or its token (the hash /key/generate answers)
    ?user_id=   the requests of that user (recorded on the row, else its key's user)
    ?team_id=   a team's (tenant's) requests, by id or alias
    ?session_id=  one conversation's requests (x-claude-code-session-id, x-litellm-session-id
               or metadata.session_id when it was made)
    ?request_id=
    ?start_date=YYYY-MM-DD&end_date=YYYY-MM-DD   the days from start_date through end_date
    ?summarize=true (default with both dates): one entry per day, as LiteLLM's
               {"startTime", "spend", "users", "models", <token>: spend}, days without
               requests padded to end_date; false: the requests themselves
    ?page=1&page_size=1000   the requests come in pages of at most 1000

Each request: ``request_id``, ``call_type``, ``api_key`` (the key's token, never the key),
``spend``, ``total_tokens``, ``prompt_tokens``, ``completion_tokens``, ``startTime``,
``endTime``, ``model``, ``model_group`` (the route or backend asked for), ``user``,
``team_id``, ``session_id``, ``request_tags``, ``metadata`` (status, error, route, session);
newest first. No prompt or answer text.

Bounded (issue 48, item 8): a date is a real day from ``FIRST_DAY`` through ``LAST_DAY`` (a
400 otherwise, never an overflow's 500), a range spans at most ``MAX_RANGE_DAYS`` days, a page
holds at most ``PAGE_MAX`` rows read without the routing decision's JSON, a summary is summed
by the database. When more rows follow a page, the answer carries LiteLLM's
``x-litellm-spend-logs-truncated: true`` and ``x-tollgate-next-page: <n>``.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response

from gateway.admin.api import OpenAIErrorRoute, request_store, require_admin
from gateway.errors import invalid
from gateway.store.spend_logs import PAGE_MAX, SpendFilter

FIRST_DAY, LAST_DAY = date(2000, 1, 1), date(2199, 12, 31)
MAX_RANGE_DAYS = 366
MAX_PAGE = 1_000_000  # page × page_size stays a small integer for the database's OFFSET


def _day(value: str | None, param: str) -> date | None:
    if value is None:
        return None
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise invalid(f"{param} must be a date as YYYY-MM-DD, got {value!r}", param) from None
    if not FIRST_DAY <= day <= LAST_DAY:
        raise invalid(f"{param} must be a day from {FIRST_DAY} through {LAST_DAY}, got "
                      f"{value!r}", param)
    return day


def _range(start: date | None, end: date | None) -> None:
    """400 for a range that runs backwards or spans more than ``MAX_RANGE_DAYS`` days."""
    if start is None or end is None:
        return
    if end < start:
        raise invalid(f"end_date {end} is before start_date {start}", "end_date")
    if (end - start).days + 1 > MAX_RANGE_DAYS:
        raise invalid(f"a range spans at most {MAX_RANGE_DAYS} days, got "
                      f"{(end - start).days + 1}; ask for it in parts", "end_date")


def daily(groups: list[dict[str, Any]], start: date, end: date) -> list[dict[str, Any]]:
    """LiteLLM's summary: per day, the spend in all, by user, by model and by key token;
    every day from the first with requests to ``end`` (LiteLLM pads after the last). ``groups``
    are the database's sums per day, user, model and key (gateway/store/spend_logs.py)."""
    days: dict[str, dict[str, Any]] = {}
    for r in sorted(groups, key=lambda r: r["day"]):
        day = r["day"]
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
                         request_id: str | None = None, session_id: str | None = None,
                         start_date: str | None = None, end_date: str | None = None,
                         summarize: bool = True,
                         page: int = Query(1, ge=1, le=MAX_PAGE),
                         page_size: int = Query(PAGE_MAX, ge=1, le=PAGE_MAX),
                         ) -> list[dict[str, Any]]:
        admin = request_store(request).litellm_admin
        start, end = _day(start_date, "start_date"), _day(end_date, "end_date")
        _range(start, end)
        token = admin.key_hash(api_key) if api_key and api_key.startswith("sk-") else api_key
        f = SpendFilter(
            key_hash=token, user_id=user_id, team_id=team_id, request_id=request_id,
            session_id=session_id,
            start=None if start is None else datetime.combine(start, time(), UTC),
            end=None if end is None else datetime.combine(end + timedelta(days=1), time(), UTC))
        if start is not None and end is not None and summarize:
            groups, more = await admin.spend_groups(f)
            if more:
                response.headers["x-litellm-spend-logs-truncated"] = "true"
            return daily(groups, start, end)
        rows, more = await admin.spend_rows(f, page, page_size)
        if more:
            response.headers["x-litellm-spend-logs-truncated"] = "true"
            response.headers["x-tollgate-next-page"] = str(page + 1)
        return rows

    return r
