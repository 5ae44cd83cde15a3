"""A route's daily cap on shadowing its reference (``retraining.exploration.
reference_budget_usd``): once the route's reference answers and the judge's comparisons have
spent it, further sampled requests are not paired, though the global exploration budget still
has room, and not explored at all (on a promise route a request is a judged pair or nothing:
one grade alone pairs with nothing its certificate can use); the spend is on the ledger under
the route's scope, beside the global budget.

Real parts as in test_reference_judged.py: uvicorn, the OpenAI SDK, SQLite with the gateway's
migrations, the fake upstream. The reference answers 64 words at 60 USD per 1M output tokens
with ``max_tokens`` 64, so one pairing costs about its worst case (~0.0042 USD) and the cap of
0.006 USD fits one pairing, never two.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from gateway.config import settings_from_dict
from gateway.learning import exploration_ledger as xl
from gateway.learning import tables as ldb
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway, run_gateway
from tests.gateway.learning.conftest import FRONTIER, frontier_upstream, promised_config

CAP_USD = 0.006


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    with frontier_upstream(" ".join(["frontier"] * 64)) as u:
        yield u


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, up: FakeUpstream, test_router: Router,
       encoder) -> Iterator[Gateway]:
    url = f"sqlite:///{tmp_path_factory.mktemp('refcap') / 'tollgate.db'}"
    cfg = promised_config(
        up, url, {"reference_budget_usd": {"promised": CAP_USD}}, refine_priors_s=None)
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


def _paired(engine: sa.Engine) -> list[dict]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(ldb.observations_t)
                            .where(ldb.observations_t.c.source == "paired")).mappings().all()
    return [dict(r) for r in rows]


def _ask(gw: Gateway, key: str, texts: list[str]) -> set[str]:
    """Send each prompt to ``promised`` (a cheap backend answers), wait until each request's
    exploration has finished; the backends that answered."""
    client, learning = gw.client(key), gw.app.state.ctx.learning
    served, rids = set(), []
    for text in texts:
        raw = client.chat.completions.with_raw_response.create(
            model="promised", messages=[{"role": "user", "content": text}],
            extra_body={"tollgate": {"cost_weight": 50.0}})
        rids.append(raw.headers["x-tollgate-request-id"])
        served.add(raw.parse().model)
    deadline = time.monotonic() + 60
    while any(learning.recent(r) is None for r in rids) or learning._tasks:
        assert time.monotonic() < deadline, "exploration did not finish"
        time.sleep(0.1)
    return served


def test_once_a_routes_reference_cap_is_spent_requests_are_no_longer_paired(
    gw: Gateway, up: FakeUpstream
) -> None:
    explorer = gw.app.state.ctx.learning.explorer
    key, _ = gw.tenant()
    served = _ask(gw, key, ["Explain topic 0."])
    assert FRONTIER not in served
    assert len(_paired(gw.engine)) == 2  # the served answer and the reference's, judged
    assert len(up.requests_for(FRONTIER)) == 1 and len(up.requests_for("fake-judge")) == 2

    _ask(gw, key, [f"Explain topic {i}." for i in range(1, 4)])
    assert len(_paired(gw.engine)) == 2  # the cap is spent: no request was paired again
    assert len(up.requests_for(FRONTIER)) == 1  # and the reference was never asked
    assert explorer.bounds.skipped_reference_cap == 3
    # the global budget still had room, but a served answer is not judged alone either
    with gw.engine.connect() as conn:
        judged = conn.execute(sa.select(sa.func.count()).select_from(ldb.observations_t)
                              .where(ldb.observations_t.c.source == "judge")).scalar_one()
    assert judged == 0 and len(up.requests_for("fake-judge")) == 2

    shown = xl.spending_by_scope(gw.engine)
    ref = shown[xl.reference_scope("promised")]
    assert ref["budget_usd"] == pytest.approx(CAP_USD)
    assert ref["reserved_usd"] == 0.0
    # one pairing: the reference's answer (3 + 64 tokens: 0.00393 USD) and the judge's two
    # comparisons
    assert 0.00393 < ref["spent_usd"] <= CAP_USD
    assert shown[xl.GLOBAL]["spent_usd"] == pytest.approx(ref["spent_usd"])  # the same calls
    assert shown[xl.GLOBAL]["budget_usd"] == pytest.approx(10.0)
