"""Cold-start backends refined from outcomes, published as a router version.

A priced backend the router did not know joined the pool on a prior (gateway/pool/priors.py).
``refine_backend(engine, pool, name)`` reads the outcomes the learning loop gathered for that
expert (shadow-judge calls and client feedback, ``observations``), projects their prompts'
stored Φ(x) through the current head, and refits the readout with the trait prior as its mean
(``router_core``'s cold-start ``refine``): the new descriptor is hot-swapped, the head is not
retrained. Past ``min_outcomes`` the expert leaves the prior (kind ``readout``) and its
traffic is no longer capped by ``routes.NAME.explore_share``.

Refinement builds on the active version the database holds, never on the process's pool
(which may not have swapped yet), and publishes by compare-and-set on it
(gateway/learning/router_versions.py): a refinement whose parent was replaced meanwhile is
dropped and logged (the next round builds on the new one), and none is published while an
operator's rollback holds the active version.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
from sqlalchemy import select

from gateway.config import Settings
from gateway.learning import router_versions
from gateway.learning import tables as ldb
from gateway.learning.prior_level import level_corrected
from gateway.pool import Pool
from gateway.pool.known import COLD_START_KEY, LEARNED_KIND, PRIOR_KIND, outcomes_of
from gateway.pool.priors import TYPICAL_TOKENS, prior_for
from gateway.pool.promise import BELIEFS_KEY, belief_record
from gateway.pricing import Price
from router_core.cold_start.placement import refine
from router_core.promise import JUDGE_ACCURACY, LogitBelief, refine_from_verdicts
from router_core.promise.belief import pseudo_count_from_logit_var
from router_core.promise.refine import judged_counts
from router_core.runtime.router import Router

MIN_OUTCOMES = 100  # outcomes after which a backend leaves its prior (bench/routing/cold_start.py)
# a refit of a prior's shape is served only when its held-out gain is clear of noise (≈95%
# one-sided, router_core.promise.refine.validated_refine's min_z): at any gain > 0, a few hundred
# 80%-right verdicts kept shapes that put the live loop's cheap backend at p̂ 0.89 where it was
# right 70% of the time, and auto-cheap sent it 18-33% of its requests (bench/routing/
# live_promise.py); a shape not kept still has its level corrected (prior_level.py)
CONFIRM_Z = 1.64
log = logging.getLogger(__name__)


def observed(engine: Any, router: Router, expert: str) -> tuple[np.ndarray, np.ndarray]:
    """(Q, quality) of every outcome recorded for ``expert``, Q through ``router``'s head."""
    obs = ldb.load_observations(engine)
    obs = obs[obs["model"] == expert]
    if obs.empty:
        return np.zeros((0, router.head.out_dim)), np.zeros(0)
    _, phi = ldb.load_prompts(engine, list(obs["prompt_key"]))
    return router.project(phi), obs["quality"].to_numpy(dtype=float)


def refine_backend(
    engine: Any,
    router: Router,
    settings: Settings,
    prices: Mapping[str, Price],
    name: str,
    min_outcomes: int = MIN_OUTCOMES,
    prior: LogitBelief | None = None,
) -> tuple[Router, int]:
    """``router`` with backend ``name``'s cold-start expert refined by its outcomes, and n;
    with the pool's ``prior`` belief, the promise's belief is refined from the same outcomes
    too (``promise_belief``) and travels in the version's config."""
    b = settings.backend(name)
    if b is None or name not in prices:
        raise ValueError(f"no priced backend {name!r}")
    kinds = {e.name: e.kind for e in router.experts}
    if kinds.get(name) not in (PRIOR_KIND, LEARNED_KIND):
        raise ValueError(f"{name!r} is not on a cold-start prior (it is {kinds.get(name)!r})")
    Q, u = observed(engine, router, name)
    placed = refine(prior_for(router, b, prices[name]), Q, u)
    kind = LEARNED_KIND if placed.n_outcomes >= min_outcomes else PRIOR_KIND
    cost = prices[name].cost(*TYPICAL_TOKENS)
    out = router.with_expert(placed.expert(name, cost, kind), a=placed.a, b=placed.b)
    counts = {**outcomes_of(router), name: placed.n_outcomes}
    stamp = f"{time.strftime('%Y%m%d%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:4]}"
    version = f"{router.version.split('@', 1)[0]}@learn-{name}-{placed.n_outcomes}-{stamp}"
    config = {**dict(out.config or {}), COLD_START_KEY: counts}
    if prior is not None:
        refined = promise_belief(engine, router, name, prior)
        if refined is not None:
            beliefs = {**dict(config.get(BELIEFS_KEY) or {}), name: belief_record(refined)}
            config[BELIEFS_KEY] = beliefs
    return replace(out, config=config, version=version), placed.n_outcomes


