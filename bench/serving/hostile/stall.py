"""The event loop under hostile payloads: /health polled while an image that never loads and
an 8 MB prompt are in flight."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench.serving.hostile.common import hostile_messages
from bench.serving.probes import Blackhole, Recorder
from bench.serving.replica_env import Env

# Polls /health from its own interpreter: in this process the fake upstreams' threads parse
# the 8 MB prompt, and their hold on this process's GIL would count as the replica's stall.
POLLER = """
import sys, time, httpx
url, seconds = sys.argv[1], float(sys.argv[2])
end = time.monotonic() + seconds
with httpx.Client(timeout=30) as c:
    while time.monotonic() < end:
        t = time.monotonic()
        c.get(url)
        print(t, (time.monotonic() - t) * 1000, flush=True)
        time.sleep(0.02)
"""


@dataclass(frozen=True)
class Polled:
    """What ``polled_while`` saw: the requests' status codes, how long they were in flight,
    /health's median latency before them, its worst during them, and how many polls that was."""

    codes: list[int]
    in_flight_s: float
    baseline_ms: float
    max_ms: float
    polls: int

    @property
    def stall_ms(self) -> float:
        """The event loop's worst stall: the worst poll past the baseline (0.1 ms)."""
        return round(max(0.0, self.max_ms - self.baseline_ms), 1)


def polled_while(health_url: str, seconds: int, send: Callable[[], list[int]]) -> Polled:
    """``send()`` (it returns the status codes of the requests it makes) with ``health_url``
    polled from its own interpreter (POLLER, for at most ``seconds``) 3 s before and while
    it runs."""
    poller = subprocess.Popen([sys.executable, "-c", POLLER, health_url, str(seconds)],
                              stdout=subprocess.PIPE, text=True)
    time.sleep(3.0)
    started = time.monotonic()
    codes = send()
    ended = time.monotonic()
    time.sleep(0.3)
    poller.terminate()
    out, _ = poller.communicate()
    latencies = [(float(t), float(ms)) for t, ms in (line.split() for line in out.splitlines())]
    before = [ms for t, ms in latencies if t < started]
    during = [ms for t, ms in latencies if started <= t <= ended]
    return Polled(codes, ended - started, statistics.median(before) if before else 0.0,
                  max(during, default=0.0), len(during))


def loop_stall_scenario(env: Env, rec: Recorder, hole: Blackhole,
                        prompt_bytes: int = 8_000_000) -> dict[str, Any]:
    base = env.replicas[0].base_url
    key, _ = env.tenant()

    def send() -> list[int]:
        big = {"model": "auto", "messages": [{"role": "user", "content": "word " *
                                              (prompt_bytes // 5)}], "max_tokens": 8}
        image = {"model": "auto", "messages": hostile_messages(hole.url), "max_tokens": 8}
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(rec.post, base + "/v1/chat/completions", key, json=b)
                       for b in (image, big)]
            return [f.result().status_code for f in futures]

    p = polled_while(base + "/health", 120, send)
    return {"codes": p.codes, "in_flight_s": round(p.in_flight_s, 2),
            "health_baseline_ms": round(p.baseline_ms, 1),
            "health_max_ms": round(p.max_ms, 1), "polls": p.polls,
            "loop_stall_ms": p.stall_ms, "image_fetches": hole.accepted}
