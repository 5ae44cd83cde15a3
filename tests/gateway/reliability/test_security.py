"""Security: keys stored only as keyed hashes; admin endpoints only with the admin key; a tenant
never reads another tenant's logs, explanations or feedback; provider keys and tenant keys
never appear in logs, error bodies or the database; prompt text stored only when configured.

"Never appears" is tested by grepping everything: every log record of the process at DEBUG
level, every response body, and a dump of every row of every table."""

from __future__ import annotations

import logging
import uuid

import httpx
import pytest
import sqlalchemy as sa

from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import ADMIN_KEY, Gateway
from tests.gateway.reliability.conftest import MSG, MakeGateway
from tests.gateway.reliability.harness import free_port

PROVIDER_KEY = "sk-provider-" + uuid.uuid4().hex  # what a real provider key would be


def dump_database(gw: Gateway) -> str:
    """Every row of every table, as text."""
    out = []
    with gw.engine.connect() as conn:
        meta = sa.MetaData()
        meta.reflect(bind=conn)
        for table in meta.sorted_tables:
            for row in conn.execute(sa.select(table)):
                out.append(f"{table.name}: {tuple(row)!r}")
    return "\n".join(out)


@pytest.fixture
def gw(make_gateway: MakeGateway, upstream: FakeUpstream) -> Gateway:
    models = []
    for n in ("fake-strong", "fake-mid", "fake-cheap"):
        entry = upstream.model_entry(n, timeout=5)
        entry["litellm_params"]["api_key"] = PROVIDER_KEY
        models.append(entry)
    dead = upstream.model_entry("fake-cheap", model_name="dead-backend", timeout=2)
    dead["litellm_params"].update(api_key=PROVIDER_KEY,
                                  api_base=f"http://127.0.0.1:{free_port()}/v1")
    models.append(dead)
    return make_gateway(model_list=models)


def test_keys_never_appear_in_logs_errors_or_the_database(
    gw: Gateway, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    key, _ = gw.tenant(budget_usd=1.0)
    client = gw.client(key)
    bodies = []
    r = client.chat.completions.with_raw_response.create(model="auto", messages=MSG)
    bodies.append(r.text)
    assert upstream.headers[-1]["authorization"] == f"Bearer {PROVIDER_KEY}"  # it was used
    for mode in ("error_500", "reset", "malformed_json"):
        upstream.set_mode("fake-mid", mode)
        bodies.append(httpx.post(gw.base_url + "/v1/chat/completions", timeout=60,
                                 headers={"authorization": f"Bearer {key}"},
                                 json={"model": "fake-mid", "messages": MSG}).text)
    dead = httpx.post(gw.base_url + "/v1/chat/completions", timeout=60,  # refused conn
                      headers={"authorization": f"Bearer {key}"},
                      json={"model": "dead-backend", "messages": MSG})
    bodies.append(dead.text)
    wrong = key[:-4] + "abcd"
    bodies.append(httpx.post(gw.base_url + "/v1/chat/completions", timeout=60,
                             headers={"authorization": f"Bearer {wrong}"},
                             json={"model": "auto", "messages": MSG}).text)
    gw.log_row(r.headers["x-tollgate-request-id"])
    gw.log_row(dead.headers["x-tollgate-request-id"])  # rows are written in batches
    logs = "\n".join(rec.getMessage() + repr(rec.args) + str(rec.exc_text or "")
                     for rec in caplog.records)
    assert len(caplog.records) > 0
    dump = dump_database(gw)
    assert "dead-backend" in dump  # the failing requests are in there
    for secret in (PROVIDER_KEY, key, wrong, ADMIN_KEY):
        assert secret not in logs
        assert not any(secret in b for b in bodies)
        assert secret not in dump
    assert not any(key[6:] in b for b in bodies)  # not even the key without its prefix


def test_prompt_text_stored_only_when_configured(make_gateway: MakeGateway) -> None:
    for log_prompts in (False, True):
        gw = make_gateway(log_prompts=log_prompts)
        marker = "zebra-" + uuid.uuid4().hex
        client = gw.client(gw.tenant()[0])
        r = client.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": f"remember {marker}"}])
        row = gw.log_row(r.headers["x-tollgate-request-id"])
        assert (marker in dump_database(gw)) is log_prompts
        assert (row["prompt_text"] is not None) is log_prompts


def test_admin_endpoints_need_the_admin_key(gw: Gateway) -> None:
    key, tid = gw.tenant()
    paths = httpx.get(gw.base_url + "/openapi.json", timeout=30).json()["paths"]
    admin_ops = [(m.upper(), p) for p, ops in paths.items() if p.startswith("/admin")
                 for m in ops]
    assert len(admin_ops) >= 8
    for i, (method, template) in enumerate(admin_ops):
        path = template.replace("{tenant}", tid).replace("{key_id}", "key_x")
        # each operation from its own loopback address: wrong admin keys are throttled per
        # address (past 20 a 429, tested in test_hostile.py)
        address = f"127.0.1.{i + 1}"
        with httpx.Client(transport=httpx.HTTPTransport(local_address=address),
                          timeout=30) as c:
            for headers in ({}, {"authorization": f"Bearer {key}"},
                            {"authorization": "Bearer " + ADMIN_KEY + "x"},
                            {"x-admin-key": key}):
                r = c.request(method, gw.base_url + path, headers=headers, json={})
                assert r.status_code in (401, 403), (method, path, headers, r.status_code)
                assert "error" in r.json()
    assert gw.ledger(tid)["id"] == tid  # and the admin key itself works


def test_a_tenant_never_reads_another_tenants_data(gw: Gateway) -> None:
    key_a, tid_a = gw.tenant()
    key_b, _ = gw.tenant()
    r = gw.client(key_a).chat.completions.with_raw_response.create(model="auto", messages=MSG)
    rid = r.headers["x-tollgate-request-id"]
    gw.log_row(rid)
    own = httpx.get(f"{gw.base_url}/v1/routing/{rid}", timeout=30,
                    headers={"authorization": f"Bearer {key_a}"})
    assert own.status_code == 200  # the owner can
    hb = {"authorization": f"Bearer {key_b}"}
    checks = [
        httpx.get(f"{gw.base_url}/v1/routing/{rid}", headers=hb, timeout=30),
        httpx.get(f"{gw.base_url}/dashboard/api/explain/{rid}", headers=hb, timeout=30),
        httpx.post(f"{gw.base_url}/v1/feedback", headers=hb, timeout=30,
                   json={"request_id": rid, "score": 0.0}),
    ]
    for resp in checks:
        assert resp.status_code == 404, (resp.request.url, resp.status_code, resp.text)
        assert resp.json()["error"]["code"] == "request_not_found"
    listed = httpx.get(f"{gw.base_url}/dashboard/api/requests", headers=hb, timeout=30,
                       params={"tenant": tid_a})
    assert listed.status_code in (200, 403, 404)
    if listed.status_code == 200:
        assert rid not in listed.text and tid_a not in listed.text
    summary = httpx.get(f"{gw.base_url}/dashboard/api/summary", headers=hb, timeout=30,
                        params={"tenant": tid_a})
    if summary.status_code == 200:
        assert tid_a not in summary.text
    feedback_own = httpx.post(f"{gw.base_url}/v1/feedback", timeout=30,
                              headers={"authorization": f"Bearer {key_a}"},
                              json={"request_id": rid, "score": 1.0})
    assert feedback_own.status_code == 200  # the same call works for the owner
