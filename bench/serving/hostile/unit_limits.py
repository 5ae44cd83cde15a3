"""Hostile scenarios on the unit endpoints, count_tokens, the cache and slow bodies (issue 48
findings 3, 4, 5, 6, 9, 10, 13), on an environment of their own: one ``tollgate serve``
replica on PostgreSQL and Redis (bench/serving/replica_env.py) with the response cache on
Redis (``max_ttl_s`` CACHE_MAX_TTL_S), a body deadline of BODY_TIMEOUT_S, and a fake upstream
serving images (gpt-image-1.5, reporting gpt-image usage), speech, transcription, moderation,
rerank and embeddings at litellm's prices. Kept apart from the shared environment because the
cache on would answer the other scenarios' repeated requests.

Each scenario returns its result with its last-line field:
- audio_header_undercharge_multiple: a FLAC whose header says 16 samples but holds 300 s, and
  an MP3 of a 1 s file followed by 3 × 300 s files: the largest (seconds held × whisper-1's
  price) / what the tenant was charged (target ≤ 1);
- image_quality_undercharge_multiple: gpt-image-1.5 with quality left out and ``auto``, n=10,
  a 30k-character prompt: the largest usage cost the reply reports / the charge (≤ 1);
- unit_parallel_overadmit: a key with max_parallel_requests 1 sends 8 concurrent requests to
  each of images, speech, moderations, rerank, transcriptions and embeddings (the upstream
  takes 1 s for each): Σ answers past 1; and count_tokens with a limit of 0: its answers
  (target 0);
- count_tokens_neighbour_p50_ratio: another tenant's chat p50 while one key sends 8 at a time
  count_tokens bodies of 7.3 MB (refused by size) and of 2.0 MB (just under the limit,
  counted) / its p50 before, the worse of the two (target ≤ 2); /health is polled from its
  own interpreter meanwhile (``units_loop_stall_ms``, bench/serving/hostile/stall.py's);
- cache_ttl_max_s: the longest TTL in Redis of an answer stored with ``cache.ttl`` 1e9 − 1
  (target ≤ CACHE_MAX_TTL_S);
- zero_budget_cached_answers: a tenant's cached answer asked again once its budget is $0
  (target 0);
- slow_body_open_after_s: 20 connections trickling a body a byte a second on a key with
  max_parallel_requests 2: the longest any stays open (target ≤ BODY_TIMEOUT_S, plus the
  trickle's 1 s granularity); the key is served right after (``slow_body_key_served``).
"""

from __future__ import annotations

import io
import json
import socket
import statistics
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis
import soundfile

from bench.serving.cluster import REDIS_URL
from bench.serving.hostile.stall import polled_while
from bench.serving.replica_env import Env, start_env, stop_env
from gateway.sandbox.local_upstream import FakeBackend, FakeUpstream
from router_core.env.litellm_env import litellm

BODY_TIMEOUT_S = 5.0
CACHE_MAX_TTL_S = 3600.0
HIGH_TOKENS = 4160  # output image tokens of a high 1024x1024 gpt-image render ($0.133)
UNIT_DELAY_S = 1.0
UNITS = ("gpt-image-1.5", "tts-1", "whisper-1", "omni-moderation-latest", "rerank-v3.5",
         "text-embedding-3-small")
LAST_LINE = ("audio_header_undercharge_multiple", "image_quality_undercharge_multiple",
             "unit_parallel_overadmit", "count_tokens_neighbour_p50_ratio", "cache_ttl_max_s",
             "zero_budget_cached_answers", "slow_body_open_after_s")


def _entry(up: FakeUpstream, name: str, model: str, root: bool = False) -> dict:
    base = up.base_url.removesuffix("/v1") if root else up.base_url
    return {"model_name": name, "model_info": {},
            "litellm_params": {"model": model, "api_base": base, "api_key": "sk-fake"}}


