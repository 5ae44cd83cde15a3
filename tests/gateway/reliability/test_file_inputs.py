"""Inputs the provider reads by reference have a bound, or a clear 400 (issue 35, finding 4):
a real gateway on PostgreSQL, the OpenAI SDK, a fake upstream over HTTP that bills a file part
100,000 prompt tokens, as a provider reading a long document by its id does."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import Gateway
from tests.gateway.reliability.conftest import MakeGateway
from tests.gateway.reliability.test_hostile import _metric, _scrape

FILE_TOKENS = 100_000
FILE_ID = {"type": "file", "file": {"file_id": "file-6F2ksmvXxt4VdoqmHRw6kL"}}
FILE_DATA = {"type": "file", "file": {"filename": "q3.pdf",
                                      "file_data": "data:application/pdf;base64,JVBERi0xLjcK"}}


@pytest.fixture(scope="module")
def reader() -> Iterator[FakeUpstream]:
    # $0.10 per 1M tokens: a 100k-token file reserves $0.01, so a $0.05 budget pays a few
    backends = [FakeBackend(n, reply="ok", input_per_m=0.1, output_per_m=0.1,
                            file_tokens=FILE_TOKENS) for n in ("doc-open", "doc-bounded")]
    with FakeUpstream(backends) as up:
        yield up


def _gateway(pg_url: str, make_gateway: MakeGateway, reader: FakeUpstream) -> Gateway:
    models = [reader.model_entry("doc-open", timeout=10),
              reader.model_entry("doc-bounded", timeout=10, max_file_tokens=FILE_TOKENS)]
    return make_gateway(db_url=pg_url, model_list=models)


def _said(parts: list[dict]) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": "Summarise it."}, *parts]}]


@pytest.mark.parametrize("part", [FILE_ID, FILE_DATA], ids=["file_id", "file_data"])
def test_a_file_part_without_a_declared_bound_is_a_clear_400(
        pg_url: str, make_gateway: MakeGateway, reader: FakeUpstream, part: dict) -> None:
    """Before: the part passed through; it reserved ~$0.0017 and the provider billed 100k
    tokens (6-10x a $0.05 budget over 20 requests). Inline file data is refused too: a PDF's
    compressed streams hold more text than its bytes, so its bytes bound nothing."""
    gw = _gateway(pg_url, make_gateway, reader)
    key, tid = gw.tenant(budget_usd=0.05)
    sent = len(reader.requests)
    with pytest.raises(openai.BadRequestError) as exc:
        gw.client(key).chat.completions.create(model="doc-open", messages=_said([part]))
    err = exc.value.body
    assert err["code"] == "unbounded_file_input" and err["param"] == "messages"  # type: ignore[index]
    assert "max_file_tokens" in err["message"]  # type: ignore[index]  # how to allow it
    assert len(reader.requests) == sent  # nothing reached the provider
    assert gw.settled(tid)["spent_usd"] == 0


def test_responses_input_file_and_audio_by_url_are_refused(
        pg_url: str, make_gateway: MakeGateway, reader: FakeUpstream) -> None:
    gw = _gateway(pg_url, make_gateway, reader)
    key, _ = gw.tenant(budget_usd=0.05)
    client = gw.client(key)
    for ref in ({"file_url": "https://example.com/annual-report.pdf"}, {"file_id": "file-1"}):
        with pytest.raises(openai.BadRequestError) as exc:
            client.responses.create(model="doc-open", input=[{"role": "user", "content": [
                {"type": "input_text", "text": "Summarise it."},
                {"type": "input_file", **ref}]}])
        assert exc.value.body["code"] == "unbounded_file_input"  # type: ignore[index]
    audio = {"type": "input_audio",
             "input_audio": {"data": "https://example.com/call.wav", "format": "wav"}}
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="doc-open", messages=_said([audio]))
    assert exc.value.body["param"] == "messages[0].content[1].input_audio.data"  # type: ignore[index]


def test_a_backend_declaring_max_file_tokens_takes_files_within_the_budget(
        pg_url: str, make_gateway: MakeGateway, reader: FakeUpstream) -> None:
    """A backend that declares ``max_file_tokens`` reserves it per file: the provider's bill
    fits the reservation (no overrun) and a $0.05 budget holds over 20 requests."""
    gw = _gateway(pg_url, make_gateway, reader)
    key, tid = gw.tenant(budget_usd=0.05)
    client = gw.client(key)
    served = 0
    for _ in range(20):
        try:
            r = client.chat.completions.create(model="doc-bounded", messages=_said([FILE_ID]),
                                               max_tokens=8)
        except openai.RateLimitError:
            continue
        assert r.usage is not None and r.usage.prompt_tokens > FILE_TOKENS
        served += 1
    assert served >= 1  # what the budget pays is served
    info = gw.settled(tid)
    assert info["spent_usd"] <= 0.05 and info["overrun_usd"] == 0
    assert _metric(_scrape(gw), 'tollgate_overrun_usd_total{backend="doc-bounded"}') == 0
