"""Certify each promising route from its judged pairs and publish it as a router version.

A judged pair is one routed request on which the route's reference and another backend of
the route both have a judge's grade: the reference's answer beside the served one (source
``paired``, gateway/learning/shadow.py) or the served answer graded beside a shadow call
(``judge`` and ``shadow``); a backend graded twice on one request counts at its mean.
``certify_route`` (router_core/promise/certify.py) turns the pairs into the route's
certificate, with the prompt keys so that a repeated prompt counts once. Regions: the
gateway's requests carry no category, so they are k-means clusters of the judged prompts'
stored Φ(x) (``fit_regions``), one per ``PROMPTS_PER_REGION`` distinct prompts, at most
``MAX_REGIONS`` (the bench's 8 for a table without categories, bench/routing/promise.py); the
clusters are fitted on embeddings alone, never on grades, so the bound holds given them.

Published as the refinement is (gateway/learning/refine_priors.py): on the active version the
database holds, by compare-and-set on it, never under an operator's hold; only when some
route's certificate changed. Every replica serves it after its hot swap
(gateway/pool/certificates.py).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from dataclasses import replace
from typing import Any

import numpy as np
from sqlalchemy import select

from gateway.config import Settings
from gateway.learning import router_versions
from gateway.learning import tables as ldb
from gateway.learning.refine_priors import active_pool
from gateway.pool import Pool
from gateway.pool.certificates import CERTIFICATES_KEY, RouteCertificate
from gateway.pool.priors import TYPICAL_TOKENS
from router_core.promise.certify import (
    ALPHA,
    Evidence,
    Judge,
    assign_regions,
    certify,
    fit_regions,
)

log = logging.getLogger(__name__)
JUDGED = ("paired", "judge", "shadow")  # sources graded by the exploration's judge
MAX_REGIONS = 8
PROMPTS_PER_REGION = 250
# Without an operator's measurement (retraining.exploration.judge.agreement), the judge's
# agreement is taken as 0.8, known: strong LLM judges agree with human preferences "over 80%"
# of the time (Zheng et al., "Judging LLM-as-a-Judge with MT-Bench and Chatbot Arena",
# arXiv 2306.05685, NeurIPS 2023). An assumption about this deployment's judge, said so in
# the README; a measured agreement replaces it with its Clopper-Pearson lower bound.
PUBLISHED_JUDGE = Judge(agree=8 * 10**8, checks=10**9)


def judge_of(settings: Settings) -> Judge:
    a = settings.retraining.exploration.judge.agreement
    return PUBLISHED_JUDGE if a is None else Judge(a.agree, a.checks)


def judged_pairs(engine: Any, pool: Pool, route: str, reference: str
                 ) -> tuple[list[dict], list[str]]:  # fmt: skip
    """The route's judged pairs: rows ``{backend, reference_grade, grade, key}`` (backend
    names of the route), and the route's backends."""
    names = [b for _, b in pool.route_experts.get(route, ())]
    by_model = {pool.backends[b].router_model: b for b in names}
    if reference not in names:
        return [], names
    o, r = ldb.observations_t, ldb.requests_t
    q = (select(o.c.request_id, o.c.prompt_key, o.c.model, o.c.quality)
         .join(r, r.c.request_id == o.c.request_id)
         .where(r.c.route == route, o.c.source.in_(JUDGED)))
    with engine.connect() as conn:
        rows = conn.execute(q).all()
    grades: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    keys: dict[str, str] = {}
    for rid, key, model, quality in rows:
        backend = by_model.get(model)
        if backend is not None and quality is not None:
            grades[rid][backend].append(float(quality))
            keys[rid] = key
    pairs = []
    for rid, per in grades.items():
        if reference not in per:
            continue
        ref_grade = float(np.mean(per[reference]))
        for backend, g in per.items():
            if backend != reference:
                pairs.append({"backend": backend, "reference_grade": ref_grade,
                              "grade": float(np.mean(g)), "key": keys[rid]})
    return pairs, names


def certify_one(engine: Any, pool: Pool, route: str) -> RouteCertificate | None:
    """The route's certificate from its judged pairs (None: no promise, or no pair yet)."""
    promise = pool.promises.get(route)
    if promise is None:
        return None
    pairs, names = judged_pairs(engine, pool, route, promise.reference)
    if not pairs:
        return None
    keys = list(dict.fromkeys(p["key"] for p in pairs))
    _, phi = ldb.load_prompts(engine, keys)
    k = max(1, min(MAX_REGIONS, len(keys) // PROMPTS_PER_REGION))
    centroids = fit_regions(phi, k) if k > 1 else phi.mean(axis=0, keepdims=True)
    region_of = dict(zip(keys, assign_regions(phi, centroids).tolist(), strict=True))
    ref = names.index(promise.reference)
    ev = Evidence(len(centroids), len(names), ref)
    ev.add([region_of[p["key"]] for p in pairs], [names.index(p["backend"]) for p in pairs],
           [p["reference_grade"] for p in pairs], [p["grade"] for p in pairs],
           keys=[p["key"] for p in pairs])
    cost = np.array([pool.prices[b].cost(*TYPICAL_TOKENS) for b in names])
    cert = certify(ev, judge_of(pool.settings), cost, promise.max_drop, ALPHA)
    n_prompts, _, _ = ev.distinct()
    mixes = tuple({names[h]: float(s) for (h, _t), s in m.items()} for m in cert.mixes)
    return RouteCertificate(reference=promise.reference, promise=promise.max_drop,
                            backends=tuple(names), centroids=np.asarray(centroids, np.float32),
                            mixes=mixes, n_prompts=n_prompts, upper=cert.upper[:, :, -1],
                            alpha=ALPHA, pairs=len(pairs))


def certify_due(engine: Any, pool: Pool) -> list[str]:
    """Certify every promising route of the active version (``active_pool``) and publish
    the certificates in a new version when any changed; the routes whose changed."""
    current = active_pool(engine, pool)
    if current is None:
        return []  # an operator's hold
    router = current.router
    old = dict((router.config or {}).get(CERTIFICATES_KEY) or {})
    new = dict(old)
    for route in current.promises:
        cert = certify_one(engine, current, route)
        if cert is not None:
            new[route] = cert.record()
    changed = sorted(r for r in new if new[r] != old.get(r))
    if not changed:
        return []
    stamp = f"{time.strftime('%Y%m%d%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:4]}"
    version = f"{router.version.split('@', 1)[0]}@certified-{stamp}"
    out = replace(router, config={**dict(router.config or {}), CERTIFICATES_KEY: new},
                  version=version)
    row = router_versions.active_version(engine) or {}
    router_versions.record_version(
        engine, out, status="learned", parent=router.version,
        metrics={"change": "certified", "routes": changed,
                 "certified_regions": {r: sum(1 for m in new[r]["mixes"] if m)
                                       for r in changed}},
        n_observations=int(row.get("n_observations") or 0),
        max_obs_id=int(row.get("max_observation_id") or 0), activate=True,
    )  # fmt: skip
    return changed
