"""Hot swap: every replica polls the database for the active router version and swaps.

The swap is one reference assignment in ``PoolHolder`` between requests: the new router's
pool is built whole first (``Pool.with_router``: the backends its artifact carries join, every
priced backend it does not know gets its cold-start prior), and a request reads
``holder.current`` once and keeps that (immutable) ``Pool`` to the end, so requests in flight
finish on the old pool and none fails. Loading the new artifact and building its pool happen
in a thread before the swap, never on the event loop.

The gateway's encoder is built from the router it starts with (``Encoder.for_router``). A
version trained on embeddings made differently (another model, window or truncation side,
e.g. one recorded before the truncation side was) would route on vectors it was not trained
for: it is not swapped in, and the refusal is logged.
"""

from __future__ import annotations

import asyncio
import logging

import anyio.to_thread
from sqlalchemy import Engine

from gateway.learning import router_versions
from gateway.pool import PoolHolder
from router_core.encoders.minilm import Encoder

log = logging.getLogger(__name__)


class HotSwapper:
    """Polls ``router_versions`` every ``interval_s`` and swaps ``holder`` to the active one."""

    def __init__(
        self,
        engine: Engine,
        holder: PoolHolder,
        interval_s: float = 5.0,
    ) -> None:
        self.engine, self.holder, self.interval_s = engine, holder, interval_s
        self.refused: set[str] = set()  # versions not swapped in (logged once)
        self._task: asyncio.Task[None] | None = None
        self.swaps = 0

    def check_once(self) -> str | None:
        """Swap if the active version differs from the current one; the new version or None."""
        row = router_versions.active_version(self.engine)
        if row is None or row["version"] == self.holder.current.version:
            return None
        if row["version"] in self.refused:
            return None
        router = router_versions.load_version(self.engine, row["version"])
        wanted = Encoder.for_router(router.config).settings()
        serving = Encoder.for_router(self.holder.current.router.config).settings()
        if wanted != serving:
            self.refused.add(row["version"])
            log.error(
                "router version %s not swapped in: trained on embeddings %s, the gateway "
                "embeds as its current router was trained, %s", row["version"], wanted, serving,
            )
            return None
        self.holder.swap(self.holder.current.with_router(router))
        self.swaps += 1
        log.info("router hot-swapped to %s", row["version"])
        return row["version"]

    async def _run(self) -> None:
        while True:
            try:
                await anyio.to_thread.run_sync(self.check_once)
            except Exception:  # a database fault must not stop the poller
                log.exception("router version poll failed")
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
