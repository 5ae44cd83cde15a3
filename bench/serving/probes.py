"""What the hostile bench (bench/serving/hostile/) sends with and watches: a client that
records every request id and 5xx it gets back, a listener that never answers (an image URL
that would hang a fetch), and the replicas' /metrics.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import httpx

from bench.serving.replica_env import ADMIN_KEY


class Recorder:
    """Every request id a scenario got back (for the lost-rows count) and every 5xx."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.server_errors: list[str] = []
        self._lock = threading.Lock()

    def post(self, url: str, key: str, timeout: float = 120, **kw: Any) -> httpx.Response:
        r = httpx.post(url, headers={"authorization": f"Bearer {key}",
                                     "content-type": "application/json"},
                       timeout=timeout, **kw)
        with self._lock:
            rid = r.headers.get("x-tollgate-request-id")
            refused_key = r.status_code == 401 or "too_many_failed_logins" in r.text[:500]
            if rid and not refused_key:  # a refused key is not a request: it has no log row
                self.ids.append(rid)
            if r.status_code >= 500:
                self.server_errors.append(f"{url} {r.status_code} {r.text[:200]}")
        return r


def scrape_metrics(base_url: str) -> str:
    """A replica's /metrics text (read with the admin key)."""
    r = httpx.get(base_url + "/metrics", timeout=60,
                  headers={"authorization": f"Bearer {ADMIN_KEY}"})
    r.raise_for_status()
    return r.text


def metric_sum(text: str, name: str, contains: str = "") -> float:
    """The sum of metric ``name``'s samples whose line contains ``contains``."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith((name + " ", name + "{")) and contains in line)


class Blackhole:
    """A TCP listener that accepts and never answers: an image URL that would hang a fetch."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/cat.png"

    def _accept(self) -> None:
        held = []
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            held.append(conn)
