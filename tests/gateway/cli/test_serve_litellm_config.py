"""A LiteLLM Proxy user's config.yaml, served by `tollgate serve` as it is.

The file has LiteLLM's four sections (model_list with a two-deployment group,
router_settings, litellm_settings, general_settings) and no Tollgate section; the only
Tollgate addition is model_info.router_model (which expert of the packaged router a backend
is). The gateway runs as a subprocess over the fake upstreams; the client is the OpenAI SDK.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from gateway.sandbox.local_server import free_port
from tests.fakes.upstream import FakeBackend, FakeUpstream

MASTER = "sk-litellm-master-1234"
PRICES = {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}


def _config(up: FakeUpstream, db: Path) -> str:
    base, key = up.base_url, "os.environ/FAKE_PROVIDER_KEY"
    return f"""\
# a LiteLLM proxy config, comments and all
model_list:
  - model_name: gpt-4o-mini            # two deployments: one load-balanced group
    litellm_params: {{model: openai/up-a, api_base: "{base}", api_key: {key}}}
    model_info: {{router_model: gpt-3.5-turbo-1106, input_cost_per_token: 1.0e-6,
                 output_cost_per_token: 2.0e-6}}
  - model_name: gpt-4o-mini
    litellm_params: {{model: openai/up-b, api_base: "{base}", api_key: {key}, weight: 2}}
    model_info: {{router_model: gpt-3.5-turbo-1106, input_cost_per_token: 1.0e-6,
                 output_cost_per_token: 2.0e-6}}
  - model_name: big
    litellm_params: {{model: together_ai/up-big, api_base: "{base}", api_key: {key}}}
    model_info: {{router_model: gpt-4-1106-preview, input_cost_per_token: 1.0e-5,
                 output_cost_per_token: 3.0e-5}}
  - model_name: unkeyed
    litellm_params: {{model: openai/up-a, api_key: os.environ/TG_TEST_MISSING_KEY}}
    model_info: {{input_cost_per_token: 1.0e-6, output_cost_per_token: 2.0e-6}}

router_settings:
  routing_strategy: simple-shuffle
  num_retries: 2
  allowed_fails: 3
  cooldown_time: 30
  fallbacks: [{{"big": ["gpt-4o-mini"]}}]

litellm_settings:
  drop_params: true
  success_callback: ["langfuse"]

general_settings:
  master_key: {MASTER}
  database_url: sqlite:///{db}
  alerting: ["slack"]
