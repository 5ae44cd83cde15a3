"""LiteLLM Proxy's /team/*, /user/*, /spend/logs and /model/info through a running gateway (the
fake upstream over HTTP, the openai SDK for the model calls, httpx as a LiteLLM script would
call the management API; SQLite and PostgreSQL): the fields and status codes scripts read, a
team's budget and limits enforced on its keys, users owning keys, per-user spend, spend logs
filtered by key, user, team and dates, and model prices without secrets."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import openai
import pytest

from tests.gateway.conftest import Gateway
from tests.gateway.router_fixture import PRICES

MSG = [{"role": "user", "content": "hello"}]


def _ok(r: httpx.Response) -> Any:
    assert r.status_code == 200, r.text
    return r.json()


def _post(g: Gateway, path: str, **body: Any) -> httpx.Response:
    return g.admin("POST", path, json=body)


def _chat(g: Gateway, key: str, model: str = "fake-cheap") -> tuple[str, float]:
    """(request id, cost) of one answered call."""
    raw = g.client(key).chat.completions.with_raw_response.create(
        model=model, messages=MSG, max_tokens=16)
    assert raw.parse().choices[0].message.content
    return raw.headers["x-tollgate-request-id"], float(raw.headers["x-tollgate-cost-usd"])


def _uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_team_lifecycle(gateway: Gateway) -> None:
    alias = _uid("qa-bot")
    team = _ok(_post(gateway, "/team/new", team_alias=alias, max_budget=5.0,
                     budget_duration="1mo", models=["fake-cheap"], rpm_limit=3,
                     metadata={"cost_center": "42"}, members_with_roles=[]))
    tid = team["team_id"]
    assert (team["team_alias"], team["max_budget"], team["budget_duration"], team["models"],
            team["rpm_limit"], team["metadata"], team["spend"]) == (
        alias, 5.0, "1mo", ["fake-cheap"], 3, {"cost_center": "42"}, 0.0)
    assert team["budget_reset_at"] is not None and team["blocked"] is False
    key = _ok(_post(gateway, "/key/generate", team_id=tid))
    assert key["team_id"] == tid
    if time.time() % 60 > 45:  # the rpm burst below stays inside one calendar minute
        time.sleep(60.5 - time.time() % 60)
    _, cost = _chat(gateway, key["key"])
    with pytest.raises(openai.APIStatusError) as e:  # the team's models (counts in its rpm)
        _chat(gateway, key["key"], "fake-mid")
    assert e.value.status_code in (400, 401, 403, 404)
    _chat(gateway, key["key"])
    with pytest.raises(openai.RateLimitError) as e:  # the team's rpm_limit, on all its keys
        _chat(gateway, _ok(_post(gateway, "/key/generate", team_id=alias))["key"])
    assert "team" in e.value.body["message"]  # type: ignore[index]

    info = _ok(gateway.admin("GET", "/team/info", params={"team_id": tid}))
    assert info["team_id"] == tid and info["team_info"]["spend"] >= cost > 0
    assert key["token"] in [k["token"] for k in info["keys"]]
    assert info["team_memberships"] == []

    new_alias = _uid("qa-bot-2")
    updated = _ok(_post(gateway, "/team/update", team_id=tid, team_alias=new_alias,
                        max_budget=7.5, rpm_limit=None, tpm_limit=0))
    assert updated["team_id"] == tid
    data = updated["data"]
    assert (data["team_alias"], data["max_budget"], data["rpm_limit"], data["tpm_limit"],
            data["models"], data["metadata"]) == (new_alias, 7.5, None, 0, ["fake-cheap"],
                                                  {"cost_center": "42"})
    with pytest.raises(openai.RateLimitError):  # tpm_limit 0 blocks, at once on every replica
        _chat(gateway, key["key"])
    teams = _ok(gateway.admin("GET", "/team/list"))
    assert tid in [t["team_id"] for t in teams]
    assert not any(t["team_alias"] and t["team_alias"].startswith("key-") for t in teams)

    assert _ok(_post(gateway, "/team/delete", team_ids=[tid])) == {"deleted_teams": [tid]}
    with pytest.raises(openai.AuthenticationError):  # its keys stop at once
        _chat(gateway, key["key"])
    assert gateway.admin("GET", "/team/info", params={"team_id": tid}).status_code == 404
    assert tid not in [t["team_id"] for t in _ok(gateway.admin("GET", "/team/list"))]


def test_team_errors(gateway: Gateway) -> None:
    alias = _uid("dup")
    _ok(_post(gateway, "/team/new", team_alias=alias))
    r = _post(gateway, "/team/new", team_alias=alias)
    assert r.status_code == 400 and r.json()["error"]["param"] == "team_id", r.text
    assert _post(gateway, "/team/update", team_id="no-such-team", max_budget=1).status_code == 404
    assert _post(gateway, "/team/delete", team_ids=["no-such-team"]).status_code == 404
    r = _post(gateway, "/team/new", budget_duration="30d")
    assert r.status_code == 400 and "budget_duration" in r.text, r.text
    r = _post(gateway, "/team/new", soft_budget=3)
    assert r.status_code == 400 and "soft_budget" in r.json()["error"]["message"], r.text
    r = _post(gateway, "/team/new", rpm_limit=-1)
    assert r.status_code == 400, r.text
    r = httpx.post(gateway.base_url + "/team/new", json={},
                   headers={"authorization": "Bearer sk-not-the-master-key"})
    assert r.status_code == 401, r.text
    assert gateway.admin("GET", "/team/info").status_code == 400


def test_users_own_keys_and_their_spend(gateway: Gateway) -> None:
    team = _ok(_post(gateway, "/team/new", team_alias=_uid("eng")))
    uid = _uid("alice")
    user = _ok(_post(gateway, "/user/new", user_id=uid, user_email=f"{uid}@example.com",
                     user_role="internal_user", teams=[team["team_alias"]],
                     team_id=team["team_id"], metadata={"dept": "ml"}))
    assert (user["user_id"], user["user_email"], user["teams"], user["spend"]) == (
        uid, f"{uid}@example.com", [team["team_id"]], 0.0)
    assert user["key"].startswith("sk-") and user["team_id"] == team["team_id"]
    _, c1 = _chat(gateway, user["key"])
    second = _ok(_post(gateway, "/key/generate", user_id=uid))  # another key of hers
    _, c2 = _chat(gateway, second["key"])

    assert _spend_after_log(gateway, uid, c1 + c2) == pytest.approx(c1 + c2, rel=1e-6)
    info = _ok(gateway.admin("GET", "/user/info", params={"user_id": uid}))
    assert info["user_id"] == uid
    assert {k["token"] for k in info["keys"]} == {user["token"], second["token"]}
    assert [t["team_id"] for t in info["teams"]] == [team["team_id"]]
    assert [t["team_id"] for t in _ok(gateway.admin("GET", "/team/list",
                                                    params={"user_id": uid}))] == [team["team_id"]]

    upd = _ok(_post(gateway, "/user/update", user_id=uid, user_alias="Alice"))
    assert upd["user_id"] == uid and upd["data"]["user_alias"] == "Alice"
    upd = _ok(_post(gateway, "/user/update", user_email=f"{uid}@example.com",
                    metadata={"dept": "infra"}))
    assert upd["data"]["metadata"] == {"dept": "infra"}

    r = _post(gateway, "/user/new", user_id=uid)
    assert r.status_code == 400, r.text
    # max_budget is LiteLLM's personal budget, taken since issue 47 (was a 400):
    # tests/gateway/admin/test_per_developer.py; another per-user limit is still a 400
    r = _post(gateway, "/user/new", tpm_limit=10)
    assert r.status_code == 400 and "tpm_limit" in r.json()["error"]["message"], r.text
    r = _post(gateway, "/user/new", teams=["no-such-team"])
    assert r.status_code == 400 and r.json()["error"]["param"] == "teams", r.text
    assert gateway.admin("GET", "/user/info", params={"user_id": "nobody"}).status_code == 404
    assert _post(gateway, "/user/update", user_id="nobody", user_alias="x").status_code == 404

    assert _ok(_post(gateway, "/user/delete", user_ids=[uid])) == {"deleted_users": [uid]}
    with pytest.raises(openai.AuthenticationError):  # her keys stop at once
        _chat(gateway, second["key"])
    assert gateway.admin("GET", "/user/info", params={"user_id": uid}).status_code == 404
    assert _post(gateway, "/user/delete", user_ids=[uid]).status_code == 404
    no_key = _ok(_post(gateway, "/user/new", auto_create_key=False))
    assert no_key["key"] is None and no_key["user_id"]


def _spend_after_log(g: Gateway, uid: str, want: float, wait_s: float = 30.0) -> float:
    """The user's spend once the batched log writer has written its rows."""
    deadline = time.monotonic() + wait_s
    while True:
        spend = _ok(g.admin("GET", "/user/info", params={"user_id": uid}))["user_info"]["spend"]
        if spend >= want * (1 - 1e-9) or time.monotonic() > deadline:
            return float(spend)
        time.sleep(0.1)


