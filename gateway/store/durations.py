"""LiteLLM's duration strings ("30s", "30m", "30h", "30d", "2w", "1mo"): a key's expiry
(``duration``) and its budget's reset period (``budget_duration``).

A month is a calendar month from now (the same day, or the month's last day when it has
fewer), as LiteLLM's own ``duration_in_seconds`` counts "mo" (litellm/litellm_core_utils/
duration_parser.py); the other units are fixed lengths.
"""

from __future__ import annotations

import calendar
import re
from datetime import datetime, timedelta

_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d|w|mo)\s*$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_AMOUNT = 100_000  # 100,000 of any unit is past any real key's life; bigger is a typo


def validate_duration(text: str) -> str:
    """``text`` if it is a duration this module reads, else ValueError naming the forms."""
    match = _DURATION.match(text)
    if match is None or int(match.group(1)) > MAX_AMOUNT:
        raise ValueError(f"{text!r} is not a duration: use a number and s, m, h, d, w or mo "
                         "(\"30s\", \"30m\", \"30h\", \"30d\", \"1mo\")")
    return text.strip()


def after(text: str, now: datetime) -> datetime:
    """``now`` plus the duration ``text``."""
    match = _DURATION.match(validate_duration(text))
    assert match is not None  # validated above
    amount, unit = int(match.group(1)), match.group(2)
    if unit != "mo":
        return now + timedelta(seconds=amount * _SECONDS[unit])
    months = now.month - 1 + amount
    year, month = now.year + months // 12, months % 12 + 1
    day = min(now.day, calendar.monthrange(year, month)[1])
    return now.replace(year=year, month=month, day=day)
