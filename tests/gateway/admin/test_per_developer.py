"""Spend per developer and per session, and a request's records kept to the key that made it
(issue 47 item 5, issue 48 items 7, 8 and 14), through a running gateway over HTTP (the fake
upstream, the official openai and anthropic SDKs, SQLite and PostgreSQL).

- every log row carries its key, its key's user and its session (Claude Code's
  ``x-claude-code-session-id``, LiteLLM's ``x-litellm-session-id`` or ``metadata.session_id``)
  and tags; ``/spend/logs`` filters by session and returns each request's session id;
- ``/spend/logs`` validates its dates (9999-12-31 is a 400), caps its range and pages;
- ``/v1/routing/{id}`` and ``/v1/feedback`` answer only the key that made the request, its
  team's admin and the admin key; a teammate gets the unknown id's 404.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import anthropic
import httpx
import pytest

from tests.gateway.conftest import ADMIN_KEY, Gateway

MSG = [{"role": "user", "content": "hello"}]


def _ok(r: httpx.Response) -> Any:
    assert r.status_code == 200, r.text
    return r.json()


def _post(g: Gateway, path: str, **body: Any) -> Any:
    return _ok(g.admin("POST", path, json=body))


def _uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _logs(g: Gateway, want: int, wait_s: float = 30.0, **params: Any) -> list[dict]:
    deadline = time.monotonic() + wait_s
    while True:
        rows = _ok(g.admin("GET", "/spend/logs", params={"summarize": "false", **params}))
        if len(rows) >= want or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def _team_keys(g: Gateway, n: int, **user_fields: Any) -> tuple[dict, list[dict]]:
    """A team and ``n`` keys of it, each for its own new user (``user_fields`` for the
    first)."""
    team = _post(g, "/team/new", team_alias=_uid("devs"))
    keys = []
    for i in range(n):
        uid = _uid("dev")
        _post(g, "/user/new", user_id=uid, auto_create_key=False,
              **(user_fields if i == 0 else {}))
        keys.append(_post(g, "/key/generate", team_id=team["team_id"], user_id=uid))
    return team, keys


def test_spend_logs_return_each_requests_user_session_and_tags(gateway: Gateway) -> None:
    _, (alice,) = _team_keys(gateway, 1)
    s_claude, s_litellm, s_meta = (str(uuid.uuid4()) for _ in range(3))
    ids: dict[str, str | None] = {}
    claude = anthropic.Anthropic(base_url=gateway.base_url, api_key=alice["key"],
                                 max_retries=0,
                                 default_headers={"x-claude-code-session-id": s_claude})
    for _ in range(2):  # Claude Code's wire: /v1/messages with its session header
        raw = claude.messages.with_raw_response.create(
            model="fake-cheap", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
        ids[raw.headers["x-tollgate-request-id"]] = s_claude
    oa = gateway.client(alice["key"])
    raw = oa.chat.completions.with_raw_response.create(
        model="fake-cheap", messages=MSG, max_tokens=8,
        extra_headers={"x-litellm-session-id": s_litellm}, extra_body={"tags": ["ci", "eval"]})
    ids[raw.headers["x-tollgate-request-id"]] = s_litellm
    raw = oa.chat.completions.with_raw_response.create(
        model="fake-cheap", messages=MSG, max_tokens=8,
        extra_body={"litellm_metadata": {"session_id": s_meta}})
    ids[raw.headers["x-tollgate-request-id"]] = s_meta
    raw = oa.chat.completions.with_raw_response.create(model="fake-cheap", messages=MSG,
                                                       max_tokens=8)
    ids[raw.headers["x-tollgate-request-id"]] = None

    rows = _logs(gateway, len(ids), api_key=alice["key"])
    assert {r["request_id"]: r["session_id"] for r in rows} == ids
    assert {r["user"] for r in rows} == {alice["user_id"]}
    tagged = [r for r in rows if r["session_id"] == s_litellm]
    assert tagged[0]["request_tags"] == ["ci", "eval"]
    claude_rows = _logs(gateway, 2, session_id=s_claude)
    assert sorted(r["request_id"] for r in claude_rows) == sorted(
        rid for rid, s in ids.items() if s == s_claude)
    assert _logs(gateway, 0, session_id=str(uuid.uuid4()), wait_s=0) == []
    # a user /spend/logs knows, /user/info knows too, with the same spend
    info = _ok(gateway.admin("GET", "/user/info", params={"user_id": alice["user_id"]}))
    assert info["user_info"]["spend"] == pytest.approx(sum(r["spend"] for r in rows), rel=1e-9)

    r = httpx.post(gateway.base_url + "/v1/chat/completions", timeout=30, json={
        "model": "fake-cheap", "messages": MSG, "max_tokens": 8},
        headers={"authorization": f"Bearer {alice['key']}",
                 "x-litellm-session-id": "x" * 5000})
    assert r.status_code == 400 and r.json()["error"]["param"] == "x-litellm-session-id"


def test_user_info_finds_a_user_known_only_from_its_keys(gateway: Gateway) -> None:
    """A key generated with a ``user_id`` no /user/new made: /spend/logs knows the user by
    its requests, so /user/info does too (issue 47: it said "User not found")."""
    uid = _uid("carol")
    key = _post(gateway, "/key/generate", user_id=uid)
    gateway.client(key["key"]).chat.completions.create(model="fake-cheap", messages=MSG,
                                                       max_tokens=8)
    rows = _logs(gateway, 1, user_id=uid)
    info = _ok(gateway.admin("GET", "/user/info", params={"user_id": uid}))
    assert info["user_id"] == uid and [k["token"] for k in info["keys"]] == [key["token"]]
    assert info["user_info"]["spend"] == pytest.approx(rows[0]["spend"], rel=1e-9)
    r = gateway.admin("GET", "/user/info", params={"user_id": _uid("nobody")})
    assert r.status_code == 404


def test_spend_logs_dates_ranges_and_pages_are_bounded(gateway: Gateway) -> None:
    _, (dev,) = _team_keys(gateway, 1)
    oa = gateway.client(dev["key"])
    for _ in range(3):
        oa.chat.completions.create(model="fake-cheap", messages=MSG, max_tokens=8)
    _logs(gateway, 3, api_key=dev["key"])
    for params, param in (({"end_date": "9999-12-31"}, "end_date"),
                          ({"end_date": "9999-12-30"}, "end_date"),
                          ({"start_date": "2020-01-01", "end_date": "2026-01-01"}, "end_date"),
                          ({"start_date": "2026-02-01", "end_date": "2026-01-01"}, "end_date"),
                          ({"start_date": "0001-01-01"}, "start_date")):
        r = gateway.admin("GET", "/spend/logs", params=params)
        assert r.status_code == 400, (params, r.text)
        assert r.json()["error"]["param"] == param
    for bad in ({"page": 0}, {"page_size": 100_000}):
        assert gateway.admin("GET", "/spend/logs", params=bad).status_code == 400
    first = gateway.admin("GET", "/spend/logs", params={
        "api_key": dev["key"], "page_size": 2, "summarize": "false"})
    assert len(_ok(first)) == 2
    assert first.headers["x-litellm-spend-logs-truncated"] == "true"
    assert first.headers["x-tollgate-next-page"] == "2"
    second = gateway.admin("GET", "/spend/logs", params={
        "api_key": dev["key"], "page_size": 2, "page": 2, "summarize": "false"})
    assert len(_ok(second)) == 1 and "x-tollgate-next-page" not in second.headers
    assert not {r["request_id"] for r in first.json()} & {r["request_id"]
                                                           for r in second.json()}


def _explain(g: Gateway, rid: str, key: str) -> httpx.Response:
    return httpx.get(f"{g.base_url}/v1/routing/{rid}", timeout=30,
                     headers={"authorization": f"Bearer {key}"})


def _feedback(g: Gateway, rid: str, key: str) -> httpx.Response:
    return httpx.post(f"{g.base_url}/v1/feedback", timeout=30,
                      headers={"authorization": f"Bearer {key}"},
                      json={"request_id": rid, "score": 1.0})


def test_a_requests_records_answer_only_its_key_its_team_admin_and_the_admin(
        gateway: Gateway) -> None:
    _, (lead, alice, bob) = _team_keys(gateway, 3, user_role="proxy_admin")
    raw = gateway.client(alice["key"]).chat.completions.with_raw_response.create(
        model="auto", messages=MSG, max_tokens=8)
    rid = raw.headers["x-tollgate-request-id"]
    gateway.log_row(rid)
    assert _explain(gateway, rid, alice["key"]).status_code == 200
    teammate, unknown = (_explain(gateway, rid, bob["key"]),
                         _explain(gateway, "tg-" + uuid.uuid4().hex, bob["key"]))
    assert teammate.status_code == unknown.status_code == 404  # alike: ids cannot be probed
    assert teammate.json()["error"]["code"] == "request_not_found"
    assert _explain(gateway, rid, lead["key"]).status_code == 200  # its team's admin
    assert _explain(gateway, rid, ADMIN_KEY).status_code == 200

    fb = _feedback(gateway, rid, bob["key"])  # a teammate's feedback never counts
    assert fb.status_code == 404 and fb.json()["error"]["code"] == "request_not_found"
    assert _feedback(gateway, rid, alice["key"]).status_code == 200


def test_unknown_routing_ids_wait_in_few_slots(gateway: Gateway) -> None:
    """An id the gateway never issues is the unknown id's 404; a key has at most
    ``WAITS_PER_KEY`` lookups in flight, the next is a 429 (its timing is the hostile bench's
    ``routing_poll_neighbour_p50_ratio``)."""
    import concurrent.futures as cf

    from gateway.review.explain import WAITS_PER_KEY

    _, (dev,) = _team_keys(gateway, 1)
    r = _explain(gateway, "not-an-id-" + "x" * 100, dev["key"])
    assert r.status_code == 404 and r.json()["error"]["code"] == "request_not_found"
    with cf.ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda _: _explain(gateway, "tg-" + uuid.uuid4().hex,
                                                 dev["key"]).status_code, range(8)))
    assert set(codes) <= {404, 429} and codes.count(404) >= WAITS_PER_KEY
    assert 429 in codes


def test_the_dashboards_per_key_view_matches_tollgate_logs_key(gateway: Gateway) -> None:
    """Per key and per developer: the dashboard's view (requests, the bill) equals what
    ``tollgate logs --key`` / ``--user`` / ``--session`` print from the same log; a developer's
    own key sees its own key and user only, never a teammate's."""
    import json

    from click.testing import CliRunner

    from gateway.cli import main

    _, (alice, bob) = _team_keys(gateway, 2)
    session = str(uuid.uuid4())
    for key, n in ((alice, 3), (bob, 1)):
        for _ in range(n):
            gateway.client(key["key"]).chat.completions.create(
                model="fake-cheap", messages=MSG, max_tokens=8,
                extra_headers={"x-litellm-session-id": session})
    _logs(gateway, 4, session_id=session)

    def cli(*args: str) -> list[dict]:
        res = CliRunner().invoke(main, ["logs", "--database-url", gateway.db_url,
                                        "--format", "jsonl", "--limit", "0", *args])
        assert res.exit_code == 0, res.output
        return [json.loads(line) for line in res.output.splitlines() if line.strip()]

    def view(key: str, by: str) -> list[dict]:
        return _ok(httpx.get(f"{gateway.base_url}/dashboard/api/spend", timeout=30,
                             params={"by": by}, headers={"authorization": f"Bearer {key}"}))[
            "data"]

    mine = cli("--key", alice["token"])
    assert len(mine) == 3 and {r["session_id"] for r in mine} == {session}
    (own,) = view(alice["key"], "key")  # her own key only
    assert own["key_id"] == mine[0]["key_id"] and own["requests"] == len(mine)
    assert own["billed_usd"] == pytest.approx(sum(r["cost_usd"] for r in mine), rel=1e-9)
    (user,) = view(alice["key"], "user")
    assert user["user_id"] == alice["user_id"] and user["requests"] == 3
    assert len(cli("--user", alice["user_id"])) == 3
    assert len(cli("--session", session)) == 4
    admin = {r["key_id"]: r for r in view(ADMIN_KEY, "key")}
    assert admin[own["key_id"]]["requests"] == 3
    assert {r["key_id"] for r in cli("--key", bob["token"])} <= set(admin)


def test_user_new_takes_max_budget_as_litellm(gateway: Gateway) -> None:
    """LiteLLM's personal budget: stored on the user, answered back, and the first key
    /user/new makes without a team gets it as its max_budget (a 400 before)."""
    uid = _uid("dana")
    made = _post(gateway, "/user/new", user_id=uid, max_budget=0.5)
    assert made["max_budget"] == 0.5 and made["key"].startswith("sk-")
    info = _ok(gateway.admin("GET", "/user/info", params={"user_id": uid}))
    assert info["user_info"]["max_budget"] == 0.5
    assert [k["max_budget"] for k in info["keys"]] == [0.5]
    bad = gateway.admin("POST", "/user/new", json={"user_id": _uid("x"), "max_budget": -1})
    assert bad.status_code == 400
