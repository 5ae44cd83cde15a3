"""How long the event loop was held, and by what: a heartbeat on the loop, a watchdog thread.

One request's CPU work on the event loop delays every other tenant's requests (and /health),
so a held loop is an incident to see, not to infer from latency. A heartbeat on the loop is
due every ``tick_s``; when it runs ``stall_s`` or more late, the loop could run nothing else
for that long (its own work, or the GIL held by another thread: /health waited as long).
Every such stall is observed in ``tollgate_event_loop_stall_seconds``. It is logged, at most
once every ``LOG_EVERY_S`` (with a count of those not written), when it lasted ``warn_s`` or
more (``TOLLGATE_LOOP_WARN_MS``, default 250: on a shared 2-core host a loop idle in its poll
is late by 50-110 ms now and then, which no request caused) and the loop thread was seen
running code: a daemon thread samples its stack (``sys._current_frames``) while the heartbeat
is overdue, and the log names where, the place to move to a worker thread. A stall whose
samples all show the loop waiting in its poll (``selectors.py``, or ``asyncio/runners.py``
under uvloop, whose loop is C), or that had no sample at all, is the process not being
scheduled, not something it ran: counted, never logged as a warning. Sampling reads frames
only; it never holds the GIL for longer than a stack walk.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
import traceback
from collections import Counter

log = logging.getLogger("tollgate.loop")

STACK_FRAMES = 6  # frames of the held stack written to the log
LOG_EVERY_S = 10.0  # at most one warning this often; the histogram counts every stall
WARN_MS_ENV = "TOLLGATE_LOOP_WARN_MS"
DEFAULT_WARN_S = 0.25
# where a loop thread waits for I/O: a sample there means the loop was idle, not held
IDLE_FRAMES = (("selectors.py", "select"), ("asyncio/runners.py", "run"),
               ("asyncio/base_events.py", "_run_once"), ("asyncio/base_events.py", "run_forever"))


def warn_s_from_env() -> float:
    """``TOLLGATE_LOOP_WARN_MS`` in seconds (default 250 ms); a value that is not a positive
    number is the default."""
    try:
        ms = float(os.environ.get(WARN_MS_ENV, ""))
    except ValueError:
        return DEFAULT_WARN_S
    return ms / 1000 if ms > 0 else DEFAULT_WARN_S


class LoopWatch:
    """Watches the running event loop from a thread; ``stop`` ends both sides."""

    def __init__(self, stalls, *, tick_s: float = 0.01, stall_s: float = 0.05,
                 warn_s: float | None = None) -> None:
        self._stalls = stalls  # a prometheus Histogram (seconds)
        self.tick_s, self.stall_s = tick_s, stall_s
        self.warn_s = warn_s_from_env() if warn_s is None else warn_s
        self._due = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._seen: Counter[tuple[str, ...]] = Counter()
        self._handle: asyncio.TimerHandle | None = None
        self._thread: threading.Thread | None = None
        self.worst_s = 0.0  # the longest stall seen (the tests read it)
        self._logged_at = -LOG_EVERY_S
        self._unlogged = 0  # stalls since the last warning, not written

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._due = time.monotonic()
        self._tick(loop)
        self._thread = threading.Thread(target=self._watch, args=(threading.get_ident(),),
                                        name="tollgate-loop-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._handle is not None:
            self._handle.cancel()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        """The heartbeat: how late it runs is how long the loop could not run anything."""
        now = time.monotonic()
        late = now - self._due
        if late >= self.stall_s:
            self._ended(late)
        self._due = now + self.tick_s
        if not self._stop.is_set():
            self._handle = loop.call_later(self.tick_s, self._tick, loop)

    def _watch(self, loop_thread: int) -> None:
        """While the heartbeat is overdue, sample where the loop thread is."""
        while not self._stop.wait(self.tick_s):
            if time.monotonic() - self._due >= self.stall_s:
                frame = sys._current_frames().get(loop_thread)
                if frame is not None:
                    where = _where(frame)
                    with self._lock:
                        self._seen[where] += 1

    def _ended(self, late_s: float) -> None:
        with self._lock:
            seen, self._seen = self._seen, Counter()
        self.worst_s = max(self.worst_s, late_s)
        self._stalls.observe(late_s)
        busy = Counter({w: n for w, n in seen.items() if not _idle(w)})
        if late_s < self.warn_s or not busy:  # short, or the loop was not running anything
            return
        seen = busy
        now = time.monotonic()
        if now - self._logged_at < LOG_EVERY_S:  # a starved host must not flood the log
            self._unlogged += 1
            return
        where = " <- ".join(seen.most_common(1)[0][0])
        more = f" (and {self._unlogged} more since the last line)" if self._unlogged else ""
        log.warning("event loop held for %.0f ms at: %s%s", late_s * 1000, where, more)
        self._logged_at, self._unlogged = now, 0


def _idle(where: tuple[str, ...]) -> bool:
    """Whether a sample's innermost frame is the loop waiting for I/O (``IDLE_FRAMES``)."""
    if not where:
        return True
    place, _, function = where[0].partition(" ")
    return any(place.split(":")[0].endswith(f) and function == fn for f, fn in IDLE_FRAMES)


def _where(frame) -> tuple[str, ...]:
    """The innermost frames of a stack, as ``file:line function``, innermost first. Only
    those frames are walked and no source line is read: ``extract_stack`` walked the whole
    stack and stat'ed (and cached in memory) every file on it, on every sample of a stall."""
    frames = traceback.StackSummary.extract(traceback.walk_stack(frame), limit=STACK_FRAMES,
                                            lookup_lines=False)
    return tuple(f"{_short(f.filename)}:{f.lineno} {f.name}" for f in frames)


def _short(path: str) -> str:
    """A library's path from its package, ours from ``gateway/`` or ``router_core/``."""
    for marker in ("site-packages/", "/gateway/", "/router_core/"):
        _, found, rest = path.partition(marker)
        if found:
            return rest if marker == "site-packages/" else marker.lstrip("/") + rest
    return path
