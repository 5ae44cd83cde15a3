"""Images reserved at the dearest option the request allows and settled at the usage the
reply reports (issue 48.4), through a running gateway: the openai SDK over HTTP, litellm's
aimage_generation to the fake upstream (OpenAI's wire, with gpt-image's ``usage``), litellm's
price map for gpt-image-1.5, SQLite.

Was: with quality left out (OpenAI's default ``auto``, which may render high) the hold was
litellm's low price ($0.009) against $0.133 for a high render's usage (15×; 19× with a
30k-character prompt), and the usage in the reply was ignored.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.config import settings_from_dict
from router_core.env.litellm_env import litellm
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import Gateway, run_gateway
from tests.gateway.learning.conftest import learning_config
from tests.gateway.router_fixture import PRICES
from tests.gateway.serving.test_unit_endpoints import entry

HIGH_TOKENS = 4160  # output image tokens of a high 1024x1024 render: $0.133 at $32/1M
PROMPT = "a lighthouse at dawn, " * 1400  # ~30k characters


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    backends = [FakeBackend("gpt-image-1.5", image_output_tokens=HIGH_TOKENS)]
    with FakeUpstream(backends + [FakeBackend(n) for n in PRICES]) as u:
        yield u


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, up: FakeUpstream, test_router: Router,
       encoder) -> Iterator[Gateway]:
    url = f"sqlite:///{tmp_path_factory.mktemp('images') / 'tollgate.db'}"
    cfg = learning_config(up, database_url=url)
    cfg["model_list"].append(entry(up, "gpt-image-1.5", "openai/gpt-image-1.5"))
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


def _map(field: str) -> float:
    return float(litellm.model_cost["gpt-image-1.5"][field])


@pytest.mark.parametrize("quality", [None, "auto"])
def test_quality_left_to_the_provider_is_reserved_high_and_settled_at_usage(
        gw: Gateway, quality: str | None) -> None:
    """n=2, a 30k-character prompt: the hold covers two high renders at the dearest size
    plus the prompt's bytes as text tokens; the charge is the reply's usage at the token
    prices, never more than the hold."""
    key, tenant_id = gw.tenant(budget_usd=5.0)
    kw = {} if quality is None else {"quality": quality}
    raw = gw.client(key).images.with_raw_response.generate(
        model="gpt-image-1.5", prompt=PROMPT, n=2, **kw)
    img = raw.parse()
    assert len(img.data) == 2 and img.usage is not None
    usage_cost = (img.usage.input_tokens_details.text_tokens * _map("input_cost_per_token")
                  + img.usage.output_tokens * _map("output_cost_per_image_token"))
    assert img.usage.output_tokens == 2 * HIGH_TOKENS
    row = gw.log_row(raw.headers["x-tollgate-request-id"])
    high = float(litellm.model_cost["high/1024-x-1536/gpt-image-1.5"]["input_cost_per_image"])
    held = row["reserved_usd"]
    assert held >= 2 * high + len(PROMPT.encode()) * _map("input_cost_per_token") - 1e-9
    assert held >= usage_cost  # undercharge multiple usage / held ≤ 1
    assert float(raw.headers["x-tollgate-cost-usd"]) == pytest.approx(usage_cost)
    assert row["cost_usd"] == pytest.approx(usage_cost)
    assert gw.settled(tenant_id)["spent_usd"] == pytest.approx(usage_cost, abs=2e-9)


def test_an_explicit_low_quality_is_reserved_low(gw: Gateway) -> None:
    """The option asked is the bound: low at 1024x1024, plus the prompt's text tokens."""
    key, _ = gw.tenant(budget_usd=5.0)
    raw = gw.client(key).images.with_raw_response.generate(
        model="gpt-image-1.5", prompt="a cat", quality="low", size="1024x1024")
    row = gw.log_row(raw.headers["x-tollgate-request-id"])
    low = float(litellm.model_cost["low/1024-x-1024/gpt-image-1.5"]["input_cost_per_image"])
    assert row["reserved_usd"] == pytest.approx(low + 5 * _map("input_cost_per_token"))