def promise_belief(engine: Any, router: Router, expert: str,
                   prior: LogitBelief) -> LogitBelief | None:
    """``prior`` refined by every outcome recorded for ``expert`` (router_core.promise:
    repeated judgements of one prompt aggregated DARS-style, a judge right 80% of the time,
    kept only as far as held-out verdicts clearly confirm it (``CONFIRM_Z``); where they do
    not, its level alone is
    corrected by them, gateway/learning/prior_level.py). Always from the prior, never from an
    earlier refinement, so no outcome counts twice."""
    obs = ldb.load_observations(engine)
    obs = obs[obs["model"] == expert]
    if obs.empty:
        return None
    keys = list(dict.fromkeys(obs["prompt_key"]))
    _, phi = ldb.load_prompts(engine, keys)
    query_of = dict(zip(keys, router.project(phi)))
    verdicts = obs[["prompt_key", "model", "quality"]].to_dict("records")
    return belief_from_verdicts(expert, prior, verdicts, query_of)


def belief_from_verdicts(expert: str, prior: LogitBelief, verdicts: list[dict],
                         query_of: Mapping[str, np.ndarray],
                         accuracy: float = JUDGE_ACCURACY) -> LogitBelief:
    """``promise_belief`` on verdict rows already read ({prompt_key, model, quality}) and
    their prompts' query vectors: the refit where held-out verdicts confirm it, else the
    prior's level corrected and its pseudo-count capped (``worth``). No database: the offline
    bench (bench/routing/promise.py) refines its priors with this, as the gateway does."""
    refined = refine_from_verdicts({expert: prior}, verdicts, query_of, accuracy,
                                   min_z=CONFIRM_Z)[expert]
    if not np.array_equal(refined.theta, prior.theta):
        return refined
    # the shape was not confirmed: its level still is, by the same verdicts (prior_level.py)
    judged, k, c = judged_counts(verdicts, expert)
    if not len(judged):
        return prior
    Q = np.stack([query_of[str(key)] for key in judged])
    level = level_corrected(prior, Q, k, c, accuracy)
    n = prior.n_outcomes + int(c.sum())  # counted even where too few to validate a refit
    return replace(level, n_outcomes=n, n_cap=min(prior.n_cap, worth(prior, Q)),
                   how=f"level:{n} (shape not moved)")


def worth(prior: LogitBelief, Q: np.ndarray) -> float:
    """The pseudo-count ``prior`` is worth at its own level over queries ``Q``: n at p̄ of its
    mean logit variance (router_core.promise.belief; n₀ by construction, LogitBelief.prior).

    A level-corrected belief is capped there. Its covariance is the prior's, and that is
    right: the verdicts pinned one number, not the shape. But a pseudo-count read off a logit
    variance grows as p̂ nears 0 or 1 (n = 1/(p(1 − p)·Var z) − 1), so a level moved up would
    make the prior's own easy prompts look known (p̂ 0.95 from a price prior worth one outcome
    reads as eight) and the promise rule would take it there: the live loop's refined cheap
    backend, chosen at p̂ 0.92-0.95 where it was right 62-74% of the time
    (bench/routing/live_promise.py). Capped, nothing the shape was not told is trusted more
    than the prior was."""
    _, var = prior.logits(np.atleast_2d(Q))
    return float(pseudo_count_from_logit_var(prior.level, float(np.mean(var))))


