"""A gateway whose encoder does not need torch never imports it (nor transformers,
sentence-transformers, scikit-learn, pandas, scipy, or FAISS: the router's search is numpy):
~250 MB of a worker's memory; nor Alembic when the database is at the head revision already
(upgraded here first, as `serve --workers N`'s parent does). The check runs in a fresh
process, since this test process has torch loaded already; that process serves a routed
request over real HTTP from the fake upstream, with the packaged router on its ONNX encoder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from gateway.store.migrate import upgrade
from router_core.artifact import load_router
from router_core.encoders.base import default_cache_dir
from router_core.encoders.exports import ensure_export

ROOT = Path(__file__).resolve().parents[3]

SERVE_ONE_ROUTED_REQUEST = textwrap.dedent("""
    import dataclasses, json, sys, tempfile
    from pathlib import Path

    import httpx, openai

    from gateway.app import create_app
    from gateway.config import DEFAULT_CONFIG_PATH, load_settings, settings_from_dict
    from gateway.sandbox.local_server import serve_in_thread
    from gateway.sandbox.local_upstream import FakeBackend, FakeUpstream
    from router_core.artifact import load_router

    router = load_router(None)
    recorded = dict(router.config.get("encoder") or {})
    if recorded.get("kind", "minilm") == "minilm":  # the same vectors, without torch
        recorded["kind"] = "minilm-onnx"
    router = dataclasses.replace(router, config={**router.config, "encoder": recorded})
    pool = load_settings(DEFAULT_CONFIG_PATH).model_list
    with tempfile.TemporaryDirectory() as tmp, \\
            FakeUpstream([FakeBackend(b.model_name) for b in pool]) as up:
        settings = settings_from_dict({
            "model_list": [up.model_entry(b.model_name, **b.model_info.model_dump(
                exclude_none=True)) for b in pool],
            "routes": {"auto": {"cost_weight": 0.2}},
            "database_url": sys.argv[1],
            "admin_key": "admin-no-torch",
            "reliability": {"spool_dir": str(Path(tmp) / "spool")},
        }, source="test")
        with serve_in_thread(create_app(settings, router=router)) as url:
            key = httpx.post(f"{url}/admin/tenants", json={"name": "t"}, timeout=60,
                             headers={"authorization": "Bearer admin-no-torch"}).json()
            client = openai.OpenAI(base_url=f"{url}/v1", api_key=key["api_key"])
            raw = client.chat.completions.with_raw_response.create(
                model="auto", messages=[{"role": "user", "content": "What is 2 + 2?"}])
    print(json.dumps({
        "status": raw.http_response.status_code,
        "router_version": raw.headers.get("x-tollgate-router-version"),
        "encoder": recorded["kind"],
        "loaded": sorted(m for m in ("torch", "transformers", "sentence_transformers",
                                     "sklearn", "pandas", "scipy", "faiss", "alembic")
                         if m in sys.modules),
    }))
""")


def test_a_gateway_serving_with_a_non_torch_encoder_never_imports_torch(tmp_path: Path) -> None:
    kind = dict(load_router(None).config.get("encoder") or {}).get("kind", "minilm")
    # built once (with torch) in this process
    ensure_export(kind if kind != "minilm" else "minilm-onnx", default_cache_dir())
    db_url = f"sqlite:///{tmp_path / 'gw.db'}"
    upgrade(db_url)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run([sys.executable, "-c", SERVE_ONE_ROUTED_REQUEST, db_url], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == 200
    assert result["router_version"] not in (None, "passthrough")
    assert result["encoder"] != "minilm"
    assert result["loaded"] == []
