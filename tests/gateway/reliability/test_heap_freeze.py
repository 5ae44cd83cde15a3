"""`tollgate serve` freezes its startup heap once started (gateway/reliability/heap_freeze.py):
the objects alive then are out of every later collection, so a full collection set off by a
big request walks what was made since, not the ~870 MB a replica starts with (issue 35's
15,000-tool body held /health 540-650 ms in such a collection). A gateway a test builds
leaves the process's collector alone."""

from __future__ import annotations

import gc
from pathlib import Path

import httpx
import pytest

from gateway import app as app_module
from gateway.cli import serve
from gateway.config import settings_from_dict
from gateway.sandbox.local_server import serve_in_thread
from router_core.encoders.minilm import Encoder
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import gateway_config


def _tracked(obj: object) -> bool:
    """Whether a collection would walk ``obj`` (frozen objects are in no generation)."""
    return any(o is obj for o in gc.get_objects())


def test_tollgate_serve_freezes_what_startup_made_before_it_serves(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, upstream: FakeUpstream,
        test_router: Router, encoder: Encoder) -> None:
    real = app_module.create_app
    monkeypatch.setattr(app_module, "create_app", lambda settings, **kw: real(
        settings, router=test_router, encoder=encoder, **kw))  # the session's, for speed
    settings = settings_from_dict(gateway_config(
        upstream, tmp_path / "spool", database_url=f"sqlite:///{tmp_path / 'tollgate.db'}"))
    assert gc.get_freeze_count() == 0
    app = serve._build_app(settings)  # as `tollgate serve` and each of its workers build it
    before_start = [{"made": "before the start"}]
    assert _tracked(before_start)
    try:
        with serve_in_thread(app) as url:
            assert httpx.get(url + "/health", timeout=30).status_code == 200
            assert gc.get_freeze_count() > 0
            assert not _tracked(before_start)
            after_start = [{"made": "while serving"}]
            assert _tracked(after_start)  # what serving makes is collected as ever
    finally:
        gc.unfreeze()  # this test process goes on building gateways


def test_a_gateway_built_in_a_test_leaves_the_collector_alone(
        tmp_path: Path, upstream: FakeUpstream, test_router: Router,
        encoder: Encoder) -> None:
    settings = settings_from_dict(gateway_config(
        upstream, tmp_path / "spool", database_url=f"sqlite:///{tmp_path / 'tollgate.db'}"))
    app = app_module.create_app(settings, router=test_router, encoder=encoder)
    with serve_in_thread(app) as url:
        assert httpx.get(url + "/ready", timeout=30).status_code == 200
        assert gc.get_freeze_count() == 0
