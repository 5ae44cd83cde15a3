"""`tollgate serve` as a user runs it: a subprocess on the packaged router artifact, config
from --config, database and admin key from the environment, then the OpenAI SDK."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
import pytest
import sqlalchemy as sa
import yaml

from gateway.config import DEFAULT_CONFIG_PATH, load_settings
from gateway.pricing import resolve_prices
from gateway.sandbox.local_server import free_port
from gateway.store.models import request_logs
from router_core.artifact import DEFAULT_ROUTER_DIR, load_meta
from tests.fakes.upstream import FakeBackend, FakeUpstream

ADMIN = "tg-admin-cli-test"


@contextmanager
def serve_process(tmp: Path, workers: int = 1, ready_s: float = 300.0
                  ) -> Iterator[tuple[str, Path, FakeUpstream, subprocess.Popen]]:
    """`tollgate serve` on the repository's config.yaml pool (litellm's prices; the open models
    trained experts, the others on cold-start priors) over fake upstreams, SQLite in ``tmp``; yields (url, db, upstream, process) once ready."""
    base = load_settings(DEFAULT_CONFIG_PATH)
    backends = [FakeBackend(b.model_name, reply=f"answer from {b.model_name}")
                for b in base.model_list]
    with FakeUpstream(backends) as up:
        cfg = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
        prices = resolve_prices(base)  # litellm's, for the shipped model strings
        for entry in cfg["model_list"]:  # keep model_info as shipped, at the shipped prices
            name = entry["model_name"]
            entry["litellm_params"] = up.model_entry(name)["litellm_params"]
            entry["model_info"] = {**(entry.get("model_info") or {}),
                                   "input_cost_per_token": prices[name].input_per_token,
                                   "output_cost_per_token": prices[name].output_per_token}
        cfg["reliability"] = {"spool_dir": str(tmp / "spool")}
        (tmp / "config.yaml").write_text(yaml.safe_dump(cfg))
        db = tmp / "tollgate.db"
        port = free_port()
        env = {**os.environ, "TOLLGATE_DATABASE_URL": f"sqlite:///{db}",
               "TOLLGATE_ADMIN_KEY": ADMIN}
        exe = shutil.which("tollgate", path=str(Path(sys.executable).parent)) or "tollgate"
        proc = subprocess.Popen(
            [exe, "serve", "--config", str(tmp / "config.yaml"), "--port", str(port),
             "--log-level", "warning", "--workers", str(workers)],
            env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + ready_s
            while True:
                assert proc.poll() is None, proc.stdout.read()
                try:
                    if httpx.get(url + "/ready", timeout=5).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "tollgate serve never became ready"
                time.sleep(0.2)
            yield url, db, up, proc
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, FakeUpstream]]:
    with serve_process(tmp_path_factory.mktemp("serve")) as (url, db, up, _):
        yield url, db, up


def test_serve_routes_with_the_packaged_router(
    served: tuple[str, Path, FakeUpstream],
) -> None:
    url, db, _ = served
    r = httpx.post(url + "/admin/tenants", json={"name": "cli-user", "budget_usd": 5},
                   headers={"authorization": f"Bearer {ADMIN}"}, timeout=30)
    assert r.status_code == 201, r.text
    client = openai.OpenAI(base_url=url + "/v1", api_key=r.json()["api_key"], max_retries=0)
    meta = load_meta(DEFAULT_ROUTER_DIR)
    backends = {b.model_name for b in load_settings(DEFAULT_CONFIG_PATH).model_list}
    prompts = [
        "Write a Python function that returns the n-th Fibonacci number.",
        "Which gas do plants absorb from the air? A) oxygen B) carbon dioxide C) helium",
    ]
    for prompt in prompts:
        raw = client.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "system", "content": "Be concise."},
                                    {"role": "user", "content": prompt}])
        resp = raw.parse()
        assert resp.model in backends
        assert resp.choices[0].message.content == f"answer from {resp.model}"
        assert raw.headers["x-tollgate-router-version"] == meta["version"]
        rid = raw.headers["x-tollgate-request-id"]
        engine = sa.create_engine(f"sqlite:///{db}")
        row = None
        for _ in range(600):
            with engine.connect() as conn:
                row = conn.execute(sa.select(request_logs).where(request_logs.c.id == rid)
                                   ).mappings().first()
            if row is not None:
                break
            time.sleep(0.05)
        engine.dispose()
        assert row is not None, "the log row never arrived"
        cands = row["candidates"]
        # k = 0: every backend of the route the router knows (priors up to explore_share)
        assert {c["backend"] for c in cands} <= backends and len(cands) >= 4
        # the promise on record: the chosen one is the reference, or confidently within the
        # route's tolerance of it (score = −drop bound), every candidate's estimate beside it
        rule = meta["config"]["promise"]["rules"]["0.01"]
        assert row["reason"].startswith("promise: within 0.01 of ")
        assert all({"p", "n", "drop_bound", "within", "known"} <= set(c["promise"])
                   for c in cands)
        first = cands[0]
        assert first["promise"]["drop_bound"] == 0.0 or (
            first["promise"]["within"] and -first["score"] <= rule["tolerance"] + 1e-9)
        assert row["chosen_model"] == resp.model and row["router_version"] == meta["version"]
        print(json.dumps({k: row[k] for k in ("route", "lam", "chosen_model", "reason")}))


def test_serve_health_models_and_metrics(served: tuple[str, Path, FakeUpstream]) -> None:
    url, _, _ = served
    assert httpx.get(url + "/health").json() == {"status": "ok"}
    ready = httpx.get(url + "/ready").json()
    assert ready["status"] == "ready" and ready["database"] is True
    assert httpx.get(url + "/metrics").status_code == 401  # operators only
    metrics = httpx.get(url + "/metrics", headers={"authorization": f"Bearer {ADMIN}"}).text
    assert "tollgate_requests_total" in metrics
    assert "tollgate_request_latency_seconds_bucket" in metrics
    r = httpx.get(url + "/v1/models", headers={"authorization": "Bearer not-a-key"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
