"""The small router artifact over the fake backends (fake-strong, fake-mid, fake-cheap) that
the gateway tests route with.

It ships in ``bench.serving.fake_router`` because the reliability bench serves it too; tests
import it from here::

    from tests.gateway.router_fixture import PRICES, REPLIES, VERSION, build_router
"""

from bench.serving.fake_router import (
    PRICES,
    QUALITY,
    REPLIES,
    VERSION,
    build_router,
    write_artifact,
)

__all__ = ["PRICES", "QUALITY", "REPLIES", "VERSION", "build_router", "write_artifact"]
