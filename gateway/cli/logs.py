"""``tollgate logs``: read the request log from the terminal.

Filters (all optional, combined with AND): ``--tenant`` (name or id, repeatable), ``--key``
(a key's id, token or alias, repeatable), ``--user`` (the developer's LiteLLM user_id),
``--session`` (one conversation's session id), ``--route``
(``passthrough`` for unrouted requests), ``--model`` (the backend that answered), ``--status``
(200, 4xx, ok, error), ``--since`` / ``--until`` (ISO time or an age like 15m, 2h, 7d),
``--feedback`` (with, without, positive, negative). Formats: a readable ``table`` (default),
``csv``, ``jsonl`` (the whole row with candidates, attempts and feedback), or
``routing-table``: the generic long format ``prompt_id, prompt, model, quality, cost,
category`` that ``router_core.data.load_dataset`` reads, one row per feedback event on an
answered request, for offline evaluation and training. ``--follow`` keeps printing new rows.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sys
import time
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import click

from gateway.review.dashboard.queries import (
    LogFilter,
    feedback_scores,
    flat,
    parse_time,
    resolve_keys,
    resolve_tenants,
    select_logs,
)

TABLE_COLUMNS = (  # (header, width); the last column takes the rest of the line
    ("time (UTC)", 19), ("request id", 35), ("tenant", 14), ("route", 11), ("model", 16),
    ("status", 6), ("cost usd", 11), ("ms", 8), ("tries", 5), ("feedback", 8), ("reason", 0),
)
CSV_FIELDS = (
    "id", "created_at", "tenant_id", "tenant", "route", "lam", "router_version",
    "chosen_model", "status", "prompt_tokens", "completion_tokens", "cost_usd",
    "reserved_usd", "latency_ms", "ttft_ms", "stream", "attempts", "fallbacks", "equivalent",
    "reason", "error", "feedback_count", "feedback_mean", "key_id", "user_id", "session_id",
)
ROUTING_FIELDS = ("prompt_id", "prompt", "model", "quality", "cost", "category")
FOLLOW_LOOKBACK = timedelta(minutes=15)
FORMATS = ("table", "csv", "jsonl", "routing-table")


def _ts(v: Any) -> str:
    return v.strftime("%Y-%m-%d %H:%M:%S") if isinstance(v, datetime) else str(v or "")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def table_header() -> str:
    return " ".join(h.ljust(w) if w else h for h, w in TABLE_COLUMNS).rstrip()


def table_line(row: dict[str, Any], names: dict[str, str]) -> str:
    f = flat(row, names)
    fb = "-" if not f["feedback_count"] else (
        f"{f['feedback_count']}×{f['feedback_mean']:.2f}" if f["feedback_mean"] is not None
        else str(f["feedback_count"]))
    cost = "" if f["cost_usd"] is None else f"{f['cost_usd']:.8f}"
    ms = "" if f["latency_ms"] is None else f"{f['latency_ms']:.0f}"
    reason = f["error"] if f["status"] and f["status"] >= 400 else f["reason"]
    attempts = row.get("attempts") or []
    if len(attempts) > 1:  # the fallback path first: it is what the reader looks for
        path = " > ".join(f"{a.get('model')}:{a.get('status')}" for a in attempts)
        reason = f"[{path}] {reason or ''}"
    cells = (_ts(row.get("created_at")), f["id"], str(f["tenant"] or ""), f["route"],
             str(f["chosen_model"] or ""), str(f["status"] or ""), cost, ms,
             str(f["attempts"]), fb, str(reason or ""))
    out = []
    for (_, w), cell in zip(TABLE_COLUMNS, cells, strict=True):
        out.append(_cut(cell, w).ljust(w) if w else _cut(cell, 70))
    return " ".join(out).rstrip()


def prompt_id(row: dict[str, Any]) -> str:
    """Requests with the same logged prompt share an id (their feedback becomes repeated
    observations of one prompt); without a logged prompt each request is its own prompt."""
    text = row.get("prompt_text")
    if text:
        return "p-" + hashlib.sha256(text.encode()).hexdigest()[:16]
    return str(row["id"])


def routing_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Long-format rows: one per feedback event on an answered request.

    quality = the feedback score (∈ [0, 1]), cost = the settled USD of the request, model =
    the backend that answered, category = the route. Requests without feedback carry no
    quality and are left out; without ``log_prompts`` the prompt column is empty."""
    out = []
    for row in rows:
        if row.get("status") != 200 or not row.get("chosen_model"):
            continue
        for score in feedback_scores(row):
            out.append({
                "prompt_id": prompt_id(row),
                "prompt": row.get("prompt_text") or "",
                "model": row["chosen_model"],
                "quality": min(1.0, max(0.0, score)),
                "cost": row.get("cost_usd") or 0.0,
                "category": row.get("route") or "passthrough",
            })
    return out


