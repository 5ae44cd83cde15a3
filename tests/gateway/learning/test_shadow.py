"""Shadow exploration with an LLM judge, on a real gateway over HTTP: the exploration budget
(separate from the tenant's) is never exceeded, every shadow call was booked first, the judge's
scores land as observations, and exploration is off by default."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from gateway.config import ExplorationSettings, settings_from_dict
from gateway.learning import tables as ldb
from gateway.learning.exploration_ledger import nusd
from gateway.learning.judges import parse_score
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import (
    TIMEOUTS,
    Gateway,
    run_gateway,
)
from tests.gateway.learning.conftest import learning_config
from tests.gateway.router_fixture import PRICES, REPLIES

BUDGET_USD = 0.0015
JUDGE_PRICE = (1.0, 2.0)  # USD per 1M tokens in, out


@pytest.fixture(scope="module")
def judged_upstream() -> Iterator[FakeUpstream]:
    backends = [
        FakeBackend(n, reply=REPLIES[n], input_per_m=PRICES[n][0], output_per_m=PRICES[n][1])
        for n in PRICES
    ]
    backends.append(
        FakeBackend(
            "fake-judge", reply="Score: 8", input_per_m=JUDGE_PRICE[0], output_per_m=JUDGE_PRICE[1]
        )
    )
    with FakeUpstream(backends) as up:
        yield up


@pytest.fixture(scope="module")
def gw(
    tmp_path_factory: pytest.TempPathFactory,
    judged_upstream: FakeUpstream,
    test_router: Router,
    encoder,
) -> Iterator[Gateway]:
    url = f"sqlite:///{tmp_path_factory.mktemp('shadow') / 'tollgate.db'}"
    cfg = learning_config(judged_upstream, database_url=url)
    cfg["model_list"] = [judged_upstream.model_entry(n, timeout=TIMEOUTS[n]) for n in PRICES]
    cfg["model_list"].append(judged_upstream.model_entry("fake-judge"))
    cfg["retraining"] = {
        "exploration": {
            "enabled": True,
            "epsilon": {"best": 1.0},
            "candidates": 2,
            "budget_usd": BUDGET_USD,
            "period": "total",
            "max_tokens": 512,
            "judge": {"kind": "llm", "model": "fake-judge"},
            # this test is about the global budget_usd; the share of route spend
            # (max_share, on by default) is tested in test_exploration_share.py
            "max_share": None,
        }
    }
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


def _ledger(engine: sa.Engine) -> dict:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(ldb.ledger_t)).mappings().all()
    return {"rows": [dict(r) for r in rows]}


def test_exploration_stays_within_its_budget_and_records_judged_observations(
    gw: Gateway, judged_upstream: FakeUpstream
) -> None:
    key, tenant_id = gw.tenant()
    explorer = gw.app.state.ctx.learning.explorer
    client = gw.client(key)
    learning = gw.app.state.ctx.learning
    rids = []
    for i in range(12):
        raw = client.chat.completions.with_raw_response.create(
            model="best", messages=[{"role": "user", "content": f"Explain topic number {i}."}]
        )
        rids.append(raw.headers["x-tollgate-request-id"])
        # the client already has its answer; the shadow calls run behind it
    deadline = time.monotonic() + 120
    # every request has been taken up after its response (its shadow calls spawned), and
    # every spawned task has finished
    while (
        any(learning.recent(r) is None for r in rids)
        or explorer.bounds.skipped_budget == 0
        or learning._tasks
    ):
        assert time.monotonic() < deadline, "exploration did not finish"
        time.sleep(0.1)
    ledger = _ledger(gw.engine)["rows"]
    assert len(ledger) == 1
    row = ledger[0]
    budget = nusd(BUDGET_USD)
    assert row["budget_nusd"] == budget
    assert row["reserved_nusd"] == 0  # every booking settled
    assert 0 < row["spent_nusd"] <= budget
    # some explorations were refused for budget, and no unbooked shadow call was made
    assert explorer.bounds.skipped_budget > 0
    shadow_calls = sum(len(judged_upstream.requests_for(n)) for n in ("fake-mid", "fake-cheap"))
    assert shadow_calls == explorer.calls > 0
    # spent equals the priced usage of every shadow and judge call the upstream saw
    expected = 0.0
    for name, price in [
        ("fake-mid", PRICES["fake-mid"]),
        ("fake-cheap", PRICES["fake-cheap"]),
        ("fake-judge", JUDGE_PRICE),
    ]:
        for req in judged_upstream.requests_for(name):
            words = sum(len(str(m.get("content", "")).split()) for m in req["messages"])
            reply = "Score: 8" if name == "fake-judge" else REPLIES[name]
            expected += (words * price[0] + len(reply.split()) * price[1]) / 1e6
    assert row["spent_nusd"] == pytest.approx(nusd(expected), abs=5)
    with gw.engine.connect() as conn:
        obs = conn.execute(sa.select(ldb.observations_t)).mappings().all()
    sources = {o["source"] for o in obs}
    assert sources == {"judge", "shadow"}
    assert all(o["quality"] == pytest.approx(0.8) for o in obs)  # "Score: 8" → 0.8
    assert {o["model"] for o in obs if o["source"] == "judge"} == {"fake-strong"}
    assert {o["model"] for o in obs if o["source"] == "shadow"} <= {"fake-mid", "fake-cheap"}
    assert all(o["tenant_id"] == tenant_id for o in obs)
    # the tenant paid only for its own 12 answers (4 prompt words, 8 reply words at the strong
    # model's price): exploration is not on its ledger
    info = gw.settled(tenant_id)
    strong_in, strong_out = PRICES["fake-strong"]
    assert info["spent_usd"] == pytest.approx(12 * (4 * strong_in + 8 * strong_out) / 1e6, abs=1e-7)


def test_exploration_is_on_by_default_and_scores_parse() -> None:
    """Exploration is on by default since issue 46 (bounded by max_share of each route's
    spend); this test asserted it was off before."""
    cfg = ExplorationSettings()
    assert cfg.enabled is True and cfg.max_share == 0.05 and cfg.epsilon_for("auto") == 0.5
    assert ExplorationSettings(epsilon={"auto": 0.3}).epsilon_for("best") == 0.0
    assert parse_score("Score: 7") == pytest.approx(0.7)
    assert parse_score("score=10, great") == 1.0
    assert parse_score("I'd give it 3") == pytest.approx(0.3)
    assert parse_score("no idea") is None