def _logs(g: Gateway, want: int, wait_s: float = 30.0, **params: Any) -> Any:
    deadline = time.monotonic() + wait_s
    while True:
        rows = _ok(g.admin("GET", "/spend/logs", params=params))
        if len(rows) >= want or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def test_spend_logs_filter_by_key_user_team_and_dates(gateway: Gateway) -> None:
    team = _ok(_post(gateway, "/team/new", team_alias=_uid("billing")))
    uid = _uid("bob")
    key = _ok(_post(gateway, "/key/generate", team_id=team["team_id"], user_id=uid))
    other = _ok(_post(gateway, "/key/generate", team_id=team["team_id"]))
    calls = [_chat(gateway, key["key"]), _chat(gateway, key["key"])]
    _chat(gateway, other["key"])

    rows = _logs(gateway, 2, api_key=key["key"])
    assert sorted(r["request_id"] for r in rows) == sorted(rid for rid, _ in calls)
    by_id = {r["request_id"]: r for r in rows}
    for rid, cost in calls:
        r = by_id[rid]
        assert r["spend"] == pytest.approx(cost, rel=1e-9)
        assert (r["api_key"], r["user"], r["team_id"], r["model"], r["call_type"]) == (
            key["token"], uid, team["team_id"], "fake-cheap", "acompletion")
        assert r["total_tokens"] == r["prompt_tokens"] + r["completion_tokens"] > 0
        assert r["startTime"] <= r["endTime"]
    assert key["key"] not in str(rows)  # the token, never the key
    assert len(_logs(gateway, 2, api_key=key["token"])) == 2
    assert len(_logs(gateway, 2, user_id=uid)) == 2
    assert len(_logs(gateway, 3, team_id=team["team_id"])) == 3
    assert len(_logs(gateway, 3, team_id=team["team_alias"])) == 3
    assert [r["request_id"] for r in _logs(gateway, 1, request_id=calls[0][0])] == [calls[0][0]]

    today = datetime.now(UTC).date()
    days = _ok(gateway.admin("GET", "/spend/logs", params={
        "team_id": team["team_id"], "start_date": str(today - timedelta(days=1)),
        "end_date": str(today + timedelta(days=1))}))
    assert [d["startTime"] for d in days] == [str(today), str(today + timedelta(days=1))]
    total = sum(r["spend"] for r in _logs(gateway, 3, team_id=team["team_id"]))
    assert days[0]["spend"] == pytest.approx(total, rel=1e-9)
    assert days[0]["users"][uid] == pytest.approx(sum(c for _, c in calls), rel=1e-9)
    assert days[0][key["token"]] == pytest.approx(sum(c for _, c in calls), rel=1e-9)
    assert days[1]["spend"] == 0
    rows = _ok(gateway.admin("GET", "/spend/logs", params={
        "user_id": uid, "start_date": str(today), "end_date": str(today),
        "summarize": "false"}))
    assert len(rows) == 2
    yesterday = _ok(gateway.admin("GET", "/spend/logs", params={
        "user_id": uid, "start_date": str(today - timedelta(days=2)),
        "end_date": str(today - timedelta(days=1)), "summarize": "false"}))
    assert yesterday == []
    r = gateway.admin("GET", "/spend/logs", params={"start_date": "last week",
                                                     "end_date": str(today)})
    assert r.status_code == 400 and r.json()["error"]["param"] == "start_date", r.text


