"""A key's own budget bounds concurrent overruns as a tenant's does (issue 35 finding 3): a
key made without a team (its tenant has no budget) whose backend bills past every cap."""

from __future__ import annotations

import httpx

from gateway.serving.budget.bound_factors import BoundFactors
from gateway.serving.budget.budget_gate import BudgetGate
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import ADMIN_KEY, Gateway
from tests.gateway.serving.test_budget_admission import _burst


def test_twenty_concurrent_overruns_of_a_key_without_a_team_stay_bounded(
        gateway: Gateway, upstream: FakeUpstream) -> None:
    """fake-strong ignores max_tokens=16 and bills $0.04 per request, ~25x its reservation;
    a /key/generate key with max_budget $0.05 and no team: what the provider bills stays
    within max_budget × (1 + budget_overrun_exposure) plus one request (before: all 20 were
    admitted, ~16x the key's budget)."""
    gateway.app.state.ctx.budget_gate = BudgetGate()  # a fresh replica: fake-strong untrusted
    budget, bill = 0.05, 1000 * 10.0 / 1e6 + 1000 * 30.0 / 1e6
    made = gateway.admin("POST", "/key/generate", json={"max_budget": budget})
    assert made.status_code == 200, made.text
    key = made.json()["key"]
    saved, upstream.count_tokens = upstream.count_tokens, (lambda _text: 1000)
    try:
        answers = _burst(gateway, key, 20, model="fake-strong", max_tokens=16)
    finally:
        upstream.count_tokens = saved
        # what fake-strong's reports taught this session's gateway stays in this test
        gateway.app.state.ctx.bound_factors = BoundFactors()
    served = sum(r.status_code == 200 for r in answers)
    # 503: the backend held out once a report passed 10x its bound (its overrun is the
    # operator's, gateway/serving/budget/bound_factors.py), never a reason to refuse the key
    assert served >= 1 and {r.status_code for r in answers} <= {200, 429, 503}
    assert all("held out" in r.text for r in answers if r.status_code == 503)
    exposure = gateway.app.state.ctx.settings.budget_overrun_exposure
    assert served * bill <= budget * (1 + exposure) + bill
    info = httpx.get(gateway.base_url + "/key/info", params={"key": key}, timeout=30,
                     headers={"authorization": f"Bearer {ADMIN_KEY}"}).json()["info"]
    assert info["spend"] <= served * bill + 1e-9
