"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

A run of requests goes through the real gateway (uvicorn, SQLite, MiniLM, the test router)
to the fake upstream with the openai SDK, feedback is posted to /v1/feedback, and a router
version is recorded with an evaluation computed by ``router_core.evaluation.promotion`` on a small
held-out table. Then the browser logs in as the admin, checks every chart holds that data,
opens a request's explanation and the deferral plot, and logs in as a tenant who must not
see the other tenant's requests. Screenshots go to ``$TOLLGATE_SCREENSHOT_DIR`` (default
``/tmp/tollgate-dashboard-screenshots``); the test prints the path. No browser is ever
downloaded: the test needs /usr/bin/chromium (scripts/install.sh --test installs it).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from playwright import sync_api as playwright_sync

from gateway.config import settings_from_dict
from tests.gateway.conftest import ADMIN_KEY, Gateway, run_gateway
from tests.gateway.review.conftest import review_config
from tests.gateway.router_fixture import PRICES, QUALITY

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run"]
SHOTS = Path(os.environ.get("TOLLGATE_SCREENSHOT_DIR", "/tmp/tollgate-dashboard-screenshots"))
CHARTS = ("chart-spend", "chart-mix", "chart-saving", "chart-latency", "chart-rates",
          "chart-feedback")
PROMPTS = [
    "What is the capital of Australia?",
    "Write a haiku about autumn rain.",
    "Explain the difference between TCP and UDP in two sentences.",
    "Translate 'good morning' into Italian.",
    "Prove that the square root of 2 is irrational.",
    "List three uses of baking soda.",
]



@pytest.fixture(scope="module")
def gw(tmp_path_factory, upstream, test_router, encoder) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("dash")
    settings = settings_from_dict(review_config(upstream, tmp,
                                                database_url=f"sqlite:///{tmp / 'tollgate.db'}"))
    yield from run_gateway(settings, test_router, encoder)


def _feedback(gw: Gateway, key: str, rid: str, score: float, comment: str | None = None) -> None:
    body = {"request_id": rid, "score": score}
    if comment:
        body["comment"] = comment
    r = httpx.post(f"{gw.base_url}/v1/feedback", json=body,
                   headers={"authorization": f"Bearer {key}"}, timeout=30)
    assert r.status_code == 200, r.text


def _record_version(gw: Gateway, router, encoder) -> dict:
    """Evaluate the live router on a small held-out table with the learning loop's own
    evaluation (deferral points per λ, AUDC, QNC) and record it as a router version."""
    from gateway.learning import router_versions
    from router_core.data.table import RoutingTable
    from router_core.evaluation.promotion import PromotionDecision, evaluate_on_holdout

    rng = np.random.default_rng(0)
    models = tuple(QUALITY)
    n = len(PROMPTS)
    quality = np.stack([rng.random(n) < QUALITY[m] for m in models], axis=1).astype(float)
    tokens = np.array([len(p.split()) for p in PROMPTS], dtype=float)
    cost = np.stack([tokens * PRICES[m][0] / 1e6 + 40 * PRICES[m][1] / 1e6 for m in models],
                    axis=1)
    table = RoutingTable(name="holdout", prompt_ids=np.array([f"p{i}" for i in range(n)],
                                                             dtype=object),
                         prompts=np.array(PROMPTS, dtype=object), models=models,
                         quality=quality, cost=cost, split=np.full(n, "test", dtype=object))
    score = evaluate_on_holdout(router, encoder.encode(PROMPTS), table)
    # a candidate with the live router's weights under a new version, as retraining records
    # one (refused, so the live router stays); both sides scored on the same held-out table
    candidate = dataclasses.replace(router, version="test-router-2")
    cand = evaluate_on_holdout(candidate, encoder.encode(PROMPTS), table)
    metrics = PromotionDecision(False, "not better than the live router", cand, score,
                                0.005).to_dict()
    router_versions.record_version(gw.engine, candidate, status="refused", parent=router.version,
                               metrics=metrics, n_observations=n, max_obs_id=0, activate=False)
    return metrics


