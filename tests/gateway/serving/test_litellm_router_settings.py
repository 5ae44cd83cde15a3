"""LiteLLM's ``router_settings.timeout``, ``stream_timeout`` and ``num_retries`` on a pasted
LiteLLM config, through a running gateway (the openai SDK, the fake upstream over HTTP): the
first bounds an attempt, the second a streamed one, the third the attempts; none is named as
ignored at startup any more."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from gateway.config import settings_from_dict
from router_core.encoders.minilm import Encoder
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import ADMIN_KEY, Gateway, run_gateway

MSG = [{"role": "user", "content": "hello"}]


@pytest.fixture
def litellm_gw(upstream: FakeUpstream, test_router: Router, encoder: Encoder,
               tmp_path: Path) -> Iterator[Gateway]:
    entries = [upstream.model_entry(n) for n in ("fake-cheap", "fake-mid")]
    for e in entries:
        e["model_info"].pop("timeout", None)  # the router's timeout fills it
    cfg = {"model_list": entries,
           "router_settings": {"timeout": 1, "stream_timeout": 25, "num_retries": 0,
                               "fallbacks": [{"fake-cheap": ["fake-mid"]}]},
           "general_settings": {"master_key": ADMIN_KEY,
                                "database_url": f"sqlite:///{tmp_path / 'gw.db'}"}}
    settings = settings_from_dict(cfg)
    assert not any(k.startswith("router_settings.") for k in settings.ignored_keys)
    saved = {n: (b.hang_s, b.chunk_delay_s) for n, b in upstream.backends.items()}
    yield from run_gateway(settings, test_router, encoder)
    for n, (hang, delay) in saved.items():
        upstream.backends[n].hang_s, upstream.backends[n].chunk_delay_s = hang, delay


def test_router_timeout_bounds_an_attempt_and_num_retries_the_attempts(
        litellm_gw: Gateway, upstream: FakeUpstream) -> None:
    """A hanging backend (it would answer nothing for 20 s) is cut at router_settings.timeout
    (1 s): a 504 upstream_timeout; num_retries 0 means its fallback is not tried. Before,
    the timeout was ignored (60 s) and the hang ended as a dropped connection."""
    key, _ = litellm_gw.tenant()
    upstream.backends["fake-cheap"].hang_s = 20
    upstream.set_mode("fake-cheap", "hang", times=1)
    with pytest.raises(openai.APIStatusError) as e:
        litellm_gw.client(key).chat.completions.create(model="fake-cheap", messages=MSG,
                                                       max_tokens=8)
    assert e.value.status_code == 504 and e.value.body["code"] == "upstream_timeout"  # type: ignore[index]
    row = litellm_gw.log_row(e.value.response.headers["x-tollgate-request-id"])
    assert [a["model"] for a in row["attempts"]] == ["fake-cheap"]  # max_attempts 1


def test_stream_timeout_bounds_streamed_attempts(litellm_gw: Gateway,
                                                 upstream: FakeUpstream) -> None:
    """A slow stream (1.5 s between words) outlasts router_settings.timeout (1 s) but not
    stream_timeout (25 s): it is served whole, as LiteLLM serves it."""
    key, _ = litellm_gw.tenant()
    upstream.backends["fake-cheap"].chunk_delay_s = 1.5
    stream = litellm_gw.client(key).chat.completions.create(
        model="fake-cheap", messages=MSG, max_tokens=8, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == upstream.backends["fake-cheap"].text_for({}), text


def test_bad_router_timeout_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="router_settings.timeout"):
        settings_from_dict({"model_list": [], "router_settings": {"timeout": "soon"}})
