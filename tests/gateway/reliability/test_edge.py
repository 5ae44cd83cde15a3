"""The HTTP edge as `tollgate serve` runs it (gateway.reliability.shutdown.server): no proxy is
trusted by default, so a rotating X-Forwarded-For cannot dodge the wrong-key throttle; a huge
request head is refused (431) and a trickled one is cut after the header timeout (408)."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.app import create_app
from gateway.config import settings_from_dict
from gateway.reliability import edge, shutdown
from gateway.sandbox.local_server import free_port
from router_core.encoders.minilm import Encoder
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.reliability.conftest import reliability_config

WRONG_KEY = "sk-tg-" + "x" * 43


@contextmanager
def served(upstream: FakeUpstream, router: Router, encoder: Encoder, tmp_path: Path,
           reliability: dict[str, Any] | None = None, **server: Any) -> Iterator[str]:
    """A gateway under the production server (``shutdown.server``) in a thread."""
    db = f"sqlite:///{tmp_path / ('edge-' + uuid.uuid4().hex[:6] + '.db')}"
    settings = settings_from_dict(reliability_config(upstream, db, tmp_path, reliability))
    app = create_app(settings, router=router, encoder=encoder)
    port = free_port()
    srv = shutdown.server(app, "127.0.0.1", port, log_level="warning", **server)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    while not srv.started:
        assert thread.is_alive(), "the gateway did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=30)


def _wrong_keys(base: str, n: int) -> list[int]:
    """``n`` wrong keys, each claiming another client address in X-Forwarded-For."""
    with httpx.Client(base_url=base, timeout=30) as c:
        return [c.get("/v1/models", headers={"authorization": f"Bearer {WRONG_KEY}",
                                              "x-forwarded-for": f"10.9.{i // 250}.{i % 250}"}
                      ).status_code for i in range(n)]


def test_forwarded_for_is_not_trusted_by_default(
    upstream: FakeUpstream, test_router: Router, encoder: Encoder, tmp_path: Path
) -> None:
    with served(upstream, test_router, encoder, tmp_path) as base:
        codes = _wrong_keys(base, 25)
    assert codes[:20] == [401] * 20 and codes[20:] == [429] * 5  # one address: 127.0.0.1


def test_forwarded_allow_ips_trusts_the_named_proxy(
    upstream: FakeUpstream, test_router: Router, encoder: Encoder, tmp_path: Path
) -> None:
    # the CLI option (--forwarded-allow-ips) replaces the config's empty list
    with served(upstream, test_router, encoder, tmp_path, forwarded_allow_ips=["127.0.0.1"]
                ) as base:
        assert 429 not in _wrong_keys(base, 25)  # each forwarded address counted apart
    with served(upstream, test_router, encoder, tmp_path,
                reliability={"forwarded_allow_ips": "10.0.0.0/8"}) as base:
        assert 429 in _wrong_keys(base, 25)  # 127.0.0.1 is not the named proxy


def test_forwarded_allow_ips_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.config import ReliabilitySettings

    assert edge.uvicorn_options(ReliabilitySettings())["proxy_headers"] is False
    monkeypatch.setenv("TOLLGATE_FORWARDED_ALLOW_IPS", "10.0.0.1, 10.1.0.0/16")
    opts = edge.uvicorn_options(ReliabilitySettings().resolved())
    assert opts["proxy_headers"] is True
    assert opts["forwarded_allow_ips"] == ["10.0.0.1", "10.1.0.0/16"]


def _send_head(base: str, head_bytes: bytes, *, body_chunks: Iterator[bytes] = iter(()),  # noqa: B008
               pause_s: float = 0.0) -> tuple[bytes, float]:
    """Send ``head_bytes`` then each chunk (``pause_s`` apart); (what came back, seconds
    until the server closed)."""
    port = int(base.rsplit(":", 1)[1])
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        try:
            s.sendall(head_bytes)
            for chunk in body_chunks:
                s.sendall(chunk)
                time.sleep(pause_s)
        except OSError:  # the server closed while we were still sending
            pass
        got = b""
        try:
            while data := s.recv(65536):
                got += data
        except OSError:
            pass
    return got, time.monotonic() - start


def test_huge_header_is_refused_and_slow_headers_are_cut(
    upstream: FakeUpstream, test_router: Router, encoder: Encoder, tmp_path: Path
) -> None:
    with served(upstream, test_router, encoder, tmp_path,
                reliability={"header_timeout_s": 1.0}) as base:
        assert httpx.get(base + "/health").status_code == 200
        with httpx.Client(base_url=base) as c:  # kept-alive connections still work
            assert [c.get("/health").status_code for _ in range(3)] == [200] * 3

        chunk = b"a" * 65536
        got, _ = _send_head(base, b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: ",
                            body_chunks=iter([chunk] * 800))  # 50 MiB of one header
        assert got == b"" or got.startswith(b"HTTP/1.1 431"), got[:80]
        assert b"200 OK" not in got

        # a head trickled a byte every 0.2 s is cut after header_timeout_s
        got, took = _send_head(base, b"GET /health HTTP/1.1\r\n",
                               body_chunks=iter([b"x"] * 50), pause_s=0.2)
        assert got.startswith(b"HTTP/1.1 408"), got[:80]
        assert took < 10.0
        # a connection that sends nothing is cut too
        got, took = _send_head(base, b"")
        assert got.startswith(b"HTTP/1.1 408") and took < 5.0
        assert httpx.get(base + "/health").status_code == 200


def test_dashboard_cookie_is_secure_behind_a_trusted_https_proxy(
    upstream: FakeUpstream, test_router: Router, encoder: Encoder, tmp_path: Path
) -> None:
    from tests.gateway.conftest import ADMIN_KEY

    def login(base: str) -> str:
        r = httpx.post(base + "/dashboard/login", data={"key": ADMIN_KEY}, timeout=30,
                       headers={"x-forwarded-proto": "https", "x-forwarded-for": "10.1.2.3",
                                "origin": base.replace("http://", "https://")})
        assert r.status_code == 303, r.text
        return r.headers["set-cookie"].lower()

    with served(upstream, test_router, encoder, tmp_path,
                reliability={"forwarded_allow_ips": ["127.0.0.1"]}) as base:
        assert "; secure" in login(base)  # the proxy says the browser used https
    with served(upstream, test_router, encoder, tmp_path) as base:
        assert "; secure" not in login(base)  # an untrusted peer's header is ignored
