"""Embeddings get chat's guarantees (issue 35, findings 5 and 6): TPM reserved at admission,
framing tokens in the bound, usage clamped before anything is written, the row always written.
Real gateways on PostgreSQL, the OpenAI SDK, a fake embedding upstream over HTTP that counts as
providers do (special tokens per input) or reports absurd usage."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import Gateway
from tests.gateway.reliability.conftest import MakeGateway
from tests.gateway.reliability.test_hostile import _metric, _scrape
from tests.gateway.reliability.test_ratelimit import _wait_for_room_in_the_minute

PRICE_IN = 20.0  # USD per 1M input tokens: a 1-byte input costs nano-dollars


@pytest.fixture(scope="module")
def embedders() -> Iterator[FakeUpstream]:
    backends = [FakeBackend("emb-bge", reply="", input_per_m=PRICE_IN, output_per_m=0.0,
                            framing_tokens=4),
                FakeBackend("emb-liar", reply="", input_per_m=PRICE_IN, output_per_m=0.0)]
    with FakeUpstream(backends) as up:
        yield up


def _gateway(pg_url: str, make_gateway: MakeGateway, upstream: FakeUpstream,
             embedders: FakeUpstream) -> Gateway:
    models = [upstream.model_entry("fake-cheap", timeout=10),
              embedders.model_entry("emb-bge", mode="embedding", timeout=10),
              embedders.model_entry("emb-liar", mode="embedding", timeout=10)]
    return make_gateway(db_url=pg_url, model_list=models)


def test_framing_tokens_are_in_the_bound_and_never_lock_a_tenant_out(
        pg_url: str, make_gateway: MakeGateway, upstream: FakeUpstream,
        embedders: FakeUpstream) -> None:
    """Before: a backend counting 4 special tokens per input overran a 1-byte input's
    reservation ("actual 160 > reserved 40 nUSD") and a $100 tenant was refused after it."""
    gw = _gateway(pg_url, make_gateway, upstream, embedders)
    key, tid = gw.tenant(budget_usd=100.0)
    client = gw.client(key)
    for _ in range(3):
        raw = client.embeddings.with_raw_response.create(model="emb-bge", input=["a", "b"])
        assert raw.parse().usage.prompt_tokens == 2 + 2 * 4
        row = gw.log_row(raw.headers["x-tollgate-request-id"])
        assert row["cost_usd"] <= row["reserved_usd"] + 1e-15
        assert "overrun_usd" not in row["attempts"][-1]  # within the bound: no overrun
    info = gw.settled(tid)
    assert info["overrun_usd"] == 0 and info["spent_usd"] == pytest.approx(3 * 10 * PRICE_IN / 1e6)


@pytest.mark.parametrize("reported", [10**7, 3 * 10**9, 10**20])
def test_absurd_usage_is_clamped_the_row_written_and_the_backend_held_out(
        pg_url: str, make_gateway: MakeGateway, upstream: FakeUpstream,
        embedders: FakeUpstream, reported: int) -> None:
    """Before: 10^7 tokens booked a $1.30 overrun on a $0.000003 reservation; 3×10^9 lost
    the log row (DataError); 10^20 failed the settlement and held the reservation an hour.
    Now: charged at most the reservation, the row written with the clamped count, nothing
    left held, the excess counted for the operator and the backend held out."""
    gw = _gateway(pg_url, make_gateway, upstream, embedders)
    key, tid = gw.tenant(budget_usd=5.0)
    client = gw.client(key)
    embedders.backends["emb-liar"].reported_tokens = reported
    try:
        raw = client.embeddings.with_raw_response.create(model="emb-liar", input="hello")
    finally:
        embedders.backends["emb-liar"].reported_tokens = None
    row = gw.log_row(raw.headers["x-tollgate-request-id"])
    assert row["status"] == 200 and row["error"] is None
    assert 0 < row["prompt_tokens"] <= len("hello") + 8  # the bound, never the report
    assert 0 < row["cost_usd"] <= row["reserved_usd"] + 1e-15
    assert row["attempts"][-1]["overrun_usd"] > 0
    info = gw.settled(tid)
    assert info["reserved_usd"] == 0 and info["overrun_usd"] == 0
    assert info["spent_usd"] == pytest.approx(row["cost_usd"], abs=2e-9)  # nUSD rounding
    assert _metric(_scrape(gw), 'tollgate_overrun_usd_total{backend="emb-liar"}') > 0
    with pytest.raises(openai.InternalServerError) as exc:
        client.embeddings.create(model="emb-liar", input="hello")
    assert exc.value.status_code == 503 and "held out" in str(exc.value)
    assert client.embeddings.create(model="emb-bge", input="hello").data  # tenant served


def test_embeddings_reserve_tpm_at_admission(
        pg_url: str, make_gateway: MakeGateway, upstream: FakeUpstream,
        embedders: FakeUpstream) -> None:
    """Before: TPM was counted after the answer, so 20 concurrent requests all passed a
    tokens_per_minute limit (20× it). Now each reserves its bound at admission: what the
    answered ones used stays within the limit; the rest get a retryable 429."""
    gw = _gateway(pg_url, make_gateway, upstream, embedders)
    key, _ = gw.tenant(policy={"tokens_per_minute": 200})
    client = gw.client(key)
    text = "word " * 8  # 40 bytes + 8 framing: a bound of 48, the backend counts 8 + 4
    _wait_for_room_in_the_minute()

    def one(_: int) -> int | str:
        try:
            return client.embeddings.create(model="emb-bge", input=text).usage.prompt_tokens
        except openai.RateLimitError as e:
            assert e.response.headers.get("retry-after")
            return str(e.body["code"])  # type: ignore[index]

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(one, range(20)))
    used = [x for x in results if isinstance(x, int)]
    assert used and sum(used) <= 200, results  # emb_tpm_overadmit ≤ 1.0 (before: 240)
    assert [x for x in results if isinstance(x, str)] == ["rate_limit_exceeded"] * (20 - len(used))
