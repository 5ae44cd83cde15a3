"""log_prompts: the routed text is stored only when the config says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import settings_from_dict
from router_core.encoders.minilm import Encoder
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import gateway_config, run_gateway


def test_prompt_text_is_logged_when_enabled(
    upstream: FakeUpstream, test_router: Router, encoder: Encoder, tmp_path: Path
) -> None:
    raw = gateway_config(upstream, tmp_path / "spool", database_url=f"sqlite:///{tmp_path}/l.db",
                         log_prompts=True)
    for gw in run_gateway(settings_from_dict(raw), test_router, encoder):
        key, _ = gw.tenant()
        raw_resp = gw.client(key).chat.completions.with_raw_response.create(
            model="auto",
            messages=[{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "What is a toll gate?"}],
        )
        row = gw.log_row(raw_resp.headers["x-tollgate-request-id"])
        assert row["prompt_text"] == "Be brief.\n\nWhat is a toll gate?"  # turns in order


@pytest.mark.parametrize("stream", [False, True])
def test_prompt_text_is_not_logged_by_default(gateway, client, stream: bool) -> None:
    kw = {"stream": True} if stream else {}
    with client.chat.completions.with_streaming_response.create(
        model="auto", messages=[{"role": "user", "content": "secret plans"}], **kw
    ) as raw:
        rid = raw.headers["x-tollgate-request-id"]
        raw.read()
    assert gateway.log_row(rid)["prompt_text"] is None
