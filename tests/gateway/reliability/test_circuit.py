"""Circuit breakers: a failing backend is cooled down (skipped without a call), probed after the
cooldown, and taken back when it answers; its state is a Prometheus gauge."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from gateway.provider.failures import UpstreamFailure
from gateway.reliability.circuit import CircuitBreakers, State, count_clients
from gateway.reliability.guards import Reliability, ReliabilitySettings
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
    # min_tenants 1: the plain breaker, one tenant's failures open it (the tenant rule is
    # tested below)
    # a cooldown no slow machine outlasts (a 1 s one expired under load before the passthrough
    # below, and the request reached the backend); the test moves the breaker's clock past it
    return make_gateway(reliability={"circuit": {"failure_threshold": 2, "cooldown_s": 60.0,
                                                 "min_tenants": 1}})


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
    assert exc.value.response.headers["retry-after"] == "60"
    assert exc.value.response.json()["error"]["code"] == "upstream_unavailable"

    upstream.set_mode("fake-mid", "ok")  # the backend recovers
    # past the cooldown: the next request is the half-open probe. The running gateway's
    # breaker is given a clock 60 s ahead (its one time source, CircuitBreakers' clock):
    # sleeping through a cooldown made the test hang on the machine's speed
    circuits = gw.app.state.ctx.reliability.circuits
    circuits._clock = lambda: time.monotonic() + 60.0
    r = client.chat.completions.with_raw_response.create(model="auto", messages=MSG)
    assert r.headers["x-tollgate-model"] == "fake-mid"
    assert _gauge(gw, "fake-mid") == State.CLOSED


def test_request_faults_do_not_open_the_circuit() -> None:
    """A 400 about the request (or a context window too small for it) means the backend
    answered: it must not be cooled down; timeouts, resets, 429 and 5xx do."""
    rel = Reliability.build(ReliabilitySettings.model_validate(
        {"circuit": {"failure_threshold": 1, "min_tenants": 1}}), None)
    rel.upstream_result("a", UpstreamFailure(400, "bad_request", "bad", False), "t1")
    rel.upstream_result("a", UpstreamFailure(400, "context_window_exceeded", "long", True),
                        "t1")
    assert rel.circuits.state("a") == State.CLOSED
    for kind, status in [("timeout", 504), ("connection", 502), ("rate_limited", 429),
                         ("server_error", 500), ("bad_response", 502)]:
        rel.circuits.success(kind)
        rel.upstream_result(kind, UpstreamFailure(status, kind, "x", True), "t1")
        assert rel.circuits.state(kind) == State.OPEN, kind


# No tenant opens a breaker for the others (issue 24; gateway/reliability/circuit.py, C1) ----

def _reliability(threshold: int = 3) -> Reliability:
    return Reliability.build(ReliabilitySettings.model_validate(
        {"circuit": {"failure_threshold": threshold, "cooldown_s": 10}}), None)


def test_one_tenants_failures_never_open_a_breaker() -> None:
    """Timeouts, 5xx and resets met by one tenant's requests (which it can provoke) weigh at
    most ⌈threshold / min_tenants⌉; failures of another tenant's requests still open it."""
    rel = _reliability()
    for kind, status in [("timeout", 504), ("server_error", 500), ("connection", 502)] * 20:
        rel.upstream_result("m", UpstreamFailure(status, kind, "x", True), "hostile")
    assert rel.circuits.state("m") == State.CLOSED
    rel.upstream_result("m", UpstreamFailure(504, "timeout", "x", True), "other")
    assert rel.circuits.state("m") == State.OPEN  # 2 (hostile's share) + 1 ≥ 3, two tenants


def test_content_caused_failures_count_as_answers_and_proven_ones_in_full() -> None:
    rel = _reliability(threshold=2)
    for cause_kind in ["repetition", "bad_request", "context_window_exceeded"]:
        for tenant in ["a", "b", "c"]:
            rel.upstream_result("m", UpstreamFailure(502, cause_kind, "x", False,
                                                     cause="request"), tenant)
    assert rel.circuits.state("m") == State.CLOSED
    for _ in range(2):  # the connection refused: no request content causes that
        rel.upstream_result("m", UpstreamFailure(502, "connection", "refused", True,
                                                 cause="backend"), "a")
    assert rel.circuits.state("m") == State.OPEN


def test_one_tenants_failing_probe_does_not_reopen() -> None:
    clock = Clock()
    cb = CircuitBreakers(failure_threshold=2, cooldown_s=10, clock=clock, min_tenants=2)
    cb.failure("m", "a")
    cb.failure("m", "b")
    assert cb.state("m") == State.OPEN
    clock.t += 10
    assert cb.allow("m")
    cb.failure("m", "hostile")  # its probe failed: the slot is freed, still half-open
    assert cb.state("m") == State.HALF_OPEN and cb.allow("m")
    cb.failure("m", "b")  # a second tenant's probe failed too: open again
    assert cb.state("m") == State.OPEN


def _repeat_or_reply(saved: object):
    def reply(body: dict) -> str:
        text = str(body.get("messages", [{}])[-1].get("content"))
        if "repeat" in text:
            return "hello" + " hello" * 299  # what the client asked for
        return saved(body) if callable(saved) else str(saved)

    return reply


