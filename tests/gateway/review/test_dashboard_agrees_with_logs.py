"""The dashboard's figures agree with `tollgate logs` on the same database (issue 37): the
requests, their statuses, the answered requests per model, the spend; and the headline
saving counts routed traffic only, beside its quality change."""

from __future__ import annotations

import io
import json
from collections import Counter

import httpx
import openai
import pytest
from click.testing import CliRunner

from gateway.cli import main
from tests.gateway.conftest import Gateway


def _summary(gw: Gateway, key: str) -> dict:
    r = httpx.get(gw.base_url + "/dashboard/api/summary?window=24h",
                  headers={"authorization": f"Bearer {key}"}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def _logs(gw: Gateway, tenant_id: str) -> list[dict]:
    out = CliRunner().invoke(main, ["logs", "--tenant", tenant_id, "--since", "24h",
                                    "--limit", "0", "--format", "jsonl",
                                    "--database-url", gw.db_url])
    assert out.exit_code == 0, out.output
    return [json.loads(line) for line in io.StringIO(out.output) if line.strip()]


def test_the_dashboard_and_tollgate_logs_count_the_same_requests(gateway: Gateway) -> None:
    key, tid = gateway.tenant(budget_usd=1.0, period="monthly")
    client = gateway.client(key)
    ids = []
    for i, model in enumerate(["auto", "auto", "fake-cheap", "fake-strong", "auto"]):
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": f"question {i}"}])
        ids.append(raw.headers["x-tollgate-request-id"])
    with pytest.raises(openai.APIStatusError) as e:  # refused: a model nobody serves
        client.chat.completions.create(model="no-such-model",
                                       messages=[{"role": "user", "content": "x"}])
    ids.append(e.value.response.headers["x-tollgate-request-id"])
    for rid in ids:
        gateway.log_row(rid)
    gateway.settled(tid)

    rows = _logs(gateway, tid)
    s = _summary(gateway, key)
    assert {r["id"] for r in rows} == set(ids)
    o = s["rates"]["overall"]
    statuses = Counter(str(r["status"]) for r in rows)
    assert o["requests"] == len(rows)
    assert o["statuses"] == dict(statuses)
    assert o["client_errors"] == sum(n for st, n in statuses.items() if st.startswith("4"))
    answered = Counter(r["chosen_model"] for r in rows if r["status"] == 200)
    assert s["model_mix"]["totals"] == dict(answered)
    logged_cost = sum(r["cost_usd"] or 0.0 for r in rows)
    (spend,) = s["spend"]
    # the ledger books whole nano-dollars: at most 1 nUSD a request apart from the log's sum
    assert spend["spent_usd"] == pytest.approx(logged_cost, rel=0, abs=1e-9 * len(rows))
    (bar,) = s["budgets"]
    assert bar["spent_usd"] == spend["spent_usd"]  # the card and the tile: one figure
    # the headline: the routed requests of the log, not the passthrough ones
    sv = s["saving"]
    routed = [r for r in rows if r["status"] == 200 and r["route"]]
    passthrough = [r for r in rows if r["status"] == 200 and not r["route"]]
    assert (sv["requests"], sv["passthrough_requests"]) == (len(routed), len(passthrough))
    assert 0 < sv["compared"] <= len(routed) and sv["saving_usd"] is not None
    assert sv["quality_change"] not in ("", "no requests compared")  # never alone
