"""Hot swap refuses a router version trained on embeddings made differently from the ones
the gateway makes (here: a version recorded before the truncation side was, i.e. trained on
right-truncated text, while the gateway serves the left-truncating packaged router).

Real parts: the packaged artifact, SQLite with the gateway's migrations, the poller's own
database reads.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from gateway.config import settings_from_dict
from gateway.learning import router_versions
from gateway.learning.hotswap import HotSwapper
from gateway.pool import PoolHolder, build_pool
from gateway.store.engine import make_engine
from gateway.store.migrate import upgrade
from router_core.artifact import load_router


def _record(engine, router, parent: str | None) -> None:
    router_versions.record_version(engine, router, status="promoted", parent=parent, metrics={},
                       n_observations=0, max_obs_id=0, activate=True)


def test_a_version_trained_on_other_embeddings_is_not_swapped_in(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'swap.db'}"
    upgrade(url)
    engine = make_engine(url)
    try:
        live = load_router()
        assert live.config["encoder"]["truncation_side"] == "left"
        holder = PoolHolder(build_pool(settings_from_dict({"model_list": []}), {}, live))
        swapper = HotSwapper(engine, holder)
        _record(engine, live, None)
        assert swapper.check_once() is None  # already serving the active version

        old = dataclasses.replace(
            live, version="before-truncation-side",
            config={k: v for k, v in live.config.items() if k != "encoder"},
        )
        _record(engine, old, live.version)
        with caplog.at_level(logging.ERROR, logger="gateway.learning.hotswap"):
            assert swapper.check_once() is None
            assert swapper.check_once() is None  # refused once, not reloaded every poll
        assert holder.current.router is live and swapper.swaps == 0
        errors = [r.getMessage() for r in caplog.records if r.name == "gateway.learning.hotswap"]
        assert len(errors) == 1 and "before-truncation-side not swapped in" in errors[0]

        same = dataclasses.replace(live, version="retrained-same-encoder")
        # published on the active version (a version is activated by compare-and-set on its
        # parent, gateway/learning/router_versions.py; it was ``live.version`` before that)
        _record(engine, same, old.version)
        assert swapper.check_once() == "retrained-same-encoder"
        assert holder.current.version == "retrained-same-encoder" and swapper.swaps == 1
    finally:
        engine.dispose()