def _json_default(v: Any) -> Any:
    if isinstance(v, datetime):
        return v.isoformat()
    return str(v)


class Printer:
    """Writes rows in one format; the header (table, csv) only once."""

    def __init__(self, fmt: str, out: TextIO, names: dict[str, str]) -> None:
        self.fmt, self.out, self.names = fmt, out, names
        self._started = False
        self._csv: csv.DictWriter | None = None

    def write(self, rows: list[dict[str, Any]]) -> None:
        if self.fmt == "jsonl":
            for r in rows:
                r = {**r, "tenant": self.names.get(r.get("tenant_id") or "")}
                self.out.write(json.dumps(r, default=_json_default) + "\n")
        elif self.fmt == "table":
            if not self._started:
                self.out.write(table_header() + "\n")
            for r in rows:
                self.out.write(table_line(r, self.names) + "\n")
        else:
            fields = CSV_FIELDS if self.fmt == "csv" else ROUTING_FIELDS
            items = [flat(r, self.names) for r in rows] if self.fmt == "csv" else routing_rows(
                rows)
            if self._csv is None:
                self._csv = csv.DictWriter(self.out, fieldnames=list(fields),
                                           extrasaction="ignore", lineterminator="\n")
                self._csv.writeheader()
            self._csv.writerows(items)
        self._started = True
        self.out.flush()


def _names(engine: Any) -> dict[str, str]:
    from gateway.review.dashboard.queries import tenant_names

    return tenant_names(engine)


@click.command("logs")
@click.option("--tenant", "tenants", multiple=True, help="Tenant name or id (repeatable).")
@click.option("--key", "keys", multiple=True,
              help="A key's id, token or alias (repeatable): the requests it made.")
@click.option("--user", "user_id", default=None, help="A developer's LiteLLM user_id.")
@click.option("--session", "session_id", default=None,
              help="A conversation's session id (x-claude-code-session-id, ...).")
@click.option("--route", default=None, help="Route name; 'passthrough' for unrouted requests.")
@click.option("--model", default=None, help="The backend that answered.")
@click.option("--status", default=None, help="200, 4xx, 5xx, ok or error.")
@click.option("--since", default=None, help="ISO time or an age: 15m, 2h, 7d.")
@click.option("--until", default=None, help="ISO time or an age: 15m, 2h, 7d.")
@click.option("--feedback", type=click.Choice(["with", "without", "positive", "negative"]),
              default=None, help="Requests with/without feedback, or by its mean score.")
@click.option("--limit", type=int, default=50, show_default=True,
              help="At most this many rows (the newest); 0 = no limit.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table",
              show_default=True)
@click.option("--output", "-o", type=click.File("w"), default="-",
              help="Write to this file instead of stdout.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new rows as they arrive.")
@click.option("--interval", type=float, default=1.0, show_default=True,
              help="Seconds between polls with --follow.")
@click.option("--explain", "explain_id", default=None, metavar="REQUEST_ID",
              help="Print one request's routing explanation (JSON) instead of rows.")
