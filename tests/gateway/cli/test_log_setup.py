"""`tollgate serve`'s logging: one handler (litellm's lines once), libraries at warning, the
access line, JSON by option. Each case runs in a fresh interpreter (logging is process-wide).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = """
import logging
from gateway.cli.log_setup import configure_logging
configure_logging("info", {fmt!r})
from router_core.env.litellm_env import litellm  # its import attaches its own handler
logging.getLogger("LiteLLM").warning("one litellm line")
logging.getLogger("LiteLLM").info("litellm chatter")
logging.getLogger("httpx").info("HTTP Request: POST http://upstream")
from gateway.serving.record.access_log import log_access
row = {{"id": "tg-1", "tenant_id": "t1", "route": "auto", "chosen_model": "fake-mid",
       "status": 200, "cost_usd": 0.000123, "latency_ms": 12.5,
       "attempts": [{{"error": "budget: does not fit"}}, {{"error": "timeout"}}, {{"error": None}}]}}
log_access(row, type("Tenant", (), {{"name": "acme"}})())
"""


def _stderr(fmt: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(fmt=fmt)], cwd=ROOT,
                          capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    return [line for line in done.stderr.splitlines() if line.strip()]


def test_text_logs_print_litellm_once_and_one_access_line() -> None:
    lines = _stderr("text")
    assert sum("one litellm line" in line for line in lines) == 1
    assert not [line for line in lines if "chatter" in line or "HTTP Request" in line]
    (access,) = [line for line in lines if "tollgate.access" in line]
    assert access.endswith("tg-1 tenant=acme auto → fake-mid 200 $0.000123 12ms attempts=2")


def test_json_logs_carry_the_access_fields() -> None:
    records = [json.loads(line) for line in _stderr("json")]  # every line is JSON
    (litellm_line,) = [r for r in records if r["message"] == "one litellm line"]
    assert litellm_line["level"] == "warning" and litellm_line["logger"] == "LiteLLM"
    (access,) = [r for r in records if r["logger"] == "tollgate.access"]
    assert {k: access[k] for k in ("request_id", "tenant", "route", "model", "status",
                                   "cost_usd", "latency_ms", "attempts")} == {
        "request_id": "tg-1", "tenant": "acme", "route": "auto", "model": "fake-mid",
        "status": 200, "cost_usd": 0.000123, "latency_ms": 12.5, "attempts": 2}