@pytest.fixture(scope="module")
def traffic(gw: Gateway, upstream, test_router, encoder) -> dict:
    """Two tenants' requests through the gateway, some feedback, one recorded version."""
    # budgets a few times the run's spend (each reservation holds the prompt-token bound),
    # so the chart shows spend climbing toward them
    key_a, tid_a = gw.tenant(budget_usd=0.006, period="monthly")
    key_b, tid_b = gw.tenant(budget_usd=0.004, period="daily")
    a, b = gw.client(key_a), gw.client(key_b)
    sent: dict[str, list[str]] = {"a": [], "b": []}

    def send(client, who: str, **kw) -> str:
        raw = client.chat.completions.with_raw_response.create(
            messages=[{"role": "user", "content": PROMPTS[len(sent[who]) % len(PROMPTS)]}], **kw)
        raw.parse()
        sent[who].append(raw.headers["x-tollgate-request-id"])
        return sent[who][-1]

    for model in ("auto", "auto", "cheap", "best", "auto", "cheap", "fake-cheap"):
        send(a, "a", model=model)
        time.sleep(0.4)  # spread the run over a few time buckets
    upstream.set_mode("fake-mid", "error_500", times=1)
    fallback_id = send(a, "a", model="auto")
    stream = a.chat.completions.create(model="auto", stream=True,
                                       stream_options={"include_usage": True},
                                       messages=[{"role": "user", "content": PROMPTS[1]}])
    for _ in stream:
        pass
    for model in ("best", "auto", "cheap"):
        send(b, "b", model=model)
    from openai import NotFoundError

    with pytest.raises(NotFoundError):
        a.chat.completions.create(model="no-such-model", messages=[{"role": "user",
                                                                     "content": "hi"}])
    _feedback(gw, key_a, sent["a"][0], 1.0, "exactly right")
    _feedback(gw, key_a, sent["a"][1], 0.0, "wrong capital")
    _feedback(gw, key_a, fallback_id, 0.8)
    _feedback(gw, key_b, sent["b"][1], 1.0)
    metrics = _record_version(gw, test_router, encoder)
    for rid in sent["a"] + sent["b"]:
        gw.log_row(rid)  # every row is written before the browser looks
    time.sleep(0.3)
    return {"key_a": key_a, "tid_a": tid_a, "key_b": key_b, "tid_b": tid_b, "sent": sent,
            "fallback_id": fallback_id, "metrics": metrics}


@pytest.fixture(scope="module")
def browser():
    assert os.path.exists(CHROMIUM), f"{CHROMIUM} is missing: run scripts/install.sh --test"
    SHOTS.mkdir(parents=True, exist_ok=True)
    with playwright_sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield b
        b.close()


class Console:
    """Every console error and uncaught page error of one page."""

    def __init__(self, page) -> None:
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("response", lambda r: self.errors.append(f"HTTP {r.status} {r.url}")
                if r.status >= 400 and not r.url.endswith("/dashboard/login") else None)


def _login(browser, gw: Gateway, key: str):
    ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = ctx.new_page()
    console = Console(page)
    page.goto(f"{gw.base_url}/dashboard")
    page.fill("#key", key)
    page.click("#login")
    page.wait_for_selector("body[data-ready='true']", timeout=60_000)
    return ctx, page, console


def _datasets(page, chart_id: str) -> list[dict]:
    return page.evaluate(
        """(id) => Chart.getChart(document.getElementById(id)).data.datasets.map(
               d => ({label: d.label, data: d.data}))""", chart_id)


def test_admin_sees_charts_explanations_and_versions(browser, gw: Gateway, traffic) -> None:
    ctx, page, console = _login(browser, gw, ADMIN_KEY)
    try:
        n_a, n_b = len(traffic["sent"]["a"]), len(traffic["sent"]["b"])
        n_total = n_a + n_b + 2  # + the stream + the 404
        cards = page.inner_text("#cards")
        assert f"requests\n{n_total}" in cards, cards
        for cid in CHARTS:  # every chart drawn by Chart.js with non-empty data
            sets = _datasets(page, cid)
            assert sets and any(v for d in sets for v in d["data"] if v), (cid, sets)
        mix = {d["label"]: sum(d["data"]) for d in _datasets(page, "chart-mix")}
        # the model mix counts answered requests: routed ones and the passthrough
        assert sum(mix.values()) == n_a + n_b + 1 and mix["fake-strong"] >= 2
        spend = {d["label"]: d["data"] for d in _datasets(page, "chart-spend")}
        budget_lines = [k for k in spend if "budget" in k]
        assert len(budget_lines) == 2  # both tenants have a budget
        ledger = gw.ledger(traffic["tid_a"])
        name_a = ledger["name"]
        assert spend[f"{name_a} spend"][-1] == pytest.approx(ledger["spent_usd"], rel=1e-6)
        bar = page.locator(f"#budgets .budget[data-tenant='{name_a}']")  # one bar per budget
        assert page.locator("#budgets .budget").count() == 2
        used = 100 * ledger["spent_usd"] / ledger["budget_usd"]
        assert bar.locator(".budget-pct").inner_text() == f"{used:.1f}%"
        assert "resets" in bar.inner_text()
        assert "upstream failures (5xx)" in cards and "client errors (4xx)" in cards
        assert page.is_disabled("#prev-page") and page.is_disabled("#next-page")  # one page
        saving = {d["label"]: d["data"] for d in _datasets(page, "chart-saving")}
        routed, reference = saving["routed (actual)"], saving["the references (estimated)"]
        assert 0 < routed[-1] < reference[-1]
        # the saving is never alone: the card and each route's row carry the quality change
        assert "quality " in cards.split("estimated saving")[1].split("latency")[0], cards
        saving_rows = page.locator("#route-savings tr[data-route]")
        assert saving_rows.count() == len(gw.settings.routes) + 1  # + passthrough
        passthrough = page.inner_text("#route-savings tr[data-route='passthrough']")
        assert "the client chose the model" in passthrough
        assert "every request on" not in passthrough  # no "+0.000" beside a saving
        rows = page.locator("#requests tbody tr")
        assert rows.count() == n_total
        # per key (issue 47.5): every key that sent traffic, its requests and its bill
        assert page.locator("#spend-by-key tr[data-key]").count() >= 2
        key_requests = page.eval_on_selector_all(
            "#spend-by-key tr[data-key]", "rs => rs.map(r => Number(r.cells[2].innerText))")
        assert sum(key_requests) >= n_a + n_b

        page.click(f"button.explain[data-id='{traffic['fallback_id']}']")
        page.wait_for_selector(f"#explanation[data-id='{traffic['fallback_id']}']:not([hidden])")
        summary = page.inner_text("#exp-summary")
        assert summary.startswith("fake-mid: ") and "failed attempt" in summary
        cand = page.locator("#exp-candidates tr")
        assert cand.count() == 4  # header + the three backends
        assert page.locator("#exp-candidates tr.chosen").inner_text().startswith("fake-mid")
        attempts = page.inner_text("#exp-attempts")
        assert "500" in attempts and "200" in attempts
        assert "0.80" in page.inner_text("#exp-feedback")
        page.locator("#explanation").screenshot(path=str(SHOTS / "explanation.png"))

        versions = page.inner_text("#versions")
        assert "test-router-1 (live)" in versions and "test-router-2" in versions
        assert "refused" in versions
        assert f"{traffic['metrics']['candidate']['audc']:.4f}" in versions
        img = page.locator("#deferral img")
        img.wait_for()
        width = 0
        for _ in range(200):  # the PNG is rendered by matplotlib on request
            width = page.evaluate("() => { const i = document.querySelector('#deferral img');"
                                  " return i.complete ? i.naturalWidth : 0; }")
            if width:
                break
            time.sleep(0.1)
        assert width > 300
        img.screenshot(path=str(SHOTS / "deferral.png"))
        page.screenshot(path=str(SHOTS / "admin-overview.png"), full_page=True)
        assert console.errors == []
        print(f"\ndashboard screenshots: {SHOTS}")
    finally:
        ctx.close()