def start_units_env(workdir: Path) -> tuple[Env, FakeUpstream]:
    """One replica with the unit backends, the cache on Redis and the body deadline."""
    up = FakeUpstream([FakeBackend("gpt-image-1.5", image_output_tokens=HIGH_TOKENS),
                       *(FakeBackend(n, reply="ok") for n in UNITS[1:])]).start()
    models = [_entry(up, n, f"openai/{n}") for n in UNITS if n != "rerank-v3.5"]
    models.append(_entry(up, "rerank", "cohere/rerank-v3.5", root=True))
    env = start_env(workdir, replicas=1, extra_models=models,
                    cache={"enabled": True, "type": "redis", "ttl_s": 600,
                           "max_ttl_s": CACHE_MAX_TTL_S},
                    reliability={"body_timeout_s": BODY_TIMEOUT_S})
    return env, up


def _post(url: str, key: str, timeout: float = 120, extra: dict[str, str] | None = None,
          **kw: Any) -> httpx.Response:
    try:
        return httpx.post(url, headers={"authorization": f"Bearer {key}", **(extra or {})},
                          timeout=timeout, **kw)
    except httpx.HTTPError:
        return httpx.Response(599)


def _key(env: Env, budget: float = 50.0, **limits: Any) -> str:
    _, tid = env.tenant(budget_usd=budget)
    r = env.admin("POST", "/key/generate", json={"team_id": tid, **limits})
    r.raise_for_status()
    return r.json()["key"]


def _encoded(seconds: float, fmt: str, subtype: str | None = None) -> bytes:
    buf = io.BytesIO()
    noise = np.random.default_rng(0).standard_normal(int(seconds * 16000)) * 0.1
    soundfile.write(buf, noise.astype("float32"), 16000, format=fmt, subtype=subtype)
    return buf.getvalue()


def audio_scenario(env: Env) -> dict[str, Any]:
    flac = bytearray(_encoded(300, "FLAC"))
    field = int.from_bytes(flac[18:26], "big")  # STREAMINFO's 36-bit total samples
    flac[18:26] = ((field & ~((1 << 36) - 1)) | 16).to_bytes(8, "big")
    mp3 = _encoded(1, "MP3", "MPEG_LAYER_III") + _encoded(300, "MP3", "MPEG_LAYER_III") * 3
    price = float(litellm.model_cost["whisper-1"]["input_cost_per_second"])
    url = env.replicas[0].base_url + "/v1/audio/transcriptions"
    out: dict[str, Any] = {}
    multiples = []
    for name, data, seconds in (("flac", bytes(flac), 300), ("mp3", mp3, 901)):
        r = _post(url, _key(env), data={"model": "whisper-1"},
                  files={"file": (f"a.{name}", data, f"audio/{name}")})
        charged = float(r.headers.get("x-tollgate-cost-usd", 0)) if r.status_code == 200 \
            else None
        out[name] = {"status": r.status_code, "bytes": len(data), "charged_usd": charged}
        multiples.append(seconds * price / charged if charged else
                         (0.0 if r.status_code == 400 else float("inf")))
    return {**out, "audio_header_undercharge_multiple": round(max(multiples), 3)}


def image_scenario(env: Env) -> dict[str, Any]:
    cost = litellm.model_cost["gpt-image-1.5"]
    url = env.replicas[0].base_url + "/v1/images/generations"
    prompt = "a lighthouse at dawn, " * 1400
    out: dict[str, Any] = {}
    multiples = []
    for quality in (None, "auto"):
        body = {"model": "gpt-image-1.5", "prompt": prompt, "n": 10,
                **({"quality": quality} if quality else {})}
        r = _post(url, _key(env), json=body)
        usage = r.json().get("usage") if r.status_code == 200 else None
        if not usage:
            out[str(quality)] = {"status": r.status_code}
            multiples.append(float("inf"))
            continue
        billed = (usage["input_tokens_details"]["text_tokens"] * cost["input_cost_per_token"]
                  + usage["output_tokens"] * cost["output_cost_per_image_token"])
        charged = float(r.headers["x-tollgate-cost-usd"])
        out[str(quality)] = {"billed_usd": round(billed, 6), "charged_usd": round(charged, 6)}
        multiples.append(billed / charged)
    return {**out, "image_quality_undercharge_multiple": round(max(multiples), 3)}


