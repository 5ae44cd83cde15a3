"""A client that hangs up before its body is read (a load generator stopping, a proxy timing
out, a hostile tenant at will) ends as a 499 in the routing log, not as a server error with
a traceback: on a real socket against the running gateway, SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import socket
import time
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa

from gateway.store.models import request_logs
from tests.gateway.conftest import Gateway


def _send_half_a_request(base_url: str, key: str, path: str = "/v1/chat/completions") -> None:
    """Headers announcing a 5,000-byte body, 10 bytes of it, then the socket closed."""
    url = urlsplit(base_url)
    head = (f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\n"
            f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
            "Content-Length: 5000\r\n\r\n")
    with socket.create_connection((url.hostname, url.port), timeout=10) as s:
        s.sendall(head.encode() + b'{"model": ')
        time.sleep(0.2)  # authenticated and waiting for the rest of the body


def _rows(gateway: Gateway, tenant_id: str, wait_s: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + wait_s
    while True:
        with gateway.engine.connect() as conn:
            rows = conn.execute(sa.select(request_logs).where(
                request_logs.c.tenant_id == tenant_id)).mappings().all()
        if rows or time.monotonic() > deadline:
            return [dict(r) for r in rows]
        time.sleep(0.05)


def test_client_gone_before_its_body_is_a_499_without_a_traceback(
        gateway: Gateway, caplog: pytest.LogCaptureFixture) -> None:
    key, tid = gateway.tenant(budget_usd=1.0)
    with caplog.at_level(logging.INFO):
        _send_half_a_request(gateway.base_url, key)
        rows = _rows(gateway, tid)
    assert [(r["status"], r["error"]) for r in rows] == [(499, "client disconnected")]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]  # was: "unhandled error" twice
    assert gateway.settled(tid)["reserved_usd"] == 0
    # the gateway goes on serving the same tenant
    reply = gateway.client(key).chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content


def test_client_gone_before_a_feedback_body_logs_no_error(
        gateway: Gateway, caplog: pytest.LogCaptureFixture) -> None:
    """/v1/feedback reads its body outside the endpoint frame: the app's handler answers."""
    key, _ = gateway.tenant()
    with caplog.at_level(logging.INFO):
        _send_half_a_request(gateway.base_url, key, "/v1/feedback")
        time.sleep(0.5)  # the handler has run into the closed socket
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]  # was: "unhandled error" twice
