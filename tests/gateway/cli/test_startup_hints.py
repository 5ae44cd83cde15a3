"""The startup block points at the cause: a provider prefix litellm does not know is named
with the nearest one it does, a group whose other deployments answer is not "will fail", an
unreachable database is said in the block, and with the admin API off the block gives the
command that makes the first tenant key. One `tollgate serve` run shows them together (with
a real unreachable PostgreSQL port and the repository's fake upstream); the rest are checked
on the functions the block is made of, with real Settings and a real engine.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from gateway.cli.log_setup import ParentWarnings, collect_startup_warnings, drop_parent_warnings
from gateway.cli.startup import (
    admin_line,
    database_problem,
    missing_provider_keys,
    provider_key_lines,
    unknown_provider,
)
from gateway.config.loading import settings_from_dict
from gateway.sandbox.local_server import free_port
from tests.fakes.upstream import FakeBackend, FakeUpstream

PRICE = {"input_cost_per_million": 1.0, "output_cost_per_million": 2.0}


def test_an_unknown_provider_prefix_names_the_nearest_known_one() -> None:
    assert (unknown_provider({"model": "opnai/gpt-4o-mini"})
            == "unknown provider 'opnai' (did you mean openai?)")
    assert unknown_provider({"model": "antropic/claude-x"}) == (
        "unknown provider 'antropic' (did you mean anthropic?)")
    for known in ({"model": "openai/gpt-4o-mini"}, {"model": "gpt-4o"},
                  {"model": "together_ai/meta-llama/Llama-3-8b"},
                  {"model": "hosted_vllm/my-model", "api_base": "http://127.0.0.1:9/v1"},
                  {"model": "org/model", "custom_llm_provider": "openai"}):
        assert unknown_provider(known) is None, known


def _settings(model_list: list[dict]) -> object:
    return settings_from_dict({"model_list": model_list})


def test_a_group_with_a_working_deployment_fails_over_not_fails(monkeypatch) -> None:
    monkeypatch.delenv("TG_HINT_MISSING", raising=False)
    s = _settings([
        {"model_name": "g", "litellm_params": {"model": "openai/a", "api_key": "sk-literal"},
         "model_info": PRICE},
        {"model_name": "g", "litellm_params": {"model": "openai/b",
                                               "api_key": "os.environ/TG_HINT_MISSING"},
         "model_info": PRICE},
        {"model_name": "solo", "litellm_params": {"model": "openai/c",
                                                  "api_key": "os.environ/TG_HINT_MISSING"},
         "model_info": PRICE},
    ])
    lines = provider_key_lines(missing_provider_keys(s))
    assert lines == [("TG_HINT_MISSING missing: solo will fail (502); g (1 of 2 deployments) "
                      "fail over to the group's other deployments")]
    monkeypatch.setenv("TG_HINT_MISSING", "sk-x")
    assert provider_key_lines(missing_provider_keys(s)) == ["none missing"]


def test_no_admin_key_gives_the_first_key_command(monkeypatch) -> None:
    monkeypatch.delenv("TOLLGATE_ADMIN_KEY", raising=False)
    s = _settings([])
    assert admin_line(s, Path("config.yaml")).endswith(
        "the first tenant key: tollgate tenants create NAME --budget-usd 10")
    assert admin_line(s, Path("/etc/tg.yaml")).endswith("--budget-usd 10 --config /etc/tg.yaml")


def test_the_database_probe_says_why() -> None:
    from gateway.store.engine import make_engine

    assert database_problem(make_engine("sqlite://")) is None
    refused = database_problem(make_engine("postgresql://postgres@127.0.0.1:1/x"))
    assert refused is not None and "refused" in refused.lower()


def test_a_parent_warning_is_not_repeated_by_its_workers(monkeypatch) -> None:
    """The parent's startup warnings go to its workers through the environment; each worker
    drops its own first copy of each, and says anything else (or a second copy)."""
    log = logging.getLogger("tollgate.test_hints")
    collector = collect_startup_warnings()
    log.warning("callback 'langfuse' left out")
    monkeypatch.setattr(os, "environ", dict(os.environ))
    collector.export()
    assert collector not in logging.getLogger().handlers
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    keep = Keep()
    root = logging.getLogger()
    root.addHandler(keep)
    try:
        drop_parent_warnings()
        assert any(isinstance(f, ParentWarnings) for f in keep.filters)
        log.warning("callback 'langfuse' left out")  # the worker's copy: dropped
        log.warning("something only this worker saw")
        log.warning("callback 'langfuse' left out")  # a second time: a new event, said
    finally:
        root.removeHandler(keep)
    assert seen == ["something only this worker saw", "callback 'langfuse' left out"]


@pytest.mark.slow
def test_serve_names_the_causes_in_its_startup_block(tmp_path: Path) -> None:
    with FakeUpstream([FakeBackend("fake-a", reply="hi")]) as up:
        entry = up.model_entry("fake-a")
        typo = {"model_name": "typo", "litellm_params": {"model": "opnai/gpt-4o-mini"},
                "model_info": PRICE}
        cfg = tmp_path / "config.yaml"
        cfg.write_text(yaml.safe_dump({"model_list": [entry, typo],
                                       "reliability": {"spool_dir": str(tmp_path / "spool")}}))
        port = free_port()
        env = {**os.environ, "TOLLGATE_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/x"}
        env.pop("TOLLGATE_ADMIN_KEY", None)
        exe = shutil.which("tollgate", path=str(Path(sys.executable).parent)) or "tollgate"
        out = (tmp_path / "serve.log").open("w")
        proc = subprocess.Popen([exe, "serve", "--config", str(cfg), "--port", str(port)],
                                env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            while True:
                assert proc.poll() is None, (tmp_path / "serve.log").read_text()
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "tollgate serve never started"
                time.sleep(0.2)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
            out.close()
    text = (tmp_path / "serve.log").read_text()
    block = text[text.index("tollgate 0"):text.index("  API ")]
    assert re.search(r"typo +unknown provider 'opnai' \(did you mean openai\?\) in "
                     r"litellm_params.model", block), block
    database = block[block.index("  database"):block.index("  workers")]
    assert "unreachable: " in database and "refused" in database.lower(), database
    assert "tollgate tenants create NAME --budget-usd 10 --config" in block
    assert "Traceback" not in text
