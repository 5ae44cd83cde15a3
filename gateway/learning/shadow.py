"""Shadow exploration: after a client has its answer, ask other candidates and judge them all.

Per route, with probability ε, a routed request is replayed in the background to
``candidates`` other backends of the route's pool (preferring models never observed on this
prompt); every answer, the client's included, is scored by a judge and stored as an
observation (source ``shadow``; the served answer's as ``judge``). On a route with a promise,
every explored request is a judged pair with its reference, or is not explored: the reference
answers beside a cheaper served backend (``_reference_beside``), or, when the reference
served, the first of those backends answers beside it; the judge compares both answers
(``_pair``, source ``paired``). The client's response has already been sent, so its latency
does not change.

Money: every call books its worst case first (its answer capped at ``max_tokens``) on the
bounds of gateway/learning/exploration_bounds.py: the route's share of its spend, the route's
daily cap on asking its reference, the global budget; a judged pair books its whole worst
case on the share before its first call (``Explorer._pair``). On by default
(gateway/config/exploration.py).

Config (``retraining.exploration`` in config.yaml)::

    exploration:
      enabled: true             # the default; false turns learning from traffic off
      epsilon: 0.1              # or per route: {auto: 0.1, best: 0.0}
      candidates: 1             # other backends per explored request
      max_share: 0.05           # of each route's spend (null: no share bound)
      budget_usd: 5.0           # per period, separate from tenants' budgets (default: none)
      period: daily             # daily | weekly | monthly | total
      reference_budget_usd: 1.0 # per route and UTC day on shadowing the route's reference
                                # (or per route: {auto: 1.0}; default: only budget_usd)
      max_tokens: 512           # cap on each shadow answer (bounds its cost)
      judge: {kind: llm, model: gpt-4o-mini, rubric: "..."}   # or kind: reference;
                                # no model: the pool's strongest priced backend
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable
from datetime import datetime
from typing import Any

import anyio.to_thread
from sqlalchemy import Engine, select

from gateway.config import ExplorationSettings
from gateway.learning import tables as ldb
from gateway.learning.exploration_bounds import ExplorationBounds
from gateway.learning.judges import (
    Judge,
    LLMJudge,
    compare,
    compare_unseen_worst_usd,
    compare_worst_usd,
)
from gateway.learning.partners import RoutePartners
from gateway.learning.refine_priors import MIN_OUTCOMES
from gateway.pool import Pool, PoolHolder
from gateway.pool.known import outcomes_of
from gateway.prompt_tokens import count_prompt_tokens
from gateway.provider.failures import UpstreamFailure
from gateway.provider.litellm_transport import LitellmTransport
from gateway.provider.transport import TokenUsage, Transport
from gateway.serving.forwarding.deployments import chat_completion
from gateway.serving.record.served import Served
from gateway.store.periods import utcnow
from router_core.promise import JUDGE_ACCURACY

log = logging.getLogger(__name__)

# A backend on its prior is judged first on a promise route until its verdicts are worth
# MIN_OUTCOMES outcomes, the count at which it leaves its prior. A verdict of a judge right a
# of the time tells (2a − 1)² of an outcome (the variance of a rate read through it is
# r(1 − r) / (n (2a − 1)²), r the verdicts' rate, at least p(1 − p)), so at 0.8 that is 278
# verdicts, not 100. With 100, a refined level stays about 0.08 off (±1 se): in
# bench/routing/learning_loop.py the wrongly claimed backend, no longer served once refined
# and judged only as a partner after, was still 0.07-0.12 off after 5000 requests (seed 4).
JUDGED_FIRST = math.ceil(MIN_OUTCOMES / (2 * JUDGE_ACCURACY - 1) ** 2)

def judged_outcomes(pool: Pool) -> dict[str, int]:
    """expert -> judged outcomes it is known from, for the experts still learning: one on a
    cold-start prior (0 until refined) or refined from the loop's outcomes. A trained
    expert is absent: it was fitted on a dataset's outcomes, more than the loop gathers."""
    counts = {e: int(n) for e, n in outcomes_of(pool.router).items()}
    return {**{e: 0 for e in pool.priors}, **counts}


