"""The learning loop inside one gateway: remember routed requests, hot-swap, retrain on time.

Built by ``build_learning(ctx)``; the app's lifespan starts and closes it. Options come from the
``retraining:`` section of config.yaml, typed in gateway/config/retraining.py (a key it
does not know is a config error). A cold-start backend whose belief has seen no outcome is
refined at its first, within ``poll_s``. Each scheduled refinement round then certifies the
promise routes from their judged pairs and publishes what changed (certify_routes.py).

Recording a request happens after the client has its answer (in the response's background
task), in a worker thread: the request path gains no database round trip. Requests that
arrive while a write is in flight are written together next (``tables.record_served_many``):
one transaction for a burst, not one each (at c=32 that was ~0.3 ms of CPU a request).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from typing import Any

import anyio.to_thread

from gateway.context import GatewayContext
from gateway.learning import exploration_ledger, leases, router_versions
from gateway.learning import tables as ldb
from gateway.learning.certify_routes import certify_due
from gateway.learning.hotswap import HotSwapper
from gateway.learning.judges import build_judge
from gateway.learning.refine_priors import refine_due
from gateway.learning.retrain import RetrainConfig, ensure_seed_version, retrain_once
from gateway.learning.shadow import Explorer
from gateway.serving.plan.routing import embed_text, message_text
from gateway.serving.record.served import Served
from gateway.store import prompt_keys
from gateway.store.dberrors import is_unavailable

log = logging.getLogger(__name__)
RECORD_BATCH = 500  # requests per learning write
MAX_UNRECORDED = 50_000  # waiting beyond this (a database far behind), the oldest are dropped


class Learning:
    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx
        opts = ctx.settings.retraining
        self.poll_s = opts.poll_s
        self.interval_s = opts.interval_s
        self.refine_s = opts.refine_priors_s  # cold start; None = off
        self.holder_id = uuid.uuid4().hex
        self._refining: asyncio.Task[None] | None = None
        self._seeding: asyncio.Task[None] | None = None  # the seed version, once reachable
        self.store_text = (ctx.settings.log_prompts if opts.store_prompt_text is None
                           else opts.store_prompt_text)
        self.retrain_config = RetrainConfig(min_new=opts.min_observations, margin=opts.margin)
        self.swapper = HotSwapper(ctx.store.engine, ctx.pool, self.poll_s)
        xcfg = opts.exploration
        self.explorer = Explorer(ctx.store.engine, ctx.pool, xcfg,
                                 build_judge(ctx.pool.current, xcfg, ctx.transport),
                                 transport=ctx.transport)
        self._tasks: set[asyncio.Task[Any]] = set()
        # requests this replica served lately: feedback that arrives before the row is
        # written (it is written after the response) still finds its request here
        self._recent: OrderedDict[str, dict] = OrderedDict()
        self.recent_size = 50_000
        self._schedule: asyncio.Task[None] | None = None
        self._unrecorded: list[dict] = []  # requests waiting for the next learning write
        self._recording = False
        # requests numbered as they are remembered; an exploration waits until its own request
        # is written, and with it the route's share allowance credited (``_record``)
        self._seq = 0
        self._written = 0
        self._written_cond: asyncio.Condition | None = None
        self.unrecorded_dropped = 0  # requests never recorded: the queue was full

    @property
    def engine(self) -> Any:
        return self.ctx.store.engine

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def after_request(self, served: Served) -> None:
        """Remember a routed, answered request so feedback and shadow calls can attach to it."""
        if (served.status != 200 or not served.pool or served.backend is None
                or served.phi is None):
            return
        # the prompt-key text: cut once, here, with the server-wide encoder_max_chars (as
        # routing embeds it); the shadow explorer keys and judges this same text
        text = embed_text(served.messages, self.ctx.settings.encoder_max_chars)
        # the deployment's prompt-key secret, for this call and the tasks it spawns (the
        # shadow explorer keys the same prompt): a keyed hash, never a plain one
        secret = self.ctx.store.prompt_secret
        if secret:
            prompt_keys.CURRENT.set(secret)
        kwargs = {
            "request_id": served.request_id,
            "tenant_id": served.tenant_id,
            "text": text if self.store_text else None,
            "key": ldb.prompt_key(text, secret),
            "embedding": served.phi,
            "route": served.route,
            "model": served.router_model,
            "backend": served.backend,
            "cost_usd": served.cost_usd,
        }
        self._seq += 1
        seq = self._seq
        self._recent[served.request_id] = {
            k: v for k, v in kwargs.items() if k not in ("embedding", "text")}
        while len(self._recent) > self.recent_size:
            self._recent.popitem(last=False)
        self._unrecorded.append({**kwargs, "_seq": seq})
        if len(self._unrecorded) > MAX_UNRECORDED:  # the database is far behind: keep the newest
            del self._unrecorded[0]
            self.unrecorded_dropped += 1
            if self.unrecorded_dropped % 1000 == 1:  # a line per thousand, not one a request
                log.warning("%d served requests not recorded for learning so far: %d wait "
                            "for the database already", self.unrecorded_dropped, MAX_UNRECORDED)
        if not self._recording:
            self._recording = True
            self._spawn(self._record())
        chars = sum(len(message_text(m.get("content"))) for m in served.messages
                    if isinstance(m, dict))
        if self.explorer.wants(served.route, chars):
            self._spawn(self._explore(served, text, seq))

    async def _explore(self, served: Served, prompt: str, seq: int) -> None:
        try:
            await self._until_written(seq)
            await self.explorer.explore(served, prompt)
        except Exception:  # exploration must never break serving
            log.exception("shadow exploration of %s failed", served.request_id)

    def recent(self, request_id: str) -> dict | None:
        """A request this replica served (same keys as a ``learning_requests`` row)."""
        row = self._recent.get(request_id)
        if row is None:
            return None
        return {**row, "prompt_key": row["key"]}

    def _cond(self) -> asyncio.Condition:
        if self._written_cond is None:
            self._written_cond = asyncio.Condition()
        return self._written_cond

    async def _until_written(self, seq: int, timeout_s: float = 30.0) -> None:
        """Wait (bounded) until request ``seq`` is written and its spend credited to its
        route's exploration allowance, so that request's exploration can be booked on it."""
        cond = self._cond()
        async with cond:
            try:
                await asyncio.wait_for(cond.wait_for(lambda: self._written >= seq), timeout_s)
            except TimeoutError:
                pass

    def _write(self, batch: list[dict]) -> None:
        """One learning write: the requests, then their routes' exploration allowances
        (``max_share`` of what each was charged; gateway/learning/exploration_ledger.py)."""
        ldb.record_served_many(self.engine, [
            {k: v for k, v in row.items() if k != "_seq"} for row in batch])
        share = self.explorer.cfg.max_share
        if share is None or not self.explorer.active:
            return
        credit: dict[str, float] = {}
        for row in batch:
            if row["route"] and row["cost_usd"]:
                scope = exploration_ledger.share_scope(row["route"])
                credit[scope] = credit.get(scope, 0.0) + share * float(row["cost_usd"])
        exploration_ledger.credit(self.engine, credit)

    async def _record(self) -> None:
        """Write what waits, in batches, until nothing does (one such task at a time)."""
        try:
            while self._unrecorded:
                batch = self._unrecorded[:RECORD_BATCH]
                del self._unrecorded[:RECORD_BATCH]
                try:
                    await anyio.to_thread.run_sync(self._write, batch)
                except Exception:  # the learning record must never break serving
                    log.exception("could not record %d requests for learning (first %s)",
                                  len(batch), batch[0]["request_id"])
                cond = self._cond()
                async with cond:
                    self._written = max(self._written, batch[-1]["_seq"])
                    cond.notify_all()
        finally:
            self._recording = False

    async def _retrain_loop(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                report = await anyio.to_thread.run_sync(
                    lambda: retrain_once(self.engine, self.ctx.pool.current.router,
                                         self.retrain_config)
                )
                log.info("scheduled retrain: %s", report.get("status"))
            except Exception:  # a failed retrain leaves the live router as it is
                log.exception("scheduled retrain failed")

    async def _refine_loop(self, every_s: float) -> None:
        """Cold-start backends: refine their descriptors from new outcomes, on a schedule.
        Between scheduled rounds, every ``poll_s``, a backend whose belief has seen no outcome
        yet is refined as soon as it has one (``first_only``): until then it routes on a prior
        or a published claim that nothing has checked, and a wrong one would route for a
        whole period. Its pool is then left alone until the result is swapped in (any swap:
        back to that pool too, after a rollback). What is refined is the database's active
        version, never one an operator's rollback holds (refine_priors.refine_due)."""
        tick = min(self.poll_s, every_s)
        last_round = time.monotonic()
        refined_on: str | None = None  # the pool version a first-evidence refinement left
        failing = False  # a fault is logged once, not at every poll while it lasts
        while True:
            await asyncio.sleep(tick)
            pool = self.ctx.pool.current
            scheduled = time.monotonic() - last_round >= every_s - 1e-6
            if refined_on is not None and pool.version != refined_on:
                refined_on = None  # swapped since: a rollback to it is refined afresh
            if not scheduled and refined_on is not None:
                continue
            try:
                if await anyio.to_thread.run_sync(
                    leases.acquire_lease, self.engine, "refine", self.holder_id, every_s
                ):
                    done = await anyio.to_thread.run_sync(
                        refine_due, self.engine, pool, not scheduled)
                    if scheduled:
                        last_round = time.monotonic()
                    if done:
                        refined_on = pool.version
                        log.info("cold-start backends refined: %s", ", ".join(done))
                    if scheduled:  # then the promises' certificates, on what refinement left
                        await self._certify(pool)
                if failing:
                    log.info("cold-start refinement works again")
                failing = False
            except Exception:  # a failed refinement leaves the live router as it is
                if not failing:
                    log.exception("scheduled cold-start refinement failed (logged once "
                                  "until it works again)")
                failing = True

    async def _certify(self, pool: Any) -> None:
        """Certify the promising routes from their judged pairs and publish what changed
        (gateway/learning/certify_routes.py); the lease holder only, as refinement."""
        try:
            changed = await anyio.to_thread.run_sync(certify_due, self.engine, pool)
        except router_versions.Held:
            log.info("certificates not published: an operator's rollback holds the router")
            return
        except router_versions.StaleParent as e:
            log.warning("certificates dropped: built on %s, but %s is active now; the next "
                        "round builds on it", e.parent, e.active)
            return
        if changed:
            log.info("promise certificates published for: %s", ", ".join(changed))

    async def start(self) -> None:
        # A database that is down at start must not stop the gateway: the seed
        # version is recorded in the background once the database answers.
        try:
            await anyio.to_thread.run_sync(ensure_seed_version, self.engine,
                                           self.ctx.pool.current.router)
        except Exception as e:
            if not is_unavailable(e):
                raise
            log.warning("database unavailable at start: router version recorded later")
            self._seeding = asyncio.get_running_loop().create_task(self._seed_when_reachable())
        self.swapper.start()
        if self.refine_s:
            self._refining = asyncio.get_running_loop().create_task(
                self._refine_loop(float(self.refine_s))
            )
        if self.interval_s:
            loop = asyncio.get_running_loop()
            self._schedule = loop.create_task(self._retrain_loop(float(self.interval_s)))

    async def _seed_when_reachable(self, every_s: float = 2.0) -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                await anyio.to_thread.run_sync(ensure_seed_version, self.engine,
                                               self.ctx.pool.current.router)
                return
            except Exception as e:
                if not is_unavailable(e):
                    log.exception("recording the router's seed version failed")
                    return

    async def close(self) -> None:
        if self._seeding is not None:
            self._seeding.cancel()
        await self.swapper.close()
        if self._schedule is not None:
            self._schedule.cancel()
        if self._refining is not None:
            self._refining.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def build_learning(ctx: GatewayContext) -> Learning:
    """The learning loop for ``ctx`` (its store is SQL: observations, versions, leases)."""
    return Learning(ctx)
