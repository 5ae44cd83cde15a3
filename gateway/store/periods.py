"""Budget periods: where the current period starts, in UTC.

Boundaries are calendar boundaries in UTC: daily at 00:00, weekly on Monday 00:00 (ISO
weeks), monthly on the 1st at 00:00. A `total` budget never rolls over, so its period start
is the epoch and no stored start is ever older than it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gateway.store.models import PERIODS


def utcnow() -> datetime:
    """Now, as an aware UTC datetime: the one clock the stored timestamps are read against."""
    return datetime.now(UTC)


def validate_period(period: str) -> str:
    if period not in PERIODS:
        raise ValueError(f"period must be one of {', '.join(PERIODS)}, not {period!r}")
    return period


def period_start(period: str, now: datetime) -> datetime:
    """Start of the period containing `now` (aware, UTC)."""
    validate_period(period)
    now = now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "daily":
        return day
    if period == "weekly":
        return day - timedelta(days=day.weekday())
    if period == "monthly":
        return day.replace(day=1)
    return datetime(1970, 1, 1, tzinfo=UTC)


def period_end(period: str, now: datetime) -> datetime | None:
    """Start of the next period (when the spend restarts); None for a `total` budget."""
    start = period_start(period, now)
    if period == "daily":
        return start + timedelta(days=1)
    if period == "weekly":
        return start + timedelta(days=7)
    if period == "monthly":
        return start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
    return None


def period_start_s(period: str, now: datetime) -> int:
    """`period_start` as integer epoch seconds, the form the ledger compares."""
    return int(period_start(period, now).timestamp())
