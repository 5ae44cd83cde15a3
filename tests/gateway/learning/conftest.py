"""The gateway test fixtures (real uvicorn, fake upstream, SQLite and PostgreSQL), shared."""

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import (  # noqa: F401 - re-exported pytest fixtures  # noqa: E402
    ADMIN_KEY,
    TIMEOUTS,
    _reset_upstream,
    db_url,
    encoder,
    test_router,
    upstream,
)
from tests.gateway.router_fixture import PRICES, REPLIES


def learning_config(up: FakeUpstream, **extra: Any) -> dict[str, Any]:
    """A gateway config over the fake backends (routes as in tests/gateway/conftest.py)."""
    return {
        "model_list": [up.model_entry(n, timeout=TIMEOUTS[n]) for n in PRICES],
        "routes": {"auto": {"cost_weight": 0.5}, "best": {"cost_weight": 0.0}},
        "admin_key": ADMIN_KEY,
        **extra,
    }


FRONTIER = "fake-frontier"
JUDGE = "fake-judge"


def frontier_upstream(frontier_reply: str) -> FakeUpstream:
    """The router fixture's backends, a dear frontier reference (30/60 USD per 1M tokens) and
    an LLM judge that always scores 4 against 9: the pool a promised route shadows."""
    backends = [FakeBackend(n, reply=REPLIES[n], input_per_m=PRICES[n][0],
                            output_per_m=PRICES[n][1]) for n in PRICES]
    backends += [FakeBackend(FRONTIER, reply=frontier_reply, input_per_m=30.0,
                             output_per_m=60.0),
                 FakeBackend(JUDGE, reply="Score 1: 4\nScore 2: 9", input_per_m=1.0,
                             output_per_m=2.0)]
    return FakeUpstream(backends)


def promised_config(up: FakeUpstream, database_url: str, exploration: dict[str, Any] | None = None,
                    **retraining: Any) -> dict[str, Any]:
    """One route, ``promised``, within 0.01 of the frontier; every request shadowed (paired
    with the reference and judged, up to 64 tokens, from a 10 USD budget), with ``exploration``
    and ``retraining`` keys added or overridden."""
    cfg = learning_config(up, database_url=database_url)
    cfg["model_list"] += [up.model_entry(FRONTIER), up.model_entry(JUDGE)]
    cfg["routes"] = {"promised": {"max_drop": 0.01, "reference": FRONTIER}}
    cfg["retraining"] = {**retraining, "exploration": {
        "enabled": True, "epsilon": {"promised": 1.0}, "candidates": 0, "budget_usd": 10.0,
        "period": "total", "max_tokens": 64, "judge": {"kind": "llm", "model": JUDGE},
        # every request shadowed from the first: no share-of-spend bound unless a test sets
        # one (max_share, on by default, has its own test: test_exploration_share.py)
        "max_share": None, **(exploration or {})}}
    return cfg


@pytest.fixture(scope="module")
def frontier_up() -> Iterator[FakeUpstream]:
    """``frontier_upstream`` whose frontier answers "frontier answer", one per test module."""
    with frontier_upstream("frontier answer") as u:
        yield u


def promised_gateway(tmp_path_factory: pytest.TempPathFactory, name: str, up: FakeUpstream,
                     router: Any, text_encoder: Any, exploration: dict[str, Any] | None = None,
                     **retraining: Any) -> Iterator[Any]:
    """A gateway on ``promised_config`` over ``up``, its SQLite database in a fresh folder
    ``name`` (a module fixture yields from it)."""
    from gateway.config import settings_from_dict
    from tests.gateway.conftest import run_gateway

    url = f"sqlite:///{tmp_path_factory.mktemp(name) / 'tollgate.db'}"
    cfg = promised_config(up, url, exploration, **retraining)
    yield from run_gateway(settings_from_dict(cfg), router, text_encoder)
