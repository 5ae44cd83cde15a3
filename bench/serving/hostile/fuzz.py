"""Property-based fuzz: hypothesis bodies for chat and feedback, schemathesis over the
OpenAPI schema; every 5xx is counted."""

from __future__ import annotations

import json
from typing import Any

from bench.serving.cluster import run_fuzz
from bench.serving.hostile.common import chat_url
from bench.serving.probes import Recorder
from bench.serving.replica_env import ADMIN_KEY, MSG, Env


def _bodies(rid: str) -> tuple[Any, Any]:
    """Hypothesis strategies: chat bodies (any JSON where the schema has a value, wrong
    types in every field) and feedback bodies about request ``rid``."""
    from hypothesis import strategies as st

    scalar = (st.none() | st.booleans() | st.integers(min_value=-(10**20), max_value=10**20)
              | st.floats() | st.text(max_size=20))
    anything = st.recursive(scalar, lambda c: st.lists(c, max_size=3)
                            | st.dictionaries(st.text(max_size=8), c, max_size=3),
                            max_leaves=12)
    part = st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url", "input_audio", "file", "refusal", "x"])},
        optional={"text": anything, "image_url": st.fixed_dictionaries(
            {"url": st.just("http://127.0.0.1:9/x.png")},
            optional={"detail": st.sampled_from(["low", "high", "auto", "max"])}) | anything})
    message = st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool", "wizard"])},
        optional={"content": st.text(max_size=50) | st.lists(part, max_size=3) | anything,
                  "name": anything, "tool_call_id": anything, "tool_calls": anything})
    params = ["temperature", "top_p", "n", "max_tokens", "max_completion_tokens", "stop",
              "tools", "tool_choice", "functions", "response_format", "logit_bias", "seed",
              "presence_penalty", "logprobs", "top_logprobs", "user", "metadata", "stream",
              "stream_options", "tollgate"]
    small_int = st.integers(min_value=-2, max_value=40)
    chat_body = st.fixed_dictionaries(
        {"model": st.sampled_from(["auto", "cheap", "fake-cheap"]) | anything,
         "messages": st.lists(message, min_size=1, max_size=3) | anything},
        optional={p: small_int | anything for p in params})
    feedback_body = st.fixed_dictionaries(
        {}, optional={"request_id": st.just(rid) | anything, "score": anything,
                      "correct": anything, "comment": anything})
    return chat_body, feedback_body


def fuzz_scenario(env: Env, rec: Recorder, examples: int, schema_examples: int
                  ) -> dict[str, Any]:
    """Hypothesis bodies for chat and feedback, then schemathesis over the OpenAPI schema."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    key, _ = env.tenant(budget_usd=20.0)
    first = rec.post(chat_url(env, 0), key, json={"model": "auto", "messages": MSG})
    chat_body, feedback_body = _bodies(first.headers.get("x-tollgate-request-id", "tg-x"))
    wrap = st.integers(min_value=0, max_value=3)
    count = {"chat": 0, "feedback": 0}

    def encode(body: Any, depth: int) -> bytes:
        raw = json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass")
        return b'{"x": ' * depth * 40 + raw + b"}" * depth * 40 if depth == 3 else raw

    cfg = settings(max_examples=examples, deadline=None, database=None,
                   suppress_health_check=list(HealthCheck))

    @cfg
    @given(body=chat_body, depth=wrap)
    def chat_fuzz(body: Any, depth: int) -> None:
        count["chat"] += 1
        rec.post(chat_url(env, count["chat"]), key, content=encode(body, depth), timeout=60)

    @cfg
    @given(body=feedback_body, depth=wrap)
    def feedback_fuzz(body: Any, depth: int) -> None:
        count["feedback"] += 1
        url = env.replicas[count["feedback"] % len(env.replicas)].base_url + "/v1/feedback"
        rec.post(url, key, content=encode(body, depth), timeout=60)

    before = len(rec.server_errors)
    chat_fuzz()
    feedback_fuzz()
    hypothesis_5xx = len(rec.server_errors) - before
    schema = run_fuzz(env.replicas[0].base_url, key, ADMIN_KEY, max_examples=schema_examples)
    return {"hypothesis_cases": dict(count), "hypothesis_5xx": hypothesis_5xx,
            "schemathesis_cases": schema["cases"], "schemathesis_5xx": schema["server_errors"],
            "fuzz_5xx": hypothesis_5xx + schema["server_errors"],
            "failures": rec.server_errors[before:before + 3] + schema["failures"][:3]}