def test_hostile_requests_of_one_tenant_open_no_breaker_an_outage_still_does(
        make_gateway: MakeGateway, upstream: FakeUpstream) -> None:
    """breakers_opened_by_client=0: one tenant's streams asking for " hello" 300 times
    (litellm stops them: the model repeats one chunk) and its requests that time out leave
    fake-mid's breaker closed; two tenants' ordinary requests against a failing fake-mid still
    open it. Before: 2 of either opened it for every tenant."""
    gw = make_gateway(reliability={"circuit": {"failure_threshold": 2, "cooldown_s": 30}})
    hostile = gw.client(gw.tenant()[0])
    b = upstream.backends["fake-mid"]
    saved = b.reply
    b.reply = _repeat_or_reply(saved)
    try:
        for _ in range(4):
            stream = hostile.chat.completions.create(
                model="fake-mid", stream=True,
                messages=[{"role": "user", "content": "repeat ' hello' 300 times"}])
            text = ""
            with pytest.raises(openai.APIError, match="repeating the same chunk"):
                for c in stream:  # streamed until litellm stops it, then an error event
                    text += (c.choices[0].delta.content or "") if c.choices else ""
            assert text.count("hello") >= 50
    finally:
        b.reply = saved
    assert _gauge(gw, "fake-mid") == State.CLOSED
    b.hang_s = 5.0  # past fake-mid's 2 s timeout: each request times out
    upstream.set_mode("fake-mid", "hang", times=3)

    def timed_out(_: int) -> int:
        with pytest.raises(openai.APIStatusError) as exc:
            hostile.chat.completions.create(model="fake-mid", messages=MSG)
        return exc.value.status_code

    with ThreadPoolExecutor(3) as pool:
        assert list(pool.map(timed_out, range(3))) == [504] * 3
    assert _gauge(gw, "fake-mid") == State.CLOSED  # breakers_opened_by_client=0

    upstream.set_mode("fake-mid", "error_500")  # a real outage, met by two tenants
    for key in (gw.tenant()[0], gw.tenant()[0]):
        with pytest.raises(openai.APIStatusError):
            gw.client(key).chat.completions.create(model="fake-mid", messages=MSG)
    assert _gauge(gw, "fake-mid") == State.OPEN


def test_a_tenants_many_keys_count_once(make_gateway: MakeGateway,
                                        upstream: FakeUpstream) -> None:
    """Timeouts met by several keys of one tenant (its own key, team keys, and a user's
    team-less keys) weigh as one tenant's: the breaker stays closed for everyone; another
    tenant's failures then open it (issue 35 finding 9)."""
    gw = make_gateway(reliability={"circuit": {"failure_threshold": 4, "cooldown_s": 60,
                                               "min_tenants": 2}})
    own, tid = gw.tenant()

    def generate(**body: object) -> str:
        r = gw.admin("POST", "/key/generate", json=body)
        assert r.status_code == 200, r.text
        return r.json()["key"]

    keys = {"fake-mid": [own, generate(team_id=tid), generate(team_id=tid)],
            "fake-strong": [generate(user_id="u-many-keys"), generate(user_id="u-many-keys")]}
    for model, group in keys.items():  # one client per backend
        upstream.set_mode(model, "error_500", times=1000)
        for key in group:
            for _ in range(3):
                with pytest.raises(openai.InternalServerError):
                    gw.client(key).chat.completions.create(model=model, messages=MSG,
                                                           max_tokens=8)
        assert _gauge(gw, model) == State.CLOSED, model
    other, _ = gw.tenant()
    for _ in range(2):
        with pytest.raises(openai.APIStatusError):
            gw.client(other).chat.completions.create(model="fake-mid", messages=MSG,
                                                     max_tokens=8)
    assert _gauge(gw, "fake-mid") == State.OPEN


def test_one_users_keys_in_several_teams_count_once(make_gateway: MakeGateway,
                                                    upstream: FakeUpstream) -> None:
    """Issue 48.11: one user's keys in two teams and one without a team are one client
    (principals sharing a tenant or a user, circuit.principal_groups): their 500s leave the
    breaker closed for everyone (before: each team and the user counted as a tenant, so one
    user met min_tenants alone). A second user's failures on top then open it."""
    gw = make_gateway(reliability={"circuit": {"failure_threshold": 4, "cooldown_s": 60,
                                               "min_tenants": 2}})
    _, team_a = gw.tenant()
    _, team_b = gw.tenant()

    def generate(**body: object) -> str:
        r = gw.admin("POST", "/key/generate", json=body)
        assert r.status_code == 200, r.text
        return r.json()["key"]

    keys = [generate(team_id=team_a, user_id="u-48"), generate(team_id=team_b, user_id="u-48"),
            generate(user_id="u-48")]
    upstream.set_mode("fake-mid", "error_500", times=1000)
    for key in keys * 3:
        with pytest.raises(openai.InternalServerError):
            gw.client(key).chat.completions.create(model="fake-mid", messages=MSG,
                                                   max_tokens=8)
    assert _gauge(gw, "fake-mid") == State.CLOSED
    other = generate(user_id="u-other")
    for _ in range(2):
        with pytest.raises(openai.APIStatusError):
            gw.client(other).chat.completions.create(model="fake-mid", messages=MSG,
                                                     max_tokens=8)
    assert _gauge(gw, "fake-mid") == State.OPEN


def test_principal_groups_join_on_any_shared_identity() -> None:
    assert count_clients(["t1|user:a", "t2|user:a", "t2", "t3"]) == 2
    assert count_clients(["t1", "t2|user:b", "t1|user:b"]) == 1
    assert count_clients(["t1", "t2"]) == 2
