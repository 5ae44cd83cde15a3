"""What the hostile scenarios share: the environment (bench/serving/replica_env.py's two
replicas on PostgreSQL and Redis, plus upstreams that behave as providers do when abused), the
hostile message shapes, and reads of the ledger and the log.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from bench.serving.hostile.early_streams import early_models, early_upstream
from bench.serving.hostile.inputs import inputs_models, inputs_upstream
from bench.serving.replica_env import ADMIN_KEY, Env, start_env
from gateway.sandbox.local_upstream import FakeBackend, FakeUpstream
from gateway.store.models import request_logs

CJK = "漢字かな交じり文😀" * 400
HELLO_300 = "Say ' hello' 300 times."  # a provider repeats the same chunk 300 times
LONG_GENERATION = 4000  # max_tokens at which the echo backend "writes" past its timeout
TIMEOUT_S = 2.0  # the per-attempt timeout of the echo and slow backends
HANGING = ("slow-a", "slow-b", "slow-c")  # every request to them times out, for everyone
# USD per 1M tokens of the tricky upstream's backends (input, output)
PRICES = {"echo": (1.0, 2.0), "verbose": (1.0, 10.0), "slow-a": (10.0, 40.0),
          "slow-b": (10.0, 40.0), "slow-c": (10.0, 40.0)}
VERBOSE_WORDS = 2000  # the verbose backend answers this long, whatever max_tokens says
OUTAGE_ALLOWANCE_USD = 0.008  # per replica and key: × 2 replicas within keys.py's $0.02


def chat_url(env: Env, i: int) -> str:
    """Replica i mod n's chat endpoint (spreads a scenario over the replicas)."""
    return env.replicas[i % len(env.replicas)].base_url + "/v1/chat/completions"


def hostile_messages(url: str) -> list[dict]:
    return [{"role": "user", "content": [
        {"type": "text", "text": CJK},
        {"type": "image_url", "image_url": {"url": url, "detail": "high"}}]}]


def _echo(body: dict) -> str:
    """" hello" 300 times when asked (litellm cuts such a stream as repeating); a long
    generation (max_tokens ≥ LONG_GENERATION) takes longer than the backend's timeout."""
    text = str((body.get("messages") or [{}])[-1].get("content"))
    if HELLO_300 in text:
        return " ".join(["hello"] * 300)
    if int(body.get("max_tokens") or body.get("max_completion_tokens") or 0) >= LONG_GENERATION:
        time.sleep(TIMEOUT_S * 2)
    return "ok"


def tricky_upstream() -> FakeUpstream:
    """Backends whose failures a request causes by its content (echo), that hang for every
    request (slow-*), and that bill past any cap they were sent (verbose)."""
    backends = [FakeBackend("echo", reply=_echo),
                FakeBackend("verbose", reply=" ".join(["word"] * VERBOSE_WORDS))]
    backends += [FakeBackend(n, mode="hang", hang_s=3 * TIMEOUT_S) for n in HANGING]
    for b in backends:
        b.input_per_m, b.output_per_m = PRICES[b.name]
    up = FakeUpstream(backends)
    # a long generation's answer lands on a connection the gateway closed at its timeout:
    # http.server would print each BrokenPipeError's traceback into the report
    up._server.handle_error = lambda request, address: None  # type: ignore[method-assign]
    return up.start()


@dataclass
class Hostile:
    """The environment and the extra upstreams the scenarios talk to."""

    env: Env
    harsh: FakeUpstream  # bills the most any tokenizer could (one token per UTF-8 byte)
    tricky: FakeUpstream
    inputs: FakeUpstream  # files, miscounts and embeddings past the bytes (inputs.py)
    early: FakeUpstream  # Anthropic-wire streams that end early (early_streams.py)

    def stop(self) -> None:
        self.harsh.stop()
        self.tricky.stop()
        self.inputs.stop()
        self.early.stop()


def start_hostile_env(workdir: Path) -> Hostile:
    """bench/serving/reliability.py's two replicas plus the harsh and tricky upstreams."""
    harsh = FakeUpstream([FakeBackend("pricey", reply="ok", input_per_m=10.0,
                                      output_per_m=10.0, image_tokens=1600)],
                         count_tokens=lambda text: len(text.encode("utf-8"))).start()
    tricky = tricky_upstream()
    models = [harsh.model_entry("pricey", timeout=30, max_output_tokens=64)]
    models += [tricky.model_entry(n, timeout=TIMEOUT_S, max_output_tokens=8192)
               for n in ("echo", *HANGING)]
    models.append(tricky.model_entry("verbose", timeout=30, max_output_tokens=VERBOSE_WORDS))
    inputs = inputs_upstream()
    models += inputs_models(inputs)
    early = early_upstream()
    models += early_models(early)
    # outage policy ``allow`` for keys.outage_scenario (no other scenario cuts the database)
    outage = {"outage": {"budget": "allow", "allowance_usd": OUTAGE_ALLOWANCE_USD}}
    env = start_env(workdir, extra_models=models, log_prompts=True, reliability=outage)
    return Hostile(env, harsh, tricky, inputs, early)


def engine_of(env: Env) -> sa.Engine:
    return sa.create_engine(env.db_url.replace("postgresql://", "postgresql+psycopg://"))


def log_costs(env: Env, ids: list[str], timeout_s: float = 60) -> dict[str, Any]:
    """request id -> its log row's (cost_usd, prompt_tokens, completion_tokens, status),
    waiting up to ``timeout_s`` for the log writers."""
    engine = engine_of(env)
    c = request_logs.c
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            with engine.connect() as conn:
                rows = {r[0]: r[1:] for r in conn.execute(
                    sa.select(c.id, c.cost_usd, c.prompt_tokens, c.completion_tokens, c.status)
                    .where(c.id.in_(ids)))}
            if len(rows) == len(set(ids)) or time.monotonic() > deadline:
                return rows
            time.sleep(0.2)
    finally:
        engine.dispose()


def metrics_text(base_url: str) -> str:
    """A replica's /metrics with the admin key, from 127.0.0.3: the fuzz's wrong keys may
    have this machine's usual address throttled by then."""
    transport = httpx.HTTPTransport(local_address="127.0.0.3")
    with httpx.Client(transport=transport, timeout=60) as c:
        r = c.get(base_url + "/metrics", headers={"authorization": f"Bearer {ADMIN_KEY}"})
    r.raise_for_status()
    return r.text


def opened_breakers(metrics_text: str, skip: tuple[str, ...] = HANGING) -> float:
    """Circuit openings of the backends not in ``skip`` (those hang for everyone: their
    breakers open rightly)."""
    total = 0.0
    for line in metrics_text.splitlines():
        opening = (line.startswith("tollgate_circuit_transitions_total{")
                   and 'state="open"' in line)
        if opening and not any(f'model="{n}"' in line for n in skip):
            total += float(line.rsplit(" ", 1)[1])
    return total