def test_model_info_lists_prices_modes_and_routing_without_secrets(gateway: Gateway) -> None:
    r = gateway.admin("GET", "/model/info")
    data = _ok(r)["data"]
    assert "sk-fake-upstream" not in r.text and "api_key" not in r.text
    by_name = {e["model_name"]: e for e in data}
    assert set(PRICES) <= set(by_name)
    for name, (pin, pout) in PRICES.items():
        e = by_name[name]
        info = e["model_info"]
        assert info["input_cost_per_token"] == pytest.approx(pin / 1e6)
        assert info["output_cost_per_token"] == pytest.approx(pout / 1e6)
        assert info["mode"] == "chat" and info["max_output_tokens"] > 0
        assert e["litellm_params"]["model"] == f"openai/{name}"
        assert "auto" in e["tollgate"]["routes"] and e["tollgate"]["known_as"]
        assert e["tollgate"]["price_source"] == "model_info prices"
    one = by_name["fake-mid"]["model_info"]["id"]
    assert [e["model_name"] for e in _ok(gateway.admin(
        "GET", "/v1/model/info", params={"litellm_model_id": one}))["data"]] == ["fake-mid"]
    assert gateway.admin("GET", "/model/info",
                         params={"litellm_model_id": "nope"}).status_code == 404
    key, _ = gateway.tenant()
    r = httpx.get(gateway.base_url + "/model/info", headers={"authorization": f"Bearer {key}"})
    assert r.status_code == 401, r.text
