"""A model litellm's price map no longer lists (``claude-3-5-sonnet-20241022`` is absent from
the map of the litellm locked here) through a running gateway, the openai SDK as the client
and a fake upstream serving that model over HTTP: priced by ``model_info.price_like`` or
``base_model`` it is served and settled at the borrowed price, said at startup; without either
it is a 503 ``backend_unpriced`` whose message names the fix."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from gateway.cli.startup import backend_lines
from gateway.config import settings_from_dict
from router_core.encoders.minilm import Encoder
from router_core.env.litellm_env import litellm
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import ADMIN_KEY, Gateway, run_gateway

RETIRED = "claude-3-5-sonnet-20241022"
LIKE = "claude-sonnet-4-5"  # $3 / $15 per 1M, as Claude 3.5 Sonnet was (Anthropic's pricing page)
MSG = [{"role": "user", "content": "hello"}]


def _entry(up: FakeUpstream, name: str, **info: object) -> dict:
    return {"model_name": name,
            "litellm_params": {"model": f"openai/{RETIRED}", "api_base": up.base_url,
                               "api_key": "sk-fake"},
            "model_info": info}


@pytest.fixture(scope="module")
def gw(test_router: Router, encoder: Encoder, tmp_path_factory: pytest.TempPathFactory
       ) -> Iterator[Gateway]:
    with pytest.raises(Exception):  # noqa: B017 - litellm raises a bare Exception
        litellm.get_model_info(RETIRED)  # the premise: litellm no longer prices it
    with FakeUpstream([FakeBackend(RETIRED, reply="Hi from the retired model")]) as up:
        db = tmp_path_factory.mktemp("price-like") / "gw.db"
        settings = settings_from_dict({
            "model_list": [_entry(up, "sonnet-like", price_like=LIKE),
                           _entry(up, "sonnet-base", base_model=LIKE),
                           _entry(up, "sonnet-bare"),
                           _entry(up, "sonnet-bad-like", price_like="no-such-model-x")],
            "general_settings": {"master_key": ADMIN_KEY, "database_url": f"sqlite:///{db}"}})
        yield from run_gateway(settings, test_router, encoder)


@pytest.mark.parametrize("name", ["sonnet-like", "sonnet-base"])
def test_a_borrowed_price_serves_and_settles(gw: Gateway, name: str) -> None:
    key, tid = gw.tenant(budget_usd=1.0)
    raw = gw.client(key).chat.completions.with_raw_response.create(
        model=name, messages=MSG, max_tokens=16)
    r = raw.parse()
    assert r.choices[0].message.content == "Hi from the retired model"
    assert r.usage is not None
    want = r.usage.prompt_tokens * 3e-6 + r.usage.completion_tokens * 15e-6
    assert float(raw.headers["x-tollgate-cost-usd"]) == pytest.approx(want, rel=1e-6)
    assert gw.settled(tid)["spent_usd"] == pytest.approx(want, abs=2e-9)  # nano-USD


def test_the_startup_block_says_whose_price(gw: Gateway) -> None:
    lines = "\n".join(backend_lines(gw.app.state.ctx.pool.current))
    assert f"$3/$15 per 1M in/out (priced as {LIKE} (price_like))" in lines, lines
    assert f"(priced as {LIKE} (base_model))" in lines, lines


@pytest.mark.parametrize("name", ["sonnet-bare", "sonnet-bad-like"])
def test_without_a_price_a_503_names_the_fix(gw: Gateway, name: str) -> None:
    key, _ = gw.tenant()
    with pytest.raises(openai.APIStatusError) as e:
        gw.client(key).chat.completions.create(model=name, messages=MSG, max_tokens=16)
    err = e.value.body
    assert e.value.status_code == 503 and err["code"] == "backend_unpriced"  # type: ignore[index]
    msg = err["message"]  # type: ignore[index]
    assert "price_like" in msg and "input_cost_per_million" in msg, msg
    if name == "sonnet-bad-like":
        assert "'no-such-model-x'" in msg, msg
