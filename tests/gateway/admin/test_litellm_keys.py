"""LiteLLM Proxy's key API through a running gateway (the fake upstream, the openai SDK as
the client, SQLite and PostgreSQL): the fields and shapes LiteLLM's scripts read, key budgets
inside the tenant's, the model list, expiry, and updates and deletes that hold at once."""

from __future__ import annotations

import time
from typing import Any

import openai
import pytest

from tests.gateway.conftest import ADMIN_KEY, Gateway
from tests.gateway.serving.test_embeddings import EMBED, gw, up  # noqa: F401 - fixtures

MSG = [{"role": "user", "content": "hello"}]


def _generate(g: Gateway, **body: Any) -> dict[str, Any]:
    r = g.admin("POST", "/key/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def _info(g: Gateway, key: str) -> dict[str, Any]:
    r = g.admin("GET", "/key/info", params={"key": key})
    assert r.status_code == 200, r.text
    return r.json()["info"]


def _chat(g: Gateway, key: str, model: str = "fake-cheap") -> str:
    out = g.client(key).chat.completions.create(model=model, messages=MSG, max_tokens=16)
    return out.choices[0].message.content or ""


def test_generate_info_list_update_delete(gateway: Gateway) -> None:
    _, tid = gateway.tenant()
    team = gateway.ledger(tid)["name"]
    made = _generate(gateway, key_alias="ci-bot", team_id=team, max_budget=5.0,
                     budget_duration="30d", duration="30d", models=["fake-cheap", "auto"],
                     metadata={"owner": "ci"}, user_id="u-1")
    key = made["key"]
    assert key.startswith("sk-") and made["token"] and made["key_alias"] == "ci-bot"
    assert (made["max_budget"], made["spend"], made["team_id"]) == (5.0, 0.0, tid)
    assert made["models"] == ["fake-cheap", "auto"] and made["metadata"] == {"owner": "ci"}
    assert made["expires"] and made["budget_reset_at"] and made["budget_duration"] == "30d"
    assert _chat(gateway, key)
    info = _info(gateway, key)
    assert info["spend"] > 0 and info["user_id"] == "u-1"
    assert _info(gateway, made["token"])["key_alias"] == "ci-bot"  # by its token as well
    listed = gateway.admin("GET", "/key/list", params={"team_id": tid}).json()
    assert made["token"] in listed["keys"] and listed["total_count"] >= 1
    full = gateway.admin("GET", "/key/list", params={"user_id": "u-1",
                                                     "return_full_object": "true"}).json()
    assert [k["key_alias"] for k in full["keys"]] == ["ci-bot"]

    # an update holds at the very next request: fake-cheap is no longer in the list
    r = gateway.admin("POST", "/key/update", json={"key": key, "models": ["fake-mid"]})
    assert r.status_code == 200 and r.json()["models"] == ["fake-mid"], r.text
    with pytest.raises(openai.PermissionDeniedError) as exc:  # 403: a good key, not its model
        _chat(gateway, key)
    assert exc.value.body["code"] == "key_model_access_denied"  # type: ignore[index]
    assert _chat(gateway, key, "fake-mid")

    r = gateway.admin("POST", "/key/delete", json={"key_aliases": ["ci-bot"]})
    assert r.status_code == 200 and r.json()["deleted_keys"] == ["ci-bot"], r.text
    with pytest.raises(openai.AuthenticationError):
        _chat(gateway, key, "fake-mid")
    assert gateway.admin("GET", "/key/info", params={"key": key}).status_code == 404


def test_a_key_budget_inside_its_tenants(gateway: Gateway) -> None:
    """A key spent to its max_budget is refused with a budget error while another key of the
    same tenant still works; a budget too small for one request refuses it outright."""
    _, tid = gateway.tenant(budget_usd=10.0)
    small = _generate(gateway, team_id=tid, max_budget=1.0)["key"]
    other = _generate(gateway, team_id=tid)["key"]
    assert _chat(gateway, small)
    gateway.settled(tid)
    spent = _info(gateway, small)["spend"]
    assert spent > 0
    r = gateway.admin("POST", "/key/update", json={"key": small, "max_budget": spent})
    assert r.status_code == 200, r.text
    with pytest.raises(openai.RateLimitError) as exc:
        _chat(gateway, small)
    assert exc.value.body["code"] == "budget_exceeded"  # type: ignore[index]
    assert "key key_" in exc.value.message  # the key's budget refused it, not the tenant's
    assert _chat(gateway, other)
    assert _info(gateway, small)["spend"] == pytest.approx(spent)
    tiny = _generate(gateway, team_id=tid, max_budget=1e-9)["key"]
    with pytest.raises(openai.RateLimitError):
        _chat(gateway, tiny)


def test_models_restrict_named_models_and_auto(gateway: Gateway) -> None:
    _, tid = gateway.tenant()
    named = _generate(gateway, team_id=tid, models=["fake-cheap"])["key"]
    assert _chat(gateway, named)
    for model in ("fake-mid", "auto"):  # auto is a model of its own: not listed, refused (403)
        with pytest.raises(openai.PermissionDeniedError) as exc:
            _chat(gateway, named, model)
        assert "key not allowed to access model" in exc.value.message
    routed = _generate(gateway, team_id=tid, models=["auto"])["key"]
    assert _chat(gateway, routed, "auto")
    # /v1/models lists what the key may call, as LiteLLM's does
    listed = {m.id for m in openai.OpenAI(base_url=gateway.base_url + "/v1",
                                          api_key=named).models.list()}
    assert listed == {"fake-cheap"}
    assert "auto" in {m.id for m in openai.OpenAI(base_url=gateway.base_url + "/v1",
                                                   api_key=routed).models.list()}


def test_an_expired_key_is_refused(gateway: Gateway) -> None:
    _, tid = gateway.tenant()
    key = _generate(gateway, team_id=tid, duration="1s")["key"]
    time.sleep(1.1)  # the key's whole life; no bound on how long the request takes
    with pytest.raises(openai.AuthenticationError) as exc:
        _chat(gateway, key)
    assert "Expired Key" in exc.value.message


def test_the_master_key_calls_the_api(gateway: Gateway) -> None:
    """LiteLLM lets its master key call the model API: here it is the admin key, booked to
    its own tenant (``master-key``)."""
    assert _chat(gateway, ADMIN_KEY)
    r = gateway.admin("GET", "/admin/tenants/master-key")
    assert r.status_code == 200 and r.json()["spent_usd"] >= 0, r.text


def test_a_key_without_a_team_and_bad_requests(gateway: Gateway) -> None:
    own = _generate(gateway, key_alias="solo", max_budget=0.5)
    assert own["team_id"] is None and own["tollgate"]["tenant_name"].startswith("key-")
    assert _chat(gateway, own["key"])
    r = gateway.admin("POST", "/key/generate", json={"team_id": "no-such-team"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "team_id", r.text
    r = gateway.admin("POST", "/key/generate", json={"soft_budget": 10})
    assert r.status_code == 400 and "soft_budget" in r.json()["error"]["message"], r.text
    assert gateway.admin("POST", "/key/generate", json={"soft_budget": None}).status_code == 200
    r = gateway.admin("POST", "/key/generate", json={"budget_duration": "30x"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "budget_duration", r.text
    r = gateway.admin("POST", "/key/update", json={"key": "sk-not-a-key-at-all"})
    assert r.status_code == 404, r.text
    # a key reads its own info without the master key, and no one else's
    mine = gateway.client(own["key"])._client.get(
        gateway.base_url + "/key/info", headers={"authorization": f"Bearer {own['key']}"})
    assert mine.status_code == 200 and mine.json()["info"]["key_alias"] == "solo"
    r = gateway.admin("POST", "/key/generate", json={})
    theirs = mine = gateway.client(own["key"])._client.get(
        gateway.base_url + "/key/info", params={"key": r.json()["key"]},
        headers={"authorization": f"Bearer {own['key']}"})
    assert theirs.status_code == 403, theirs.text


def test_embeddings_follow_the_key_models(gw: Gateway) -> None:  # noqa: F811 - fixture
    """/v1/embeddings checks the key's models list too, and counts its spend (a gateway with
    an embedding backend: the embeddings tests' own fixture)."""
    _, tid = gw.tenant()
    chat_only = _generate(gw, team_id=tid, models=["fake-cheap"])["key"]
    with pytest.raises(openai.PermissionDeniedError):
        gw.client(chat_only).embeddings.create(model=EMBED, input="hi")
    embedder = _generate(gw, team_id=tid, models=[EMBED], max_budget=1.0)["key"]
    assert gw.client(embedder).embeddings.create(model=EMBED, input="hi").data
    gw.settled(tid)
    assert _info(gw, embedder)["spend"] > 0