def cold_start_backends(router: Router, settings: Settings) -> list[str]:
    """The backends whose expert came from cold start (on its prior or refined past it)."""
    counts = outcomes_of(router)
    return [b.model_name for b in settings.model_list if b.model_name in counts]


def publish_refinement(
    engine: Any, router: Router, settings: Settings, prices: Mapping[str, Price], name: str,
    prior: LogitBelief | None = None,
) -> tuple[Router, int]:
    """Refine backend ``name`` and record the result as the active router version, so every
    replica hot-swaps to it (gateway/learning/hotswap.py); compare-and-set on ``router``'s
    version: raises ``router_versions.StaleParent`` or ``Held`` and records nothing when
    ``router`` is not the active version any more or an operator holds it."""
    new, n = refine_backend(engine, router, settings, prices, name, prior=prior)
    row = router_versions.active_version(engine) or {}
    router_versions.record_version(
        engine, new, status="learned", parent=router.version,
        metrics={"change": "learned", "backend": name, "n_outcomes": n},
        n_observations=int(row.get("n_observations") or 0),
        max_obs_id=int(row.get("max_observation_id") or 0), activate=True,
    )  # fmt: skip
    return new, n


def unchecked(engine: Any, router: Router, settings: Settings) -> list[str]:
    """The cold-start backends whose published belief has seen no outcome (a prior, or a
    claim) though outcomes for them are recorded now: what first evidence should correct."""
    names = [n for n in cold_start_backends(router, settings)
             if outcomes_of(router).get(n, 0) == 0]
    if not names:
        return []
    with engine.connect() as conn:
        rows = conn.execute(select(ldb.observations_t.c.model)
                            .where(ldb.observations_t.c.model.in_(names)).distinct()).all()
    seen = {r[0] for r in rows}
    return [n for n in names if n in seen]


def active_pool(engine: Any, pool: Pool) -> Pool | None:
    """The pool of the database's active router version (``pool`` itself when that is the
    one it serves, or no version is recorded yet); None under an operator's hold."""
    if router_versions.held(engine):
        return None
    row = router_versions.active_version(engine)
    if row is None or row["version"] == pool.version:
        return pool
    return pool.with_router(router_versions.load_version(engine, row["version"]))


def refine_due(engine: Any, pool: Pool, first_only: bool = False) -> list[str]:
    """Refine every cold-start backend of the active version (``active_pool``: the database's,
    not ``pool``'s when this replica has not swapped yet) that has outcomes its descriptor has
    not seen yet (``first_only``: only those whose belief has seen none, ``unchecked``); each
    refinement is published on the one before (the swapped-in pool carries them all). Nothing
    under an operator's hold; a publish whose parent was replaced meanwhile is dropped and
    logged, and the rest of the round with it."""
    current = active_pool(engine, pool)
    if current is None:
        return []
    pool = current
    router, settings, prices = pool.router, pool.settings, pool.prices
    names = (unchecked(engine, router, settings) if first_only
             else cold_start_backends(router, settings))
    done = []
    for name in names:
        if name not in prices:
            continue
        _, u = observed(engine, router, name)
        if len(u) > outcomes_of(router).get(name, 0):
            quality = pool.qualities.get(name)
            try:
                router, _ = publish_refinement(engine, router, settings, prices, name,
                                               quality.prior if quality is not None else None)
            except router_versions.Held:
                log.info("refinement of %s not published: an operator's rollback holds the "
                         "router (`tollgate router resume` lifts it)", name)
                break
            except router_versions.StaleParent as e:
                log.warning("refinement of %s dropped: built on %s, but %s is active now; the "
                            "next round builds on it", name, e.parent, e.active)
                break
            done.append(name)
    return done
