"""While the database is unavailable, background loops that poll it (the router-version
poller, the log writer, ...) would each log a full traceback on every try: hundreds of lines
a minute whose cause is one line deep inside. `serve` installs this filter on its log
handlers: a record whose exception is a database outage is logged as one line naming the
cause (no traceback), and the same message again at most once per ``every_s`` (60 s), saying
how many were held back. Other records pass unchanged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

REPEAT_EVERY_S = 60.0


def _is_outage(exc: BaseException | None) -> bool:
    from gateway.store.dberrors import is_unavailable
    from gateway.store.errors import StoreUnavailable

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, StoreUnavailable) or is_unavailable(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class DatabaseOutageFilter(logging.Filter):
    """One line per database-outage message, at most once per ``every_s``."""

    def __init__(self, every_s: float = REPEAT_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every_s = every_s
        self.clock = clock
        self._last: dict[tuple[str, str], float] = {}
        self._held: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not _is_outage(exc):
            return True
        from gateway.store.engine import describe_error

        key = (record.name, str(record.msg))
        now = self.clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.every_s:
                self._held[key] = self._held.get(key, 0) + 1
                return False
            self._last[key] = now
            held = self._held.pop(key, 0)
        again = f" ({held} more since, not shown)" if held else ""
        record.msg = f"{record.getMessage()}: database unavailable: {describe_error(exc)}{again}"
        record.args = None
        record.exc_info = None
        record.exc_text = None
        return True


def install(root: logging.Logger | None = None) -> DatabaseOutageFilter:
    """Put one filter on every handler of ``root`` (default: the root logger)."""
    root = root or logging.getLogger()
    existing = [f for h in root.handlers for f in h.filters
                if isinstance(f, DatabaseOutageFilter)]
    filt = existing[0] if existing else DatabaseOutageFilter()
    for handler in root.handlers:
        if filt not in handler.filters:
            handler.addFilter(filt)
    return filt
