"""``/metrics`` after real traffic: the names Prometheus scrapes, and values that agree with
the ledger and the log (requests by route/model/status, latency histograms, time to first
token, fallbacks, spend, budget remaining, router version, log-queue depth)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import settings_from_dict
from tests.gateway.conftest import ADMIN_KEY, Gateway, run_gateway
from tests.gateway.review.conftest import review_config

MSG = [{"role": "user", "content": "Give me one sentence about lighthouses."}]
NAMES = {
    # the request path's (GatewayMetrics in gateway/review/metrics.py)
    "tollgate_requests": "counter",
    "tollgate_request_latency_seconds": "histogram",
    "tollgate_routing_seconds": "histogram",
    "tollgate_routing_decisions": "counter",
    "tollgate_gateway_overhead_seconds": "histogram",
    "tollgate_event_loop_stall_seconds": "histogram",
    "tollgate_upstream_attempts": "counter",
    "tollgate_cost_usd": "counter",
    "tollgate_tokens": "counter",
    # reliability's (gateway/reliability/circuit.py): 0 closed, 1 half-open, 2 open, per backend
    "tollgate_circuit_state": "gauge",
    # the review side's (gateway/review/metrics.py)
    "tollgate_upstream_latency_seconds": "histogram",
    "tollgate_time_to_first_token_seconds": "histogram",
    "tollgate_fallbacks": "counter",
    "tollgate_tenant_spend_usd": "counter",
    "tollgate_routed_requests": "counter",
    "tollgate_budget_usd": "gauge",
    "tollgate_budget_spent_usd": "gauge",
    "tollgate_budget_remaining_usd": "gauge",
    "tollgate_router_info": "gauge",
    "tollgate_log_queue_depth": "gauge",
    "tollgate_log_rows_dropped": "counter",
}


@pytest.fixture(scope="module")
def gw(upstream, test_router, encoder, tmp_path_factory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("metrics")
    settings = settings_from_dict(review_config(upstream, tmp,
                                                database_url=f"sqlite:///{tmp / 'm.db'}"))
    yield from run_gateway(settings, test_router, encoder)


def scrape(gw: Gateway) -> dict[str, object]:
    r = httpx.get(f"{gw.base_url}/metrics", timeout=30,
                  headers={"authorization": f"Bearer {ADMIN_KEY}"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(r.text)}


def value(fams: dict, sample_name: str, **labels: str) -> float:
    fam_name = sample_name
    for suffix in ("_total", "_count", "_sum", "_bucket"):
        if sample_name.endswith(suffix) and sample_name[: -len(suffix)] in fams:
            fam_name = sample_name[: -len(suffix)]
    hits = [s.value for s in fams[fam_name].samples
            if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert hits, (sample_name, labels)
    return sum(hits)


def test_metric_names_and_values(gw: Gateway, upstream) -> None:
    key, tid = gw.tenant(budget_usd=0.5)
    client = gw.client(key)
    raw = client.chat.completions.with_raw_response.create(model="auto", messages=MSG)
    rid = raw.headers["x-tollgate-request-id"]
    upstream.set_mode("fake-mid", "error_500", times=1)
    fb = client.chat.completions.with_raw_response.create(model="auto", messages=MSG)
    st = client.chat.completions.with_raw_response.create(
        model="cheap", messages=MSG, stream=True, stream_options={"include_usage": True})
    for _ in st.parse():
        pass
    for r in (rid, fb.headers["x-tollgate-request-id"], st.headers["x-tollgate-request-id"]):
        gw.log_row(r)  # the row is written after its request settled: wait for all three
    ledger = gw.settled(tid)

    fams = scrape(gw)
    for name, kind in NAMES.items():
        assert name in fams, name
        assert fams[name].type == kind, (name, fams[name].type)

    assert value(fams, "tollgate_requests_total", route="auto", model="fake-mid",
                 status="200") >= 1
    assert value(fams, "tollgate_fallbacks_total", route="auto", model="fake-cheap") == 1
    assert value(fams, "tollgate_upstream_latency_seconds_count", model="fake-mid",
                 status="500") == 1
    assert value(fams, "tollgate_time_to_first_token_seconds_count", route="cheap",
                 model="fake-cheap") == 1
    # the ledger rounds each settlement up to a nano-dollar: equal within 1e-9 per request
    assert value(fams, "tollgate_tenant_spend_usd_total", tenant_id=tid) == pytest.approx(
        ledger["spent_usd"], abs=3e-9)
    assert value(fams, "tollgate_budget_usd", tenant_id=tid) == pytest.approx(0.5)
    assert value(fams, "tollgate_budget_remaining_usd", tenant_id=tid) == pytest.approx(
        0.5 - ledger["spent_usd"], abs=1e-12)
    assert value(fams, "tollgate_router_info", version="test-router-1") == 1
    assert value(fams, "tollgate_routed_requests_total", router_version="test-router-1") == 3
    # every routed request's decision, by the encoder that made it (no cascade here: Φ's own)
    assert value(fams, "tollgate_routing_decisions_total") == 3
    assert {s.labels["encoder"] for s in fams["tollgate_routing_decisions"].samples
            if s.name.endswith("_total")} == {gw.app.state.ctx.encoder.kind}
    assert value(fams, "tollgate_log_queue_depth") >= 0
    assert value(fams, "tollgate_circuit_state", model="fake-mid") in (0, 1, 2)
    # each bucket count of a histogram is cumulative: +Inf holds every observation
    assert value(fams, "tollgate_request_latency_seconds_bucket", route="auto",
                 le="+Inf") >= 2