def parallel_scenario(env: Env, up: FakeUpstream, n: int = 8) -> dict[str, Any]:
    base = env.replicas[0].base_url
    wav = io.BytesIO()
    soundfile.write(wav, np.zeros(16000, dtype="float32"), 16000, format="WAV")
    calls = {
        "images": ("/v1/images/generations", "gpt-image-1.5",
                   {"json": {"model": "gpt-image-1.5", "prompt": "a cat", "quality": "low"}}),
        "speech": ("/v1/audio/speech", "tts-1",
                   {"json": {"model": "tts-1", "voice": "alloy", "input": "hello"}}),
        "moderations": ("/v1/moderations", "omni-moderation-latest",
                        {"json": {"model": "omni-moderation-latest", "input": "hello"}}),
        "rerank": ("/v1/rerank", "rerank-v3.5",
                   {"json": {"model": "rerank", "query": "q", "documents": ["a", "b"]}}),
        "transcriptions": ("/v1/audio/transcriptions", "whisper-1",
                           {"data": {"model": "whisper-1"},
                            "files": {"file": ("a.wav", wav.getvalue(), "audio/wav")}}),
        "embeddings": ("/v1/embeddings", "text-embedding-3-small",
                       {"json": {"model": "text-embedding-3-small", "input": "hello"}}),
    }
    answered: dict[str, int] = {}
    for name, (path, backend, kw) in calls.items():
        key = _key(env, max_parallel_requests=1)
        up.backends[backend].delay_s = UNIT_DELAY_S
        try:
            with ThreadPoolExecutor(n) as pool:
                codes = list(pool.map(
                    lambda _, url=base + path, k=key, kw=kw: _post(url, k, **kw).status_code,
                    range(n)))
        finally:
            up.backends[backend].delay_s = 0.0
        answered[name] = codes.count(200)
    zero = _key(env, max_parallel_requests=0)
    body = {"model": "fake-cheap", "messages": [{"role": "user", "content": "hi"}]}
    answered["count_tokens (limit 0)"] = sum(
        _post(base + "/v1/messages/count_tokens", zero, json=body).status_code == 200
        for _ in range(n))
    over = sum(max(0, a - 1) for k, a in answered.items() if "limit 0" not in k)
    over += answered["count_tokens (limit 0)"]
    return {"answered_of_8": answered, "unit_parallel_overadmit": over}


def count_tokens_scenario(env: Env) -> dict[str, Any]:
    """The flood at the issue's 7.3 MB (refused by size) and just under the 2 MiB limit
    (counted): the field is the worse of the two ratios, the stall the worse of the two."""
    runs = {f"{words * 5 / 1e6:.1f}MB": _count_tokens_flood(env, words)
            for words in (1_460_000, 400_000)}
    return {**runs,
            "units_loop_stall_ms": max(r["loop_stall_ms"] for r in runs.values()),
            "count_tokens_neighbour_p50_ratio": max(r["ratio"] for r in runs.values())}


def _count_tokens_flood(env: Env, words: int, concurrent: int = 8, seconds: float = 10.0,
                        probes: int = 20) -> dict[str, Any]:
    base = env.replicas[0].base_url
    flood_key, probe_key = _key(env), _key(env)
    small = {"model": "fake-cheap", "max_tokens": 8,
             "messages": [{"role": "user", "content": "a small question"}]}
    # encoded once: the flood's threads share this process with the probe, and encoding
    # 7.3 MB of JSON per request in 8 threads held the GIL the probe's timing waits on
    big = json.dumps({"model": "fake-cheap",
                      "messages": [{"role": "user", "content": "word " * words}]}).encode()

    def probe() -> list[float]:
        times = []
        for _ in range(probes):
            t = time.perf_counter()
            if _post(base + "/v1/chat/completions", probe_key, json=small).status_code == 200:
                times.append(time.perf_counter() - t)
        return times

    probe()  # warm
    idle = probe()
    codes: list[int] = []
    during: list[float] = []

    def flood() -> list[int]:
        end = time.monotonic() + seconds

        def one(_: int) -> list[int]:
            got = []
            while time.monotonic() < end:
                got.append(_post(base + "/v1/messages/count_tokens", flood_key, content=big,
                                 extra={"content-type": "application/json"}).status_code)
            return got

        with ThreadPoolExecutor(concurrent + 1) as pool:
            futs = [pool.submit(one, i) for i in range(concurrent)]
            time.sleep(1.0)
            during.extend(probe())
            for f in futs:
                codes.extend(f.result())
        return codes

    polled = polled_while(base + "/health", int(seconds) + 30, flood)
    p50_idle = statistics.median(idle)
    p50_during = statistics.median(during) if during else float("inf")
    return {"flood_codes": {c: codes.count(c) for c in set(codes)},
            "p50_idle_ms": round(p50_idle * 1e3, 1), "p50_during_ms": round(p50_during * 1e3, 1),
            "loop_stall_ms": polled.stall_ms, "ratio": round(p50_during / p50_idle, 2)}


