"""The gateway test fixtures (real uvicorn, fake upstream, SQLite and PostgreSQL), shared."""

from typing import Any

from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import (  # noqa: F401 - re-exported pytest fixtures  # noqa: E402
    ADMIN_KEY,
    TIMEOUTS,
    _reset_upstream,
    db_url,
    encoder,
    test_router,
    upstream,
)
from tests.gateway.router_fixture import PRICES


def learning_config(up: FakeUpstream, **extra: Any) -> dict[str, Any]:
    """A gateway config over the fake backends (routes as in tests/gateway/conftest.py)."""
    return {
        "model_list": [up.model_entry(n, timeout=TIMEOUTS[n]) for n in PRICES],
        "routes": {"auto": {"cost_weight": 0.5}, "best": {"cost_weight": 0.0}},
        "admin_key": ADMIN_KEY,
        **extra,
    }
