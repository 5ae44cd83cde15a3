"""Certifying a route per region of its judged prompts, and serving the certificate per prompt.

The learning loop's certification (gateway/learning/certify_routes.py) on real SQLite and
PostgreSQL databases with the gateway's migrations: 600 judged prompts in two clusters of Φ(x), the cheap
backend graded as the reference on one and far below it on the other. Two regions are fitted,
the first certified wholly and the second not within the promise; the published record
round-trips, and each prompt is served by its own region's mix. The embeddings are synthetic
(two well-separated directions) so the regions are known: no encoder is needed to test this.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from gateway.config import settings_from_dict
from gateway.learning import router_versions
from gateway.learning import tables as ldb
from gateway.learning.certify_routes import certify_due, certify_one
from gateway.learning.retrain import ensure_seed_version
from gateway.pool import build_pool
from gateway.pool.certificates import RouteCertificate
from gateway.pricing import resolve_prices
from gateway.store.engine import make_engine
from gateway.store.migrate import upgrade_engine
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import _pg_database
from tests.gateway.learning.conftest import FRONTIER, JUDGE, learning_config
from tests.gateway.router_fixture import PRICES

CHEAP = "fake-cheap"
PER_REGION = 300


def _phi(direction: int, i: int, rng: np.random.Generator) -> np.ndarray:
    x = 0.05 * rng.standard_normal(384).astype(np.float32)
    x[direction] += 1.0
    return x / np.linalg.norm(x)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """A fresh database of each kind for each test (the rows are this test's alone)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'db.sqlite'}"
    else:
        yield from _pg_database()


@pytest.fixture()
def judged(url: str, test_router: Router) -> Any:
    backends = [FakeBackend(n) for n in PRICES]
    backends += [FakeBackend(FRONTIER, input_per_m=30.0, output_per_m=60.0), FakeBackend(JUDGE)]
    with FakeUpstream(backends) as up:  # only for its model_list entries: never called here
        cfg = learning_config(up, database_url=url)
        cfg["model_list"] += [up.model_entry(FRONTIER), up.model_entry(JUDGE)]
        cfg["routes"] = {"auto": {"max_drop": 0.15, "reference": FRONTIER,
                                  "models": [CHEAP, FRONTIER]}}
        settings = settings_from_dict(cfg)
    engine = make_engine(settings.database_url)
    upgrade_engine(engine)
    pool = build_pool(settings, resolve_prices(settings, strict=False), test_router)
    rng = np.random.default_rng(0)
    rows, grades = [], []
    for region, cheap_grade in ((0, 0.9), (1, 0.2)):
        for i in range(PER_REGION):
            rid, key = f"r{region}-{i}", f"k{region}-{i}"
            rows.append({"request_id": rid, "tenant_id": None, "text": None, "key": key,
                         "embedding": _phi(region, i, rng), "route": "auto",
                         "model": pool.backends[FRONTIER].router_model, "backend": FRONTIER,
                         "cost_usd": 0.01})
            grades += [(rid, key, FRONTIER, 0.9, "judge"), (rid, key, CHEAP, cheap_grade,
                                                            "shadow")]
    ldb.record_served_many(engine, rows)
    for rid, key, backend, q, source in grades:
        ldb.add_observation(engine, key=key, model=pool.backends[backend].router_model,
                            quality=q, cost_usd=0.0, source=source, request_id=rid)
    yield engine, pool
    engine.dispose()


def test_each_region_is_certified_on_its_own_evidence(judged: Any) -> None:
    engine, pool = judged
    cert = certify_one(engine, pool, "auto")
    assert cert is not None and len(cert.mixes) == 2 and cert.pairs == 2 * PER_REGION
    again = RouteCertificate.from_record(cert.record())  # as published and read back
    rng = np.random.default_rng(1)
    good = again.choose(_phi(0, 0, rng))
    g_good = good.region
    assert again.mixes[g_good] == {CHEAP: 1.0} and good.backend == CHEAP
    assert good.n_prompts == PER_REGION and good.upper_drop <= 0.15
    g_bad = 1 - g_good
    h = again.backends.index(CHEAP)
    assert again.upper[g_bad, h] > 0.15  # not within the promise there
    bad = [again.choose(_phi(1, i, rng)) for i in range(200)]
    assert all(b is None or b.region == g_bad for b in bad)
    share = np.mean([b is not None and b.backend == CHEAP for b in bad])
    assert share * 0.7 <= 0.15  # the judged drop served there stays within the promise


def test_published_in_a_router_version_every_replica_swaps_to(judged: Any) -> None:
    engine, pool = judged
    ensure_seed_version(engine, pool.router)
    assert certify_due(engine, pool) == ["auto"]
    active = router_versions.active_version(engine)["version"]
    live = pool.with_router(router_versions.load_version(engine, active))
    assert live.certificates["auto"].certified_regions >= 1
    assert certify_due(engine, live) == []  # nothing new judged: no new version
    router_versions.activate(engine, active, hold=True)  # an operator's hold
    rid, key = "late", "k-late"
    ldb.record_served_many(engine, [{
        "request_id": rid, "tenant_id": None, "text": None, "key": key,
        "embedding": _phi(0, 0, np.random.default_rng(2)), "route": "auto",
        "model": pool.backends[FRONTIER].router_model, "backend": FRONTIER, "cost_usd": 0.01}])
    for backend in (FRONTIER, CHEAP):
        ldb.add_observation(engine, key=key, model=pool.backends[backend].router_model,
                            quality=0.9, cost_usd=0.0, source="paired", request_id=rid)
    assert certify_due(engine, live) == []  # new evidence, but the hold keeps the version
    assert router_versions.active_version(engine)["version"] == active
    router_versions.release_hold(engine)
    assert certify_due(engine, live) == ["auto"]
    assert router_versions.active_version(engine)["version"] != active