@click.option("--database-url", default=None,
              help="Database URL (default: the database of the config `serve` reads).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="config.yaml whose database_url to use (default: as `serve`: "
                   "$TOLLGATE_CONFIG, ./config.yaml, ...; TOLLGATE_DATABASE_URL wins).")
def logs_command(tenants: tuple[str, ...], keys: tuple[str, ...], user_id: str | None,
                 session_id: str | None, route: str | None, model: str | None,
                 status: str | None, since: str | None, until: str | None,
                 feedback: str | None, limit: int, fmt: str, output: TextIO, follow: bool,
                 interval: float, explain_id: str | None, database_url: str | None,
                 config_path: str | None) -> None:
    """Show routed requests: decisions, costs, latency, fallbacks and feedback."""
    import sqlalchemy as sa

    from gateway.config import resolve_database_url
    from gateway.store.engine import make_engine

    url = resolve_database_url(database_url, config_path)
    _require_existing_sqlite(url)  # reading never creates an empty database file
    engine = make_engine(url)
    try:
        if "request_logs" not in sa.inspect(engine).get_table_names():
            raise click.ClickException(
                f"no request log in {engine.url.render_as_string(hide_password=True)}: "
                "start the gateway on it (or run `tollgate db upgrade`) first")
        if explain_id is not None:
            from gateway.review.dashboard.queries import fetch_log
            from gateway.review.explain import explain_row

            row = fetch_log(engine, explain_id)
            if row is None:
                raise click.ClickException(f"no request {explain_id!r} in the log")
            output.write(json.dumps(explain_row(row), indent=2, default=_json_default) + "\n")
            return
        try:
            f = LogFilter(
                tenant_ids=resolve_tenants(engine, tenants) if tenants else None,
                key_ids=resolve_keys(engine, keys) if keys else None,
                user_id=user_id, session_id=session_id, route=route, model=model, status=status, since=parse_time(since),
                until=parse_time(until), feedback=feedback, limit=limit or None,
            )
            rows = select_logs(engine, f)
        except ValueError as e:
            raise click.BadParameter(str(e)) from e
        names = _names(engine)
        printer = Printer(fmt, output, names)
        rows.reverse()  # the newest N, printed oldest first like a log
        printer.write(rows)
        if not follow:
            return
        follow_rows(engine, f, printer, names, rows, interval)
    except KeyboardInterrupt:
        pass
    finally:
        engine.dispose()


def _require_existing_sqlite(url: str) -> None:
    """A SQLite file that is not there is an error, not an empty database left behind."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    if u.get_backend_name() != "sqlite" or u.database in (None, "", ":memory:"):
        return
    if u.database.startswith("file:") or Path(u.database).is_file():
        return
    raise click.ClickException(
        f"no database at {Path(u.database).resolve()}: the gateway creates it when it first "
        "starts there; to read another, pass --config (the config `serve` uses) or "
        "--database-url")


def follow_rows(engine: Any, f: LogFilter, printer: Printer, names: dict[str, str],
                shown: list[dict[str, Any]], interval: float) -> None:
    """Poll for rows not shown yet, forever.

    A row is written when its request ends but is stamped with its start, so a long request
    can land behind rows already printed: each poll looks back ``FOLLOW_LOOKBACK`` from the
    newest row seen and skips ids already printed."""
    seen = {r["id"]: r["created_at"] for r in shown}
    newest = max(seen.values(), default=None) or parse_time("0s")
    while True:
        time.sleep(interval)
        since = newest - FOLLOW_LOOKBACK
        if f.since is not None:
            since = max(since, f.since)
        polled = select_logs(engine, replace(f, since=since, limit=None, newest_first=False))
        new = [r for r in polled if r["id"] not in seen]
        if not new:
            continue
        if any(r.get("tenant_id") not in names for r in new):
            names.update(_names(engine))
        printer.write(new)
        for r in new:
            seen[r["id"]] = r["created_at"]
        newest = max(newest, *(r["created_at"] for r in new))
        seen = {k: t for k, t in seen.items() if t >= newest - FOLLOW_LOOKBACK}


def render(rows: list[dict[str, Any]], fmt: str, names: dict[str, str] | None = None) -> str:
    """Rows in ``fmt`` as a string (for tests and the dashboard's export)."""
    buf = io.StringIO()
    Printer(fmt, buf, names or {}).write(rows)
    return buf.getvalue()


if __name__ == "__main__":  # pragma: no cover
    logs_command(sys.argv[1:])