"""


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, FakeUpstream, list]]:
    tmp = tmp_path_factory.mktemp("litellm-proxy")
    backends = [FakeBackend(n, reply=f"answer from {n}") for n in ("up-a", "up-b", "up-big")]
    with FakeUpstream(backends) as up:
        (tmp / "config.yaml").write_text(_config(up, tmp / "proxy.db"))
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOLLGATE_")}
        env.update(FAKE_PROVIDER_KEY="sk-fake", TOLLGATE_SPOOL_DIR=str(tmp / "spool"))
        env.pop("TG_TEST_MISSING_KEY", None)
        exe = shutil.which("tollgate", path=str(Path(sys.executable).parent)) or "tollgate"
        proc = subprocess.Popen([exe, "serve", "--config", "config.yaml", "--port", str(port)],
                                env=env, cwd=tmp, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        url = f"http://127.0.0.1:{port}"
        output: list[str] = []  # stderr lines, read as they come
        threading.Thread(target=lambda: output.extend(iter(proc.stderr.readline, "")),
                         daemon=True).start()
        try:
            deadline = time.monotonic() + 300
            while True:
                assert proc.poll() is None, "".join(output)
                try:
                    if httpx.get(url + "/ready", timeout=5).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "tollgate serve never became ready"
                time.sleep(0.2)
            yield url, up, output
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_a_litellm_config_starts_and_serves(proxy: tuple[str, FakeUpstream, list]) -> None:
    url, up, _ = proxy
    r = httpx.post(url + "/admin/tenants", json={"name": "moved-over", "budget_usd": 5},
                   headers={"authorization": f"Bearer {MASTER}"}, timeout=30)
    assert r.status_code == 201, r.text  # general_settings.master_key is the admin key
    client = openai.OpenAI(base_url=url + "/v1", api_key=r.json()["api_key"])
    ask = [{"role": "user", "content": "Say hello."}]
    # weights 1 and 2: up-a is first with p = 1/3, so 40 requests all miss it with p < 1e-7
    # (12 did with p = 0.8%, which a CI run met)
    answers = {client.chat.completions.create(model="gpt-4o-mini", messages=ask)
               .choices[0].message.content for _ in range(40)}
    assert answers == {"answer from up-a", "answer from up-b"}  # the group spreads the load
    up.set_mode("up-a", "error_500", times=100)
    for _ in range(4):  # one deployment down: the group fails over inside
        resp = client.chat.completions.create(model="gpt-4o-mini", messages=ask)
        assert resp.choices[0].message.content == "answer from up-b"
    up.reset()
    routed = client.chat.completions.create(model="auto", messages=ask)
    assert routed.model in {"gpt-4o-mini", "big"}
    # litellm_settings.drop_params: together_ai takes no reasoning_effort, so it is dropped
    big = client.chat.completions.create(model="big", messages=ask, reasoning_effort="low")
    assert big.choices[0].message.content == "answer from up-big"
    assert "reasoning_effort" not in up.requests_for("up-big")[-1]
    up.set_mode("up-big", "error_500", times=100)  # router_settings.fallbacks: big → group
    raw = client.chat.completions.with_raw_response.create(model="big", messages=ask)
    assert raw.headers["x-tollgate-model"] == "gpt-4o-mini"
    assert raw.headers["x-request-id"] == raw.headers["x-tollgate-request-id"]


def test_startup_summary_and_access_lines(proxy: tuple[str, FakeUpstream, list]) -> None:
    url, _, output = proxy
    text = "".join(output)
    block = text[text.index("tollgate 0"):]
    assert "config.yaml" in block and "proxy.db" in block
    # no routes: in the config: the three promising routes by default (issue 34)
    assert ("gpt-4o-mini  routed by auto, auto-balanced, auto-cheap, group of 2 deployments"
            in block)
    assert "no routes: in config: auto, auto-balanced, auto-cheap keep a promise" in block
    # a priced backend the router has no data on joins auto on a prior (cold start)
    assert re.search(r"unkeyed +routed by auto", block)
    assert re.search(r"unkeyed +prior \(0 outcomes\)", block)
    assert "TG_TEST_MISSING_KEY missing: unkeyed will fail (502)" in block
    assert "FAKE_PROVIDER_KEY" not in block
    assert "admin API     on" in block and f"{url}/dashboard" in block
    warning = next(line for line in block.splitlines() if "does not use" in line)
    assert "general_settings.alerting" in warning and "success_callback" not in warning
    # callbacks are handed to litellm; one whose package is not installed is left out, named
    assert re.search(r"callbacks +success_callback: langfuse( \(left out: .*\))?", block)
    assert "routing_strategy" not in warning  # simple-shuffle is what Tollgate does
    access: list[str] = []
    deadline = time.monotonic() + 60
    while len(access) < 47 and time.monotonic() < deadline:  # the first test's 47 requests
        time.sleep(0.1)  # (each is logged after its response is sent)
        access = [line for line in "".join(output).splitlines() if "tollgate.access" in line]
    assert len(access) >= 47, access
    line = next(a for a in access if "passthrough → gpt-4o-mini 200" in a)
    assert "tenant=moved-over" in line and " $0.0000" in line and "attempts=1" in line
    assert any("passthrough → gpt-4o-mini 200" in a and "attempts=2" in a for a in access)
    lines = "".join(output).splitlines()
    assert not [a for a in lines if "HTTP Request:" in a]  # httpx stays at warning
    litellm_lines = [a for a in lines if "LiteLLM" in a and "Dropping reasoning_effort" in a]
    assert len(litellm_lines) == 1 and " WARNING LiteLLM: " in litellm_lines[0]  # once
    assert not [a for a in lines if " INFO LiteLLM" in a or " DEBUG LiteLLM" in a]


def test_serve_refuses_a_bad_config_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "model_list: []\nrouter_settings: {num_retries: two}\n")
    exe = shutil.which("tollgate", path=str(Path(sys.executable).parent)) or "tollgate"
    done = subprocess.run([exe, "serve", "--config", "config.yaml"], cwd=tmp_path, check=False,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1] == ("Error: config.yaml: router_settings.num_retries: must be a "
                         "non-negative integer, got 'two'")
