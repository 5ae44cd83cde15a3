"""A promise served from judged-pair certificates, through the running gateway.

Route ``auto`` promises within 0.15 of a dear frontier reference over one cheap backend.
Every request is explored: the reference or the cheap backend serves it, the other answers
too, and a judge grades both. The learning loop (the refine lease's holder) certifies the
route from those pairs and publishes the certificate in a router version; the gateway hot-swaps
it in and serves it. Where the judge finds the cheap backend as good as the reference, ``auto``
then sends the region's prompts to it, and the explanation says a certificate decided, with its
evidence; where the judge finds it worse, it is not certified within the promise and serves no
more than the share the route's bound allows beside the reference (eq. (9) of
router_core/promise/route_certificate.py: for one region and one candidate, share × U).

Real parts: uvicorn, the OpenAI SDK, SQLite with the gateway's migrations, the fake upstream.
The judge is a fake backend whose verdicts are fixed by the answer it reads (the cheap
backend's reply graded as the frontier's, or far below it), so the outcome is known.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.config import settings_from_dict
from gateway.pool.certificates import CERTIFICATES_KEY
from router_core.promise.certify import MIN_PAIRS
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import Gateway, run_gateway
from tests.gateway.learning.conftest import FRONTIER, JUDGE, learning_config
from tests.gateway.router_fixture import PRICES, REPLIES

CHEAP = "fake-cheap"
# distinct prompts judged, then served after the certificate: 150, since 30% of them order
# the route's policies and a Bernstein bound on the other 105 certifies a drop of 0.15 from
# ties alone (route_certificate eqs. (8)-(9): about 0.12), where 60 bound it to about 0.30
TRAIN, AFTER = 150, 30


def judge_reply(cheap_grade: int) -> Any:
    """The judge's verdicts: the frontier's answer 9, the cheap backend's ``cheap_grade``."""

    def grade(answer: str) -> int:
        return cheap_grade if REPLIES[CHEAP] in answer else 9

    def reply(body: dict) -> str:
        text = body["messages"][0]["content"]
        if "[Answer 1]" in text:  # a side-by-side comparison
            first, second = text.split("[Answer 1]", 1)[1].split("[Answer 2]", 1)
            return f"Score 1: {grade(first)}\nScore 2: {grade(second)}"
        return f"Score: {grade(text.split('[Answer]', 1)[1])}"

    return reply


def start(tmp: Any, cheap_grade: int, test_router: Router, encoder: Any
          ) -> Iterator[tuple[Gateway, FakeUpstream]]:  # fmt: skip
    backends = [FakeBackend(n, reply=REPLIES[n], input_per_m=PRICES[n][0],
                            output_per_m=PRICES[n][1]) for n in PRICES]
    backends += [FakeBackend(FRONTIER, reply="The frontier answers.", input_per_m=30.0,
                            output_per_m=60.0),
                FakeBackend(JUDGE, reply=judge_reply(cheap_grade), input_per_m=1.0,
                            output_per_m=2.0)]
    with FakeUpstream(backends) as up:
        cfg = learning_config(up, database_url=f"sqlite:///{tmp / 'tollgate.db'}")
        cfg["model_list"] += [up.model_entry(FRONTIER), up.model_entry(JUDGE)]
        cfg["routes"] = {"auto": {"max_drop": 0.15, "reference": FRONTIER,
                                  "models": [CHEAP, FRONTIER]}}
        cfg["retraining"] = {"refine_priors_s": 0.5, "poll_s": 0.5, "exploration": {
            "enabled": True, "epsilon": {"auto": 1.0}, "candidates": 1, "budget_usd": 10.0,
            "period": "total", "max_tokens": 64, "max_share": None,
            "judge": {"kind": "llm", "model": JUDGE}}}
        for gw in run_gateway(settings_from_dict(cfg), test_router, encoder):
            yield gw, up


@pytest.fixture(scope="module")
def as_good(tmp_path_factory: pytest.TempPathFactory, test_router: Router, encoder: Any
            ) -> Iterator[tuple[Gateway, FakeUpstream]]:  # fmt: skip
    yield from start(tmp_path_factory.mktemp("as-good"), 9, test_router, encoder)


@pytest.fixture(scope="module")
def worse(tmp_path_factory: pytest.TempPathFactory, test_router: Router, encoder: Any
          ) -> Iterator[tuple[Gateway, FakeUpstream]]:  # fmt: skip
    yield from start(tmp_path_factory.mktemp("worse"), 2, test_router, encoder)


def ask(gw: Gateway, key: str, prompts: list[str]) -> list[tuple[str, str]]:
    """(backend, request id) per prompt, sent to ``auto`` with the openai SDK."""
    out = []
    for text in prompts:
        raw = gw.client(key).chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": text}])
        out.append((raw.parse().model, raw.headers["x-tollgate-request-id"]))
        HEADERS[out[-1][1]] = raw.headers.get("x-tollgate-certificate")
    return out


HEADERS: dict[str, str | None] = {}  # request id -> its x-tollgate-certificate header