def test_tenant_sees_only_its_own_data(browser, gw: Gateway, traffic) -> None:
    ctx, page, console = _login(browser, gw, traffic["key_b"])
    try:
        assert page.locator("#tenant").count() == 0  # no tenant picker for a tenant
        ids = page.eval_on_selector_all("#requests tbody tr", "rs => rs.map(r => r.dataset.id)")
        assert sorted(ids) == sorted(traffic["sent"]["b"])
        spend = [d["label"] for d in _datasets(page, "chart-spend")]
        assert len(spend) == 2 and all(gw.ledger(traffic["tid_b"])["name"] in s for s in spend)
        # a developer's own key sees its own row only in the per-key view
        own = page.locator("#spend-by-key tr[data-key]")
        assert own.count() == 1
        assert own.locator("td").nth(2).inner_text() == str(len(traffic["sent"]["b"]))
        assert console.errors == []  # before the deliberate probes below
        # asking for the other tenant, through the dashboard API, still returns only its own
        other = page.evaluate(
            """async (tid) => { const r = await fetch('/dashboard/api/summary?tenant=' + tid);
                                return await r.json(); }""", traffic["tid_a"])
        assert [t["id"] for t in other["tenants"]] == [traffic["tid_b"]]
        assert other["rates"]["overall"]["requests"] == len(traffic["sent"]["b"])
        status = page.evaluate(
            """async (rid) => (await fetch('/dashboard/api/explain/' + rid)).status""",
            traffic["sent"]["a"][0])
        assert status == 404
        page.screenshot(path=str(SHOTS / "tenant-view.png"), full_page=True)
        # only the refused probe of the other tenant's request was logged (as a 404)
        probe = traffic["sent"]["a"][0]
        assert [e for e in console.errors if "404" not in e] == []
        assert any(probe in e for e in console.errors) and len(console.errors) == 2
        page.click("#logout")  # the cookie is gone: back to the form, the API refuses
        page.wait_for_selector("#key")
        assert page.evaluate("async () => (await fetch('/dashboard/api/summary')).status") == 401
    finally:
        ctx.close()


def test_login_refuses_a_bad_key_and_keeps_keys_out_of_urls(browser, gw: Gateway) -> None:
    ctx = browser.new_context()
    page = ctx.new_page()
    try:
        page.goto(f"{gw.base_url}/dashboard")
        page.fill("#key", "sk-wrong")
        with page.expect_response(lambda r: r.url.endswith("/dashboard/login")) as resp:
            page.click("#login")
        assert resp.value.status == 401
        assert "not the admin key" in page.inner_text(".error")
        assert "key=" not in page.url
        r = httpx.get(f"{gw.base_url}/dashboard/api/summary", timeout=30)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    finally:
        ctx.close()
