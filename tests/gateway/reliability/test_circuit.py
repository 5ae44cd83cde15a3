"""Circuit breakers: a failing backend is cooled down (skipped without a call), probed after the
cooldown, and taken back when it answers; its state is a Prometheus gauge."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from gateway.reliability.circuit import CircuitBreakers, State
from gateway.reliability.guards import Reliability, ReliabilitySettings
from gateway.serving.upstream import UpstreamFailure
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import ADMIN_KEY, Gateway
from tests.gateway.reliability.conftest import MSG, MakeGateway


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_breaker_state_machine() -> None:
    clock = Clock()
    cb = CircuitBreakers(failure_threshold=3, cooldown_s=10, half_open_probes=1, clock=clock)
    for _ in range(2):
        assert cb.allow("m")
        cb.failure("m")
    cb.success("m")  # a success resets the consecutive count
    for _ in range(3):
        assert cb.allow("m")
        cb.failure("m")
    assert cb.state("m") == State.OPEN and not cb.allow("m")
    clock.t += 10
    assert cb.allow("m")  # the probe
    assert not cb.allow("m")  # one probe at a time
    cb.failure("m")  # probe failed: open again, for a full cooldown
    assert cb.state("m") == State.OPEN and not cb.allow("m")
    clock.t += 10
    assert cb.allow("m")
    cb.success("m")
    assert cb.state("m") == State.CLOSED and cb.allow("m") and cb.allow("m")


def test_lost_probe_does_not_wedge_half_open() -> None:
    clock = Clock()
    cb = CircuitBreakers(failure_threshold=1, cooldown_s=5, clock=clock)
    cb.failure("m")
    clock.t += 5
    assert cb.allow("m")  # a probe whose request never reports back
    assert not cb.allow("m")
    clock.t += 5
    assert cb.allow("m")


def _gauge(gw: Gateway, model: str) -> float:
    text = httpx.get(gw.base_url + "/metrics", timeout=30,
                     headers={"authorization": f"Bearer {ADMIN_KEY}"}).text
    line = next(ln for ln in text.splitlines()
                if ln.startswith("tollgate_circuit_state{") and f'model="{model}"' in ln)
    return float(line.rsplit(" ", 1)[1])


@pytest.fixture
def gw(make_gateway: MakeGateway) -> Gateway:
    return make_gateway(reliability={"circuit": {"failure_threshold": 2, "cooldown_s": 1.0}})


def test_failing_backend_is_cooled_down_and_taken_back(gw: Gateway,
                                                      upstream: FakeUpstream) -> None:
    client = gw.client(gw.tenant()[0])
    upstream.set_mode("fake-mid", "error_500")
    for _ in range(2):  # routed to fake-mid, which fails: fallback to fake-cheap
        r = client.chat.completions.with_raw_response.create(model="auto", messages=MSG)
        assert r.headers["x-tollgate-model"] == "fake-cheap"
    assert len(upstream.requests_for("fake-mid")) == 2
    assert _gauge(gw, "fake-mid") == State.OPEN

    r = client.chat.completions.with_raw_response.create(model="auto", messages=MSG)
    assert r.headers["x-tollgate-model"] == "fake-cheap"
    assert len(upstream.requests_for("fake-mid")) == 2  # skipped, not called
    row = gw.log_row(r.headers["x-tollgate-request-id"])
    assert [(a["model"], a["status"]) for a in row["attempts"]] == [
        ("fake-mid", 503), ("fake-cheap", 200)]
    assert "circuit open" in row["attempts"][0]["error"]

    # passthrough to the open backend: 503 at once, with Retry-After
    with pytest.raises(openai.APIStatusError) as exc:
        client.chat.completions.create(model="fake-mid", messages=MSG)
    assert exc.value.status_code == 503
    assert exc.value.response.headers["retry-after"] == "1"
    assert exc.value.response.json()["error"]["code"] == "upstream_unavailable"

    upstream.set_mode("fake-mid", "ok")  # the backend recovers
    time.sleep(1.1)  # past the cooldown: the next request is the half-open probe
    r = client.chat.completions.with_raw_response.create(model="auto", messages=MSG)
    assert r.headers["x-tollgate-model"] == "fake-mid"
    assert _gauge(gw, "fake-mid") == State.CLOSED


def test_request_faults_do_not_open_the_circuit() -> None:
    """A 400 about the request (or a context window too small for it) means the backend
    answered: it must not be cooled down; timeouts, resets, 429 and 5xx do."""
    rel = Reliability.build(ReliabilitySettings.model_validate(
        {"circuit": {"failure_threshold": 1}}), None)
    rel.upstream_result("a", UpstreamFailure(400, "bad_request", "bad", False))
    rel.upstream_result("a", UpstreamFailure(400, "context_window_exceeded", "long", True))
    assert rel.circuits.state("a") == State.CLOSED
    for kind, status in [("timeout", 504), ("connection", 502), ("rate_limited", 429),
                         ("server_error", 500), ("bad_response", 502)]:
        rel.circuits.success(kind)
        rel.upstream_result(kind, UpstreamFailure(status, kind, "x", True))
        assert rel.circuits.state(kind) == State.OPEN, kind
