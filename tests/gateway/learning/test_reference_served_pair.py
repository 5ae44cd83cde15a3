"""A promise route its reference served is explored as a pair or not at all: another backend
answers too and the judge compares the two answers (both orders), the pair's whole worst case
booked on the route's share before any call. The reference's grade alone pairs with nothing
the route's certificate can use; before, the share (refilled a little per request) went to
judging the reference alone and the partner's call rarely fitted after it (packaged config,
bench/routing/learning_loop.py --packaged --seed 0 on d481d3e: 2294 served answers judged
alone beside 177 shadow answers; with pairs, 639 pairs).

Real parts: uvicorn, the OpenAI SDK, SQLite with the gateway's migrations, the fake upstream
(the frontier is the route's reference and serves every request; the judge always answers
"Score 1: 4 / Score 2: 9", so a compared answer grades 0.65). ε is 1 and the share 0.5, so
the share binds within the test's 40 requests.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from gateway.learning import exploration_ledger as xl
from gateway.learning import tables as ldb
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway
from tests.gateway.learning.conftest import FRONTIER, JUDGE, promised_gateway

REQUESTS = 40


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, frontier_up: FakeUpstream,
       test_router: Router, encoder) -> Iterator[Gateway]:
    yield from promised_gateway(tmp_path_factory, "refpair", frontier_up, test_router, encoder,
                                {"candidates": 1, "max_share": 0.5}, refine_priors_s=None)


def test_the_reference_served_request_is_judged_as_a_pair_within_the_share(
    gw: Gateway, frontier_up: FakeUpstream
) -> None:
    learning = gw.app.state.ctx.learning
    key, _ = gw.tenant()
    client = gw.client(key)
    served = {client.chat.completions.create(
        model="promised", messages=[{"role": "user", "content": f"Explain topic {i}."}]).model
        for i in range(REQUESTS)}
    assert served == {FRONTIER}  # a promise on priors alone: its reference serves
    deadline = time.monotonic() + 120
    while learning._unrecorded or learning._recording or learning._tasks:
        assert time.monotonic() < deadline, "exploration did not finish"
        time.sleep(0.1)

    with gw.engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(sa.select(ldb.observations_t)).mappings()]
    assert rows, "nothing was explored"
    # every stored grade is one side of a compared pair: no reference judged alone
    assert {r["source"] for r in rows} == {"paired"}
    per_request = Counter(r["request_id"] for r in rows)
    assert set(per_request.values()) == {2}
    for rid in per_request:
        models = {r["model"] for r in rows if r["request_id"] == rid}
        assert FRONTIER in models and len(models) == 2
    assert all(r["quality"] == pytest.approx(0.65) for r in rows)  # 4 and 9, both orders
    judged = frontier_up.requests_for(JUDGE)
    rubric = [r for r in judged if "[Answer 2]" in r["messages"][0]["content"]]
    assert len(rubric) == 2 * len(per_request)  # only pair comparisons went to the judge

    # the share bound what was explored, and every booking settled
    assert learning.explorer.bounds.skipped_share > 0
    with gw.engine.connect() as conn:
        share = conn.execute(sa.select(ldb.ledger_t).where(
            ldb.ledger_t.c.scope == xl.share_scope("promised"))).mappings().first()
    assert share is not None and share["reserved_nusd"] == 0
    assert 0 < share["spent_nusd"] <= share["budget_nusd"]


def test_the_pair_booked_before_the_partner_answers_covers_its_comparison(gw: Gateway) -> None:
    """What ``Explorer._pair`` books before the partner's answer exists bounds the comparison
    booked once it does, for any answer up to the shadow cap (``max_tokens``)."""
    from gateway.learning.judges import compare_unseen_worst_usd, compare_worst_usd
    from gateway.prompt_tokens import count_prompt_tokens

    pool = gw.app.state.ctx.pool.current
    judge = gw.app.state.ctx.learning.explorer.judge
    cap = 64
    backend = pool.backends[JUDGE]
    ahead = compare_unseen_worst_usd(judge, pool, "Explain topic 3.", "frontier answer", cap)
    for words in (0, 1, 10, 40, 200):
        answer = " ".join(["word", "ünïcode", "1234", "x"] * words)
        # what the shadow call could return: its answer cut at cap tokens
        while count_prompt_tokens(backend, [{"role": "user", "content": answer}]) > cap:
            answer = answer[: int(len(answer) * 0.9)]
        booked = compare_worst_usd(judge, pool, "Explain topic 3.", "frontier answer", answer)
        assert 0 < booked <= ahead
