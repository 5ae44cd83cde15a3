"""The loop watch sees a held event loop and says where it was held: a coroutine that blocks
(here ``time.sleep``, standing in for CPU work) is observed in the stall histogram and logged
with its own frame, so an operator knows what to move off the loop."""

from __future__ import annotations

import asyncio
import linecache
import logging
import time

from prometheus_client import CollectorRegistry

from gateway.reliability.loop_watch import LoopWatch
from gateway.review.metrics import GatewayMetrics


def _stall_count(registry: CollectorRegistry) -> float:
    return registry.get_sample_value("tollgate_event_loop_stall_seconds_count") or 0.0


def blocks_the_loop_for(seconds: float) -> None:
    time.sleep(seconds)


def test_a_blocking_call_on_the_loop_is_measured_and_located(caplog) -> None:
    metrics = GatewayMetrics(CollectorRegistry())

    async def main() -> LoopWatch:
        watch = LoopWatch(metrics.loop_stalls)
        watch.start()
        await asyncio.sleep(0.05)
        blocks_the_loop_for(0.3)
        await asyncio.sleep(0.05)  # the heartbeat runs late once: the stall ends
        watch.stop()
        return watch

    linecache.clearcache()
    with caplog.at_level(logging.WARNING, logger="tollgate.loop"):
        watch = asyncio.run(main())
    # no source file was read to say where (a read entry holds its lines; a lazy one does not)
    assert [f for f, entry in linecache.cache.items() if len(entry) > 1] == []
    assert watch.worst_s >= 0.25  # held at least as long as the sleep, less timer slack
    assert _stall_count(metrics.registry) >= 1
    held = [r.getMessage() for r in caplog.records if "event loop held" in r.getMessage()]
    assert any("blocks_the_loop_for" in m for m in held), held
    # innermost first, as file:line function: the blocking call, then the coroutine calling it
    line = blocks_the_loop_for.__code__.co_firstlineno + 1  # its time.sleep
    assert any(f"test_loop_watch.py:{line} blocks_the_loop_for <- " in m
               and "test_loop_watch.py:" in m.split(" <- ")[1] and " main" in m for m in held), held


def test_awaiting_is_not_a_stall() -> None:
    """Waiting on the loop's timers lets the heartbeat run: a long await is no stall."""
    metrics = GatewayMetrics(CollectorRegistry())

    async def main() -> LoopWatch:
        watch = LoopWatch(metrics.loop_stalls, stall_s=0.5)
        watch.start()
        await asyncio.sleep(1.0)
        watch.stop()
        return watch

    assert asyncio.run(main()).worst_s < 0.5


def test_a_starved_loop_is_counted_every_time_and_logged_once_a_while(caplog) -> None:
    """Many stalls in a row (a starved host): each one is in the histogram, the log gets one
    line, which says how many it left out when the next line is due."""
    metrics = GatewayMetrics(CollectorRegistry())

    async def main() -> None:
        watch = LoopWatch(metrics.loop_stalls, warn_s=0.1)
        watch.start()
        for _ in range(4):
            await asyncio.sleep(0.03)
            blocks_the_loop_for(0.12)
        await asyncio.sleep(0.05)
        watch.stop()

    with caplog.at_level(logging.WARNING, logger="tollgate.loop"):
        asyncio.run(main())
    held = [r for r in caplog.records if "event loop held" in r.getMessage()]
    assert _stall_count(metrics.registry) >= 4
    assert len(held) == 1  # the others within LOG_EVERY_S are counted, not written


def test_a_stall_under_the_warning_threshold_is_counted_not_logged(caplog, monkeypatch) -> None:
    """Below 250 ms (the default; TOLLGATE_LOOP_WARN_MS) a stall is in the histogram only."""
    metrics = GatewayMetrics(CollectorRegistry())

    async def main() -> LoopWatch:
        watch = LoopWatch(metrics.loop_stalls)
        watch.start()
        await asyncio.sleep(0.03)
        blocks_the_loop_for(0.15)
        await asyncio.sleep(0.05)
        watch.stop()
        return watch

    monkeypatch.delenv("TOLLGATE_LOOP_WARN_MS", raising=False)
    with caplog.at_level(logging.WARNING, logger="tollgate.loop"):
        watch = asyncio.run(main())
    assert watch.warn_s == 0.25 and watch.worst_s >= 0.1
    assert _stall_count(metrics.registry) >= 1
    assert not [r for r in caplog.records if "event loop held" in r.getMessage()]
    monkeypatch.setenv("TOLLGATE_LOOP_WARN_MS", "100")
    assert LoopWatch(metrics.loop_stalls).warn_s == 0.1


def test_a_loop_idle_in_its_poll_is_never_warned_about(caplog) -> None:
    """A late heartbeat whose samples all show the loop waiting for I/O (its own idle frames:
    the selector, or asyncio/runners.py under uvloop, whose loop is C) is the process not
    being scheduled: counted, not logged. The samples are given as the watch thread records
    them (a host that starves this process cannot be made on demand)."""
    metrics = GatewayMetrics(CollectorRegistry())
    watch = LoopWatch(metrics.loop_stalls)
    idle = [("/usr/lib/python3.11/asyncio/runners.py:118 run",
             "/usr/lib/python3.11/asyncio/runners.py:190 run"),
            ("/usr/lib/python3.11/selectors.py:468 select",
             "/usr/lib/python3.11/asyncio/base_events.py:1898 _run_once")]
    with caplog.at_level(logging.WARNING, logger="tollgate.loop"):
        for where in idle:
            watch._seen[where] += 3
            watch._ended(0.6)
        watch._ended(0.6)  # no sample at all
        watch._seen[("gateway/serving/x.py:10 hot", "gateway/app.py:5 handler")] += 1
        watch._ended(0.6)  # the loop was seen running code: a warning naming it
    held = [r.getMessage() for r in caplog.records if "event loop held" in r.getMessage()]
    assert held == [("event loop held for 600 ms at: gateway/serving/x.py:10 hot <- "
                     "gateway/app.py:5 handler")]
    assert _stall_count(metrics.registry) == 4