def cache_scenario(env: Env) -> dict[str, Any]:
    base = env.replicas[0].base_url + "/v1/chat/completions"
    key, tid = env.tenant(budget_usd=1.0)
    body = {"model": "fake-cheap", "max_tokens": 8, "cache": {"ttl": 1e9 - 1},
            "messages": [{"role": "user", "content": "pin me " + uuid.uuid4().hex}]}
    first = _post(base, key, json=body)
    r = redis.Redis.from_url(REDIS_URL)
    try:
        deadline = time.monotonic() + 10
        ttls: list[float] = []
        while not ttls and time.monotonic() < deadline:
            ttls = [r.pttl(k) / 1000 for k in r.scan_iter(match=f"{env.redis_prefix}:rc:*")]
            time.sleep(0.1)
    finally:
        r.close()
    hit = _post(base, key, json=body).headers.get("x-tollgate-cache")
    env.admin("PATCH", f"/admin/tenants/{tid}", json={"budget_usd": 0.0})
    zero = _post(base, key, json=body)
    return {"first": first.status_code, "second": hit, "after_zero_budget": zero.status_code,
            "configured_max_ttl_s": CACHE_MAX_TTL_S,
            "cache_ttl_max_s": round(max(ttls), 1) if ttls else None,
            "zero_budget_cached_answers": int(zero.status_code == 200)}


def _trickle(base_url: str, key: str, limit_s: float) -> float:
    """Seconds until the gateway closes a connection that sends a byte of body a second."""
    host, port = base_url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=limit_s)
    t0 = time.monotonic()
    s.sendall((f"POST /v1/images/generations HTTP/1.1\r\nhost: {host}\r\nauthorization: "
               f"Bearer {key}\r\ncontent-type: application/json\r\ncontent-length: 100000"
               "\r\n\r\n{").encode())
    s.settimeout(1.0)
    try:
        while time.monotonic() - t0 < limit_s:
            try:
                if not s.recv(65536):
                    break
            except TimeoutError:
                s.sendall(b" ")
            except OSError:
                break
    finally:
        s.close()
    return time.monotonic() - t0


def slow_body_scenario(env: Env, n: int = 20) -> dict[str, Any]:
    base = env.replicas[0].base_url
    key = _key(env, max_parallel_requests=2)
    with ThreadPoolExecutor(n) as pool:
        open_s = list(pool.map(lambda _: _trickle(base, key, 90.0), range(n)))
    after = _post(base + "/v1/images/generations", key,
                  json={"model": "gpt-image-1.5", "prompt": "a cat", "quality": "low"})
    return {"configured_body_timeout_s": BODY_TIMEOUT_S,
            "slow_body_key_served": after.status_code,
            "slow_body_open_after_s": round(max(open_s), 1)}


def run_all(only: set[str] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Every scenario of this module (or those in ``only``) on its own environment."""
    named = [("unit audio", audio_scenario), ("unit images", image_scenario),
             ("unit parallel", None), ("count_tokens", count_tokens_scenario),
             ("cache bounds", cache_scenario), ("slow bodies", slow_body_scenario)]
    named = [(n, f) for n, f in named if not only or n in only]
    if not named:
        return []
    results = []
    with tempfile.TemporaryDirectory(prefix="tollgate-units-") as tmp:
        env, up = start_units_env(Path(tmp))
        try:
            for name, fn in named:
                result = parallel_scenario(env, up) if fn is None else fn(env)
                print(f"{name}:", result, flush=True)
                results.append((name, result))
        finally:
            stop_env(env)
            up.stop()
    return results
