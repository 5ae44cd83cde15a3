"""LiteLLM's key API semantics that used to answer 500 or take a limit that bounds nothing
(issue 35 finding 8), through a running gateway on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from tests.gateway.conftest import ADMIN_KEY, Gateway


def _post(g: Gateway, path: str, **body: Any) -> httpx.Response:
    return g.admin("POST", path, json=body)


def _refused(r: httpx.Response, param: str) -> None:
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text


def test_generate_with_a_starting_spend_counts_it(gateway: Gateway) -> None:
    for spend in (0, 0.25):
        r = _post(gateway, "/key/generate", spend=spend, max_budget=1.0)
        assert r.status_code == 200, r.text
        assert r.json()["spend"] == spend
    r = _post(gateway, "/key/generate", spend=0.5, max_budget=0.5)  # spent already: refused
    assert r.status_code == 200
    chat = gateway.client(r.json()["key"]).chat.completions.with_raw_response
    try:
        chat.create(model="fake-cheap", max_tokens=8,
                    messages=[{"role": "user", "content": "hi"}])
        raise AssertionError("a key whose starting spend is its budget was served")
    except Exception as e:  # noqa: BLE001 - the SDK's RateLimitError
        assert getattr(e, "status_code", None) == 429, e


def test_limits_that_bound_nothing_are_refused(gateway: Gateway) -> None:
    _refused(_post(gateway, "/key/generate", budget_duration="0s", max_budget=1.0),
             "budget_duration")
    _refused(_post(gateway, "/key/generate", budget_duration="0d"), "budget_duration")
    _refused(_post(gateway, "/key/generate", max_budget=True), "max_budget")
    _refused(_post(gateway, "/key/generate", spend=True), "spend")
    made = _post(gateway, "/key/generate", max_budget=1, budget_duration="1s")
    assert made.status_code == 200 and made.json()["max_budget"] == 1.0, made.text
    _refused(_post(gateway, "/key/update", key=made.json()["key"], budget_duration="0m"),
             "budget_duration")


def test_the_master_key_cannot_be_a_tenants_key(gateway: Gateway) -> None:
    _refused(_post(gateway, "/key/generate", key=ADMIN_KEY), "key")


def test_aliases_are_unique_per_team_and_an_ambiguous_delete_is_refused(
        gateway: Gateway) -> None:
    _, a = gateway.tenant()
    _, b = gateway.tenant()
    alias = f"ci-bot-{uuid.uuid4().hex[:6]}"
    first = _post(gateway, "/key/generate", team_id=a, key_alias=alias)
    assert first.status_code == 200, first.text
    _refused(_post(gateway, "/key/generate", team_id=a, key_alias=alias), "key_alias")
    other = _post(gateway, "/key/generate", team_id=a, key_alias=alias + "-2")
    _refused(_post(gateway, "/key/update", key=other.json()["key"], key_alias=alias),
             "key_alias")
    # another team may use the same alias; a delete by it is then ambiguous: refused, and
    # both keys still work
    theirs = _post(gateway, "/key/generate", team_id=b, key_alias=alias)
    assert theirs.status_code == 200, theirs.text
    _refused(_post(gateway, "/key/delete", key_aliases=[alias]), "key_aliases")
    for made in (first, theirs):
        r = gateway.admin("GET", "/key/info", params={"key": made.json()["key"]})
        assert r.status_code == 200 and r.json()["info"]["blocked"] is False, r.text
    gone = _post(gateway, "/key/delete", keys=[theirs.json()["key"]])
    assert gone.status_code == 200, gone.text
    gone = _post(gateway, "/key/delete", key_aliases=[alias])  # one key left: unambiguous
    assert gone.status_code == 200 and gone.json()["tollgate"]["key_ids"] == [
        first.json()["tollgate"]["key_id"]], gone.text


def test_a_non_admin_key_info_does_not_tell_whether_a_key_exists(gateway: Gateway) -> None:
    own = _post(gateway, "/key/generate").json()["key"]
    other = _post(gateway, "/key/generate").json()["key"]
    codes = set()
    for probe in (other, "sk-" + uuid.uuid4().hex, "key_0000000000000000"):
        r = httpx.get(gateway.base_url + "/key/info", params={"key": probe}, timeout=30,
                      headers={"authorization": f"Bearer {own}"})
        codes.add(r.status_code)
    assert codes == {403}