class Explorer:
    """Runs shadow calls for sampled requests within the exploration budget."""

    def __init__(
        self,
        engine: Engine,
        pools: PoolHolder,
        cfg: ExplorationSettings,
        judge: Judge | None,
        rng: random.Random | None = None,
        clock: Callable[[], datetime] = utcnow,
        transport: Transport | None = None,
    ) -> None:
        # the pool is taken once per exploration, never kept: a backend adopted by a hot swap
        # is explored like any other, and one exploration never mixes two pools
        self.engine, self.pools, self.cfg = engine, pools, cfg
        self.judge = judge
        # what shadow calls go through (the gateway's: ctx.transport)
        self.transport = transport if transport is not None else LitellmTransport()
        self.rng = rng or random.Random()
        self.judge_served = True  # False when clients' feedback scores the served answers
        self.bounds = ExplorationBounds(engine, cfg, clock)  # every call booked there first
        self.calls = 0
        # a promise route's partner beside its reference, from its judged pairs (partners.py)
        self.partners = RoutePartners(engine, seed=self.rng.randrange(2**32))

    @property
    def active(self) -> bool:
        """Whether this explorer ever explores (enabled, with a judge)."""
        return self.cfg.enabled and self.judge is not None

    def wants(self, route: str | None, prompt_chars: int = 0) -> bool:
        """Sample the ε coin for this request (always False when disabled or judgeless, or
        when its prompt is longer than ``max_prompt_chars``)."""
        if not self.active or prompt_chars > self.cfg.max_prompt_chars:
            return False
        return self.rng.random() < self.cfg.epsilon_for(route)

    def _pick(self, pool: Pool, names: list[str], served: str, observed: set[str],
              route: str | None = None) -> list[str]:
        """The backends of ``names`` to shadow (those ``pool`` has: a request served before a
        swap may name others): the least known first (``judged_outcomes``), then those never
        observed on this prompt, ties at random. A backend known only by a prior (a price, a
        published figure, a vendor's claim) is what routing can be wrong about, and it learns
        only here once the rule stops sending it traffic. On a promise ``route``, that holds
        until a backend has ``JUDGED_FIRST`` verdicts (worth ``MIN_OUTCOMES`` outcomes through
        the judge); the rest are the route's partners beside its reference, whom its
        certificate would save most with (partners.py: else its trained backends, "known",
        were never judged, and never certified)."""
        outcomes = judged_outcomes(pool)
        others = [b for b in names if b != served and b in pool.backends]
        self.rng.shuffle(others)
        others.sort(key=lambda b: (outcomes.get(pool.expert_of(b) or "", math.inf),
                                   pool.backends[b].router_model in observed))
        promise = pool.promises.get(route or "")
        if promise is None:
            return others[: self.cfg.candidates]
        picks = [b for b in others if outcomes.get(pool.expert_of(b) or "", math.inf)
                 < JUDGED_FIRST][: self.cfg.candidates]
        rest = [b for b in others if b not in picks and b != promise.reference]
        while len(picks) < self.cfg.candidates and rest:
            partner = self.partners.pick(pool, route or "", rest)
            if partner is None:
                break
            picks.append(partner)
            rest.remove(partner)
        return picks

    def _judged_first(self, pool: Pool, backend: str) -> bool:
        """Whether ``backend`` is still judged first: on a prior (or refined from it) with
        fewer than ``JUDGED_FIRST`` verdicts (``_pick``)."""
        return judged_outcomes(pool).get(pool.expert_of(backend) or "", math.inf) < JUDGED_FIRST

    def _observed(self, key: str) -> set[str]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(ldb.observations_t.c.model).where(ldb.observations_t.c.prompt_key == key)
            ).all()
        return {r[0] for r in rows}

    async def _judge(self, pool: Pool, prompt: str, router_model: str, answer: str,
                     share: str | None) -> float | None:
        """Judge one answer on ``pool``; its worst-case cost is booked first, on ``share``'s
        allowance too (None if it does not fit)."""
        assert self.judge is not None
        # token counts of a long prompt take tens of ms: on a worker thread, as the
        # request's own (serving/plan: measure), never on the event loop
        worst = await anyio.to_thread.run_sync(self.judge.worst_case_usd, pool, prompt,
                                               answer)
        start = await self.bounds.book(worst, share=share) if worst > 0 else []
        if start is None:
            return None
        cost = 0.0
        try:
            score, cost = await self.judge.score(pool, prompt, router_model, answer)
        except UpstreamFailure as e:
            log.warning("judge call failed: %s", e)
            score = None
        finally:
            if worst > 0:
                await self.bounds.settle(start, worst, cost)
        return score

    async def explore(self, served: Served, prompt: str) -> list[dict]:
        """Judge the served answer and ``candidates`` shadow answers; returns what was stored.
        ``prompt``: the request's prompt-key text, as the learning loop cut it for the
        request's record (one cut, so both join on one key). The pool is taken once: every
        backend, price and router model of this exploration, the judge's included, comes from
        it, whatever is swapped in meanwhile."""
        pool = self.pools.current
        messages = served.messages
        if (served.allowed is not None and isinstance(self.judge, LLMJudge)
                and self.judge.model not in served.allowed):
            log.info("request %s not explored: its tenant's policy does not allow the judge "
                     "%s", served.request_id, self.judge.model)
            return []
        key = ldb.prompt_key(prompt)
        stored: list[dict] = []

        async def store(backend: str, router_model: str, quality: float, cost: float,
                        source: str) -> None:
            await anyio.to_thread.run_sync(
                lambda: ldb.add_observation(
                    self.engine,
                    key=key,
                    model=router_model,
                    quality=quality,
                    cost_usd=cost,
                    source=source,
                    request_id=served.request_id,
                    tenant_id=served.tenant_id,
                    comment=f"judge={self.judge.name}",
                )
            )
            stored.append({"backend": backend, "quality": quality, "cost_usd": cost,
                           "source": source})

        route = served.route or ""
        paired = self._reference_beside(pool, served)
        if paired is not None and not await self._pair(pool, served, prompt, paired, store,
                                                       capped=True):
            # a pair refused by a bound leaves nothing worth a call, but for a served backend
            # still on its prior: its answer judged alone checks the prior (or a vendor's
            # claim) early, at one judge call (without it the live loop caught its wrong
            # claim later). The reference never is: every pair grades it.
            if not self._judged_first(pool, served.backend):
                return self._not_paired(served)
            paired = None
        observed = await anyio.to_thread.run_sync(self._observed, key)
        others = [b for b in served.pool if b != paired]
        if route in pool.promises:  # its pairs read once, off the loop (partners.py)
            await anyio.to_thread.run_sync(self.partners.evidence, pool, route)
        picks = self._pick(pool, others, served.backend, observed, route)
        if paired is None and picks and self._reference_served(pool, served):
            if not await self._pair(pool, served, prompt, picks[0], store):
                return self._not_paired(served)
            paired, picks = picks[0], picks[1:]
        if self.judge_served and paired is None:
            q = await self._judge(pool, prompt, served.router_model, served.answer_text,
                                  served.route)
            if q is not None:
                await store(served.backend, served.router_model, q,
                            float(served.cost_usd or 0.0), "judge")
        for name in picks:
            booked, text, actual = await self._shadow_call(pool, name, messages,
                                                           share=served.route)
            if not booked:
                break
            if text is None:
                continue
            router_model = pool.backends[name].router_model
            q = await self._judge(pool, prompt, router_model, text, served.route)
            if q is not None:
                await store(name, router_model, q, actual, "shadow")
        self._count_pairs(pool, route, key, stored)
        log.info("explored request %s: %s", served.request_id, stored)
        return stored

    def _count_pairs(self, pool: Pool, route: str, key: str, stored: list[dict]) -> None:
        """This request's judged pairs (the reference's grade beside each other one's), for
        the route's next partner (partners.py); as certify_routes.judged_pairs reads them."""
        promise = pool.promises.get(route)
        grades: dict[str, list[float]] = {}
        for row in stored:
            grades.setdefault(row["backend"], []).append(float(row["quality"]))
        if promise is None or promise.reference not in grades:
            return
        ref = grades.pop(promise.reference)
        self.partners.add(pool, route, key, sum(ref) / len(ref),
                          {b: sum(g) / len(g) for b, g in grades.items()})

    def _reference_beside(self, pool: Pool, served: Served) -> str | None:
        """The reference to answer beside ``served`` (``_pair``, on its daily cap too): on a
        route with a promise whose answer did not come from its reference, with an LLM judge
        and a tenant whose policy allows the reference; else None. Its grades refine the
        priors of the frontier (gateway/learning/refine_priors.py)."""
        promise = pool.promises.get(served.route or "")
        ref = promise.reference if promise is not None else None
        if ref is None or ref == served.backend or not isinstance(self.judge, LLMJudge):
            return None
        if served.allowed is not None and ref not in served.allowed:
            return None  # the tenant's policy keeps its prompts from the reference
        return ref

    @staticmethod
    def _not_paired(served: Served) -> list[dict]:
        """A promise route's request whose judged pair some bound refused, its served backend
        known: not explored at all (one grade alone pairs with nothing; the share keeps what
        it would have spent)."""
        log.info("request %s not explored: its judged pair does not fit route %s's exploration "
                 "bounds", served.request_id, served.route)
        return []

    def _reference_served(self, pool: Pool, served: Served) -> bool:
        """Whether ``served`` is a promise route's request its reference answered, with an
        LLM judge to compare answers (``_pair``)."""
        promise = pool.promises.get(served.route or "")
        return (promise is not None and served.backend == promise.reference
                and isinstance(self.judge, LLMJudge))

    async def _pair(self, pool: Pool, served: Served, prompt: str, other: str, store: Any,
                    capped: bool = False) -> bool:
        """One judged pair on a promise route: ``other`` answers the served request too and
        the judge compares the two answers, both orders averaged (``compare``); both grades
        are stored (source ``paired``), a pair for the route's certificate
        (certify_routes.judged_pairs). ``other`` is the reference beside a cheaper served
        backend (``capped``: booked on the route's reference cap too), or a partner beside the
        reference that served.

        A pair is worth its calls together: one grade alone pairs with nothing, so the pair's
        whole worst case is booked on the route's share before any call (else the share,
        refilled a little per request, went to the first call and the rest no longer fitted:
        bench/routing/learning_loop.py --packaged, seed 0, printed 2294 served answers
        judged alone beside 177 shadow answers on d481d3e, 639 pairs here). Each call then
        books the other bounds itself. False, nothing stored, when some bound refused it."""
        assert isinstance(self.judge, LLMJudge)
        route = served.route or ""
        cap = route if capped else None
        backend, price = pool.backends[other], pool.prices[other]
        n_prompt = await anyio.to_thread.run_sync(count_prompt_tokens, backend, served.messages)
        worst = price.cost(n_prompt, self.cfg.max_tokens) + await anyio.to_thread.run_sync(
            compare_unseen_worst_usd, self.judge, pool, prompt, served.answer_text,
            self.cfg.max_tokens)
        share = await self.bounds.share(route, worst)
        if share is None:
            return False
        spent = 0.0
        try:
            booked, text, answered = await self._shadow_call(pool, other, served.messages,
                                                             route=cap, n_prompt=n_prompt)
            spent += answered
            if not booked or text is None:
                return booked
            judge_worst = await anyio.to_thread.run_sync(
                compare_worst_usd, self.judge, pool, prompt, served.answer_text, text)
            hold = await self.bounds.book(judge_worst, route=cap)
            if hold is None:
                return True
            q_served = q_other = None
            cost = 0.0
            try:
                q_served, q_other, cost = await compare(self.judge, pool, prompt,
                                                        served.answer_text, text)
            except UpstreamFailure as e:
                log.warning("paired judge call failed: %s", e)
            finally:
                await self.bounds.settle(hold, judge_worst, cost)
                spent += cost
            if q_served is not None:
                await store(served.backend, served.router_model, q_served,
                            float(served.cost_usd or 0.0), "paired")
            if q_other is not None:
                await store(other, backend.router_model, q_other, answered, "paired")
            return True
        finally:
            await self.bounds.settle(share, worst, spent)

    async def _shadow_call(self, pool: Pool, name: str, messages: Any, route: str | None = None,
                           share: str | None = None, n_prompt: int | None = None
                           ) -> tuple[bool, str | None, float]:
        """One shadow call to ``pool``'s backend ``name``, its worst case booked first
        (``route``: also on that route's reference cap; ``share``: on that route's allowance)
        and settled at its actual cost: (booked, the answer or None if it failed, USD).
        ``n_prompt``: the prompt's tokens when the caller counted them already."""
        backend, price = pool.backends[name], pool.prices[name]
        if n_prompt is None:
            n_prompt = await anyio.to_thread.run_sync(count_prompt_tokens, backend, messages)
        worst = price.cost(n_prompt, self.cfg.max_tokens)
        start = await self.bounds.book(worst, route=route, share=share)
        if start is None:
            return False, None, 0.0
        self.calls += 1
        actual = 0.0
        try:
            reply = await chat_completion(self.transport, backend, messages,
                                          {"max_tokens": self.cfg.max_tokens})
            usage = reply.usage or TokenUsage()
            actual = price.cost(usage.input_tokens or n_prompt, usage.output_tokens or 0)
            body: Any = reply.body  # a chat completion
            return True, body.choices[0].message.content or "", actual
        except UpstreamFailure as e:
            log.warning("shadow call to %s failed: %s", name, e)
            return True, None, actual
        finally:
            await self.bounds.settle(start, worst, actual)
