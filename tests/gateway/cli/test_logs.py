"""``tollgate logs`` against the log a real gateway wrote (SQLite and PostgreSQL): every filter,
every format, the routing-table export read back by ``router_core.data.load_dataset``, and
``--follow`` in a real subprocess picking up a request made after it started."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from click.testing import CliRunner
from openai import NotFoundError

from gateway.cli import main
from gateway.config import settings_from_dict
from router_core.data import load_dataset
from tests.gateway.conftest import Gateway, run_gateway
from tests.gateway.review import conftest as review_fixtures
from tests.gateway.review.conftest import review_config

db_url = review_fixtures.db_url  # the review tests' database fixture, one per module

Q1 = "Which planet is known as the red planet?"
Q2 = "Name a prime number greater than ten."
Q3 = "Spell the word necessary backwards."


@pytest.fixture(scope="module")
def gw(db_url, upstream, test_router, encoder, tmp_path_factory) -> Iterator[Gateway]:
    """A gateway that logs prompts (so the routing-table export carries them)."""
    tmp = tmp_path_factory.mktemp("logs")
    settings = settings_from_dict(review_config(upstream, tmp, database_url=db_url,
                                                log_prompts=True))
    yield from run_gateway(settings, test_router, encoder)


def _feedback(gw: Gateway, key: str, rid: str, score: float) -> None:
    r = httpx.post(f"{gw.base_url}/v1/feedback", json={"request_id": rid, "score": score},
                   headers={"authorization": f"Bearer {key}"}, timeout=30)
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def run(gw: Gateway, upstream) -> dict:
    key_a, tid_a = gw.tenant()
    key_b, tid_b = gw.tenant()
    a, b = gw.client(key_a), gw.client(key_b)
    ids: dict[str, str] = {}

    def send(client, name: str, model: str, text: str = Q1) -> None:
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": text}])
        ids[name] = raw.headers["x-tollgate-request-id"]

    send(a, "auto1", "auto")
    send(a, "cheap1", "cheap", Q2)
    send(a, "cheap2", "cheap", Q2)  # the same prompt again: a repeated observation
    send(a, "best", "best")
    send(a, "pass", "fake-cheap")
    upstream.set_mode("fake-mid", "error_500", times=1)
    send(a, "fallback", "auto", Q3)
    with pytest.raises(NotFoundError) as err:
        a.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    ids["notfound"] = err.value.response.headers["x-tollgate-request-id"]
    send(b, "b1", "auto")
    _feedback(gw, key_a, ids["cheap1"], 1.0)
    _feedback(gw, key_a, ids["cheap2"], 0.0)
    _feedback(gw, key_a, ids["auto1"], 0.9)
    _feedback(gw, key_a, ids["fallback"], 0.8)
    for rid in ids.values():
        gw.log_row(rid)
    names = {t: gw.ledger(t)["name"] for t in (tid_a, tid_b)}
    return {"ids": ids, "a": names[tid_a], "b": names[tid_b], "key_b": key_b, "tid_a": tid_a}


def logs(gw: Gateway, *args: str) -> str:
    res = CliRunner().invoke(main, ["logs", "--database-url", gw.db_url, *args])
    assert res.exit_code == 0, res.output
    return res.output


def ids_of(gw: Gateway, *args: str) -> set[str]:
    out = logs(gw, "--format", "jsonl", "--limit", "0", *args)
    return {json.loads(line)["id"] for line in out.splitlines() if line.strip()}


def test_filters(gw: Gateway, run: dict) -> None:
    ids, a = run["ids"], run["a"]
    mine = {v for k, v in ids.items() if k != "b1"}
    assert ids_of(gw, "--tenant", a) == mine
    assert ids_of(gw, "--tenant", run["tid_a"]) == mine  # ids work as well as names
    assert ids_of(gw, "--tenant", a, "--tenant", run["b"]) == set(ids.values())
    assert ids_of(gw, "--tenant", a, "--route", "cheap") == {ids["cheap1"], ids["cheap2"]}
    assert ids_of(gw, "--tenant", a, "--route", "passthrough") == {ids["pass"], ids["notfound"]}
    assert ids_of(gw, "--tenant", a, "--model", "fake-strong") == {ids["best"]}
    assert ids_of(gw, "--tenant", a, "--status", "4xx") == {ids["notfound"]}
    assert ids_of(gw, "--tenant", a, "--status", "404") == {ids["notfound"]}
    assert ids_of(gw, "--tenant", a, "--status", "ok") == mine - {ids["notfound"]}
    with_fb = {ids["cheap1"], ids["cheap2"], ids["auto1"], ids["fallback"]}
    assert ids_of(gw, "--tenant", a, "--feedback", "with") == with_fb
    assert ids_of(gw, "--tenant", a, "--feedback", "positive") == with_fb - {ids["cheap2"]}
    assert ids_of(gw, "--tenant", a, "--feedback", "negative") == {ids["cheap2"]}
    assert ids_of(gw, "--tenant", a, "--feedback", "without") == mine - with_fb
    assert ids_of(gw, "--tenant", a, "--since", "1h") == mine
    assert ids_of(gw, "--tenant", a, "--until", "1h") == set()
    assert ids_of(gw, "--tenant", a, "--since", "2099-01-01T00:00:00") == set()
    out = logs(gw, "--tenant", a, "--format", "jsonl", "--limit", "2")
    assert len(out.splitlines()) == 2  # the newest two


def test_bad_filters_are_refused(gw: Gateway, run: dict) -> None:
    for args in (["--tenant", "no-such-tenant"], ["--status", "teapot"], ["--since", "later"]):
        res = CliRunner().invoke(main, ["logs", "--database-url", gw.db_url, *args])
        assert res.exit_code == 2 and "Invalid value" in res.output, res.output


def test_table_csv_and_jsonl(gw: Gateway, run: dict) -> None:
    ids = run["ids"]
    table = logs(gw, "--tenant", run["a"], "--limit", "0").splitlines()
    assert table[0].split()[:3] == ["time", "(UTC)", "request"]
    assert len(table) == 1 + len(ids) - 1
    row = next(line for line in table if ids["fallback"] in line)
    assert run["a"] in row and " auto " in row and " 200 " in row
    assert "[fake-mid:500 > fake-cheap:200]" in row
    assert "1×0.90" in next(line for line in table if ids["auto1"] in line)

    rows = list(csv.DictReader(io.StringIO(logs(gw, "--tenant", run["a"], "--format", "csv",
                                                "--limit", "0"))))
    by_id = {r["id"]: r for r in rows}
    fb = by_id[ids["fallback"]]
    assert fb["attempts"] == "2" and fb["fallbacks"].endswith(":200")
    assert fb["tenant"] == run["a"] and float(fb["cost_usd"]) > 0
    assert by_id[ids["cheap1"]]["feedback_count"] == "1"
    assert by_id[ids["notfound"]]["status"] == "404"

    full = [json.loads(x) for x in logs(gw, "--model", "fake-strong", "--tenant", run["a"],
                                        "--format", "jsonl").splitlines()]
    assert len(full) == 1
    assert {c["backend"] for c in full[0]["candidates"]} == {
        "fake-strong", "fake-mid", "fake-cheap"}
    assert full[0]["prompt_text"] == Q1 and full[0]["tenant"] == run["a"]

    exp = json.loads(logs(gw, "--explain", run["ids"]["fallback"]))
    assert exp["decision"]["winner"] == "fake-mid" and exp["answered_by"] == "fake-cheap"
    assert [a["status"] for a in exp["attempts"]] == [500, 200]
    assert exp["feedback"]["mean_score"] == pytest.approx(0.8)


def test_routing_table_export_loads(gw: Gateway, run: dict, tmp_path) -> None:
    path = tmp_path / "observed.csv"
    logs(gw, "--tenant", run["a"], "--feedback", "with", "--format", "routing-table",
         "--limit", "0", "-o", str(path))
    rows = list(csv.DictReader(path.open()))
    assert {r["prompt"] for r in rows} == {Q1, Q2, Q3}
    assert sorted(float(r["quality"]) for r in rows) == [0.0, 0.8, 0.9, 1.0]
    table = load_dataset(str(path))
    assert set(table.models) == {"fake-cheap", "fake-mid"}
    q2 = [i for i, p in enumerate(table.prompts) if p == Q2]
    assert len(q2) == 2  # the two feedbacks on one prompt are two samples of it
    col = table.models.index("fake-cheap")
    assert sorted(table.quality[q2, col].tolist()) == [0.0, 1.0]
    assert (table.cost[q2, col] > 0).all()


def test_follow_prints_new_rows(gw: Gateway, run: dict) -> None:
    cmd = [sys.executable, "-c", "from gateway.cli import main; main()", "logs",
           "--database-url", gw.db_url, "--tenant", run["b"], "--format", "jsonl",
           "--follow", "--interval", "0.2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = json.loads(proc.stdout.readline())
        assert first["id"] == run["ids"]["b1"]
        time.sleep(0.5)  # the follower is polling now
        raw = gw.client(run["key_b"]).chat.completions.with_raw_response.create(
            model="cheap", messages=[{"role": "user", "content": Q2}])
        new_id = raw.headers["x-tollgate-request-id"]
        line = proc.stdout.readline()
        assert json.loads(line)["id"] == new_id
        assert proc.poll() is None  # still following
    finally:
        proc.terminate()
        proc.wait(timeout=30)