def certified_after(gw: Gateway, key: str) -> Any:
    """Judge TRAIN distinct prompts, then wait for their certificate to be served."""
    ctx = gw.app.state.ctx
    first = ask(gw, key, [f"Explain topic {i} briefly." for i in range(TRAIN)])
    deadline = time.monotonic() + 120
    while True:  # bounded wait for the background work, never a timing assertion
        cert = ctx.pool.current.certificates.get("auto")
        if cert is not None and cert.pairs >= TRAIN and not ctx.learning._tasks:
            return first, cert
        assert time.monotonic() < deadline, "no certificate was served from the judged pairs"
        time.sleep(0.2)


def explain(gw: Gateway, key: str, rid: str) -> dict:
    deadline = time.monotonic() + 30
    while True:
        r = httpx.get(f"{gw.base_url}/v1/routing/{rid}",
                      headers={"authorization": f"Bearer {key}"}, timeout=30)
        if r.status_code == 200:
            return r.json()
        assert time.monotonic() < deadline, r.text
        time.sleep(0.1)


def test_a_cheap_backend_judged_as_good_is_certified_and_served(
    as_good: tuple[Gateway, FakeUpstream]
) -> None:
    gw, _ = as_good
    key, _ = gw.tenant()
    first, cert = certified_after(gw, key)
    # before MIN_PAIRS judged prompts there is no evidence: the prior-based rule keeps the
    # reference (the certificate may arrive while the rest are sent)
    assert {b for b, _ in first[:MIN_PAIRS]} == {FRONTIER}
    assert cert.certified_regions == len(cert.mixes) >= 1
    assert all(m == {CHEAP: 1.0} for m in cert.mixes)  # bound within the promise: all of it
    h = cert.backends.index(CHEAP)
    assert (cert.upper[:, h] <= 0.15).all() and (cert.n_prompts[:, h] >= TRAIN).all()
    # published as a router version every replica swaps to
    assert CERTIFICATES_KEY in gw.app.state.ctx.pool.current.router.config
    assert "@certified-" in gw.app.state.ctx.pool.current.version

    after = ask(gw, key, [f"Summarise subject {i}." for i in range(AFTER)])
    assert {b for b, _ in after} == {CHEAP}
    why = explain(gw, key, after[0][1])
    assert "certificate" in why["decision"]["reason"]
    assert "judged prompts" in why["decision"]["reason"]
    evidence = why["decision"]["certificate"]
    assert evidence["backend"] == CHEAP and evidence["n_prompts"] >= TRAIN
    assert HEADERS[after[0][1]] == (f"region={evidence['region']}; n_prompts="
                                    f"{evidence['n_prompts']}; drop_bound="
                                    f"{evidence['upper_drop']:.4f}")
    assert evidence["upper_drop"] == pytest.approx(float(cert.upper[evidence["region"], h]))
    models = httpx.get(f"{gw.base_url}/v1/models", headers={"authorization": f"Bearer {key}"},
                       timeout=30).json()["data"]
    entry = next(m for m in models if m["id"] == "auto")["tollgate"]["learning"]
    assert entry["certified_regions"]["certified"] == cert.certified_regions
    assert entry["certified_regions"]["judged_pairs"] >= TRAIN


def test_a_cheap_backend_judged_worse_gets_no_more_than_the_promise_allows(
    worse: tuple[Gateway, FakeUpstream]
) -> None:
    """Judged far below the reference (2 against 9), the cheap backend is never certified for
    the region: its drop bound is over the promise. The route's certificate still mixes it with
    the reference at the share whose bound spends the promise (share × U ≤ 0.15), so it serves
    only that hash-drawn share, and the judged drop of what was served stays within 0.15."""
    gw, _ = worse
    key, _ = gw.tenant()
    first, cert = certified_after(gw, key)
    h = cert.backends.index(CHEAP)
    assert (cert.upper[:, h] > 0.15).all()  # not within the promise anywhere
    for g, mix in enumerate(cert.mixes):
        assert set(mix) <= {CHEAP}
        assert mix.get(CHEAP, 0.0) * cert.upper[g, h] <= 0.15 + 1e-9
    after = ask(gw, key, [f"Summarise subject {i}." for i in range(2 * AFTER)])
    assert {b for b, _ in first[:MIN_PAIRS]} == {FRONTIER}
    cheap = [rid for b, rid in after if b == CHEAP]
    # the judged drop of what auto served: 0.7 (9 - 2, of 10) on each cheap answer
    assert 0.7 * len(cheap) / len(after) <= 0.15
    print(f"worse: mixes {cert.mixes}, bound {cert.upper[:, h]}, cheap served "
          f"{len(cheap)}/{len(after)}")
    for rid in cheap[:3]:  # each one the certificate's draw, with its evidence
        why = explain(gw, key, rid)["decision"]
        assert why["certificate"]["backend"] == CHEAP
        assert why["certificate"]["upper_drop"] > 0.15
        assert HEADERS[rid] is not None and HEADERS[rid].startswith("region=")
    for _, rid in [a for a in after if a[0] == FRONTIER][:3]:
        why = explain(gw, key, rid)["decision"]
        assert why["certificate"] is None or why["certificate"]["backend"] == FRONTIER
