"""What routing costs a request: Tollgate (passthrough and ``auto``) beside LiteLLM's proxy.

One run, side by side, interleaved, with ``wrk`` (a C load generator: a Python client would
itself be the bottleneck) against one local fake OpenAI-compatible upstream:
  upstream     wrk straight to the fake upstream (the floor; it must not be the bottleneck)
  litellm      LiteLLM's proxy (``litellm[proxy]`` in its own venv, no database, no routing)
  passthrough  ``tollgate serve`` naming the backend (auth, budget, forwarding, log row)
  auto         ``tollgate serve`` with ``model="auto"`` (adds encode + head + search)
Each server runs one worker (``--workers``); Tollgate logs to SQLite in a temporary directory
(or ``--database-url``). Every request carries a unique ~50-token prompt (a wrk Lua script),
so no cache can answer it. Each round runs c=1 and c=32, streamed and not, over every target
in turn; the table shows medians over rounds, RSS is the peak of the largest process of each
server. ``routing_p50_ms`` is the decision alone (encode + head + search + tie-break) in this
process, for 20, 50 and 200-token prompts. The last line:
``routing_p50_ms=… added_p50_ms=… litellm_added_p50_ms=… throughput_ratio_c32=… rss_mb=…
errors=…`` (added = p50 at c=1 minus the upstream's; the ratio is auto's req/s at c=32 over
LiteLLM's; errors are the proxies', Tollgate's and LiteLLM's, over every cell).

    python bench/overhead.py [--rounds 3] [--duration 10] [--database-url postgresql://...]
                             [--encoder minilm-onnx-int8 | --router ARTIFACT] [--workers N]

Installs ``wrk`` with apt-get and LiteLLM's proxy into ``$TOLLGATE_CACHE_DIR/bench`` when
missing (needs the package registries once).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

REPLY = "They weigh the same: one kilogram each."
CONCURRENCY = (1, 32)
WRK_LUA = r"""
local words = {}
for w in string.gmatch(
  "how why what which explain compare write summarise translate list prove compute " ..
  "estimate describe the a of for with between into about under over energy market " ..
  "protein theorem history river poem function database contract planet music budget " ..
  "language algorithm climate city court vaccine guitar orbit tax novel bridge kernel " ..
  "neuron harbour ledger sonnet enzyme glacier verdict rocket dialect lattice turbine " ..
  "saffron quartz meadow falcon cipher tundra canyon opera voltage pixel", "%S+") do
  table.insert(words, w)
end
local threads, counter, tid = {}, 0, 0
function setup(thread) thread:set("tid", #threads + 1); table.insert(threads, thread) end
function init(args)
  model, stream, key = args[1], args[2] == "1", args[3]
  math.randomseed(os.time() * 1000 + tid)
  wrk.headers["Content-Type"] = "application/json"
  if key ~= "" then wrk.headers["Authorization"] = "Bearer " .. key end
end
function request()
  counter = counter + 1
  local parts = { string.format("Request %d-%d-%d:", tid, counter, math.random(1e9)) }
  for i = 1, 38 do parts[#parts + 1] = words[math.random(#words)] end
  local body = '{"model":"' .. model .. '","messages":[{"role":"user","content":"' ..
    table.concat(parts, " ") .. '?"}]' .. (stream and ',"stream":true' or '') .. '}'
  return wrk.format("POST", nil, nil, body)
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRK_JSON {"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,' ..
    '"errors":%d}\n', summary.requests, summary.duration, latency:percentile(50),
    latency:percentile(99), e.connect + e.read + e.write + e.status + e.timeout))
end
"""


# ------------------------------------------------------------------ installing the tools


def passthrough_backend() -> str:
    """The backend passthrough requests name: the packaged config's first (any would do)."""
    from gateway.config import DEFAULT_CONFIG_PATH, load_settings

    return load_settings(DEFAULT_CONFIG_PATH).model_list[0].model_name


def cache_dir() -> Path:
    root = os.environ.get("TOLLGATE_CACHE_DIR", Path.home() / ".cache" / "tollgate")
    return Path(root) / "bench"


def ensure_wrk() -> str:
    if shutil.which("wrk") is None:
        print("installing wrk (apt-get)", file=sys.stderr)
        subprocess.run(["apt-get", "install", "-y", "wrk"], check=True,
                       stdout=subprocess.DEVNULL)
    return shutil.which("wrk") or "wrk"


def ensure_litellm_proxy() -> Path:
    """The ``litellm`` CLI of a separate venv holding ``litellm[proxy]``."""
    venv = cache_dir() / "litellm-proxy-venv"
    exe = venv / "bin" / "litellm"
    if not exe.exists():
        print(f"installing litellm[proxy] into {venv}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "litellm[proxy]"],
                       check=True)
    return exe


# ------------------------------------------------------------------ the servers


@dataclass
class Server:
    name: str
    proc: subprocess.Popen
    url: str
    peak_rss_mb: float = 0.0

    def sample_rss(self) -> None:
        """The largest process of this server's tree (one worker; a supervisor is small)."""
        self.peak_rss_mb = max(self.peak_rss_mb, *(_rss_mb(p) for p in _tree(self.proc.pid)))


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            pass
    return out


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _free_port() -> int:
    from gateway.sandbox.local_server import free_port

    return free_port()


@contextmanager
def started(name: str, argv: list[str], url: str, probe: str, log: Path,
            env: dict | None = None) -> Iterator[Server]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})}, start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited; see {log}:\n{log.read_text()[-3000:]}")
                try:
                    if httpx.get(url + probe, timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not start in 300 s; see {log}")
                time.sleep(0.25)
            yield Server(name, proc, url)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def serve_upstream(port: int, names: list[str]) -> None:
    """``--serve-upstream``: the fake upstream in its own process, until killed."""
    from gateway.sandbox.local_upstream import FakeBackend, FakeUpstream

    FakeUpstream([FakeBackend(n, reply=REPLY) for n in names], port=port).start()
    while True:
        time.sleep(3600)


def served_router(tmp: Path, encoder: str | None) -> str | None:
    """The artifact Tollgate serves: the packaged one, or a copy of it recording another
    encoder kind of the same vectors (MiniLM's ONNX exports: ``minilm-onnx``,
    ``minilm-onnx-int8``); a router trained on other vectors is passed with ``--router``."""
    if encoder is None:
        return None
    from router_core.artifact import DEFAULT_ROUTER_DIR

    out = tmp / "router"
    shutil.copytree(DEFAULT_ROUTER_DIR, out)
    meta = json.loads((out / "router.json").read_text())
    recorded = dict(meta["config"].get("encoder") or {})
    if recorded.get("kind", "minilm") not in ("minilm", "minilm-onnx", "minilm-onnx-int8") or \
            encoder not in ("minilm", "minilm-onnx", "minilm-onnx-int8"):
        raise SystemExit(f"--encoder {encoder}: not the packaged router's vector space; "
                         "pass a router trained on it with --router")
    meta["config"]["encoder"] = {**recorded, "kind": encoder}
    (out / "router.json").write_text(json.dumps(meta))
    return str(out)


def tollgate_config(upstream_url: str, db_url: str, admin: str, tmp: Path,
                    router_path: str | None) -> dict:
    from gateway.config import DEFAULT_CONFIG_PATH, load_settings

    base = load_settings(DEFAULT_CONFIG_PATH)
    models = []
    for b in base.model_list:
        info = b.model_info.model_dump(exclude_none=True)
        info.update(input_cost_per_million=1.0, output_cost_per_million=2.0)
        models.append({"model_name": b.model_name,
                       "litellm_params": {"model": f"openai/{b.model_name}",
                                          "api_base": upstream_url, "api_key": "sk-fake"},
                       "model_info": info})
    return {"model_list": models,
            "routes": {k: v.model_dump(exclude_none=True) for k, v in base.routes.items()},
            "database_url": db_url, "admin_key": admin, "router_path": router_path,
            "reliability": {"spool_dir": str(tmp / "spool")}}


def litellm_config(upstream_url: str, master_key: str, backend: str) -> dict:
    return {"general_settings": {"master_key": master_key},
            "model_list": [{"model_name": backend,
                            "litellm_params": {"model": f"openai/{backend}",
                                               "api_base": upstream_url,
                                               "api_key": "sk-fake"}}]}


QUIET_LOGGING = {"version": 1, "disable_existing_loggers": False,
                 "root": {"level": "WARNING"},
                 "loggers": {"uvicorn.access": {"level": "WARNING"}}}


def start_all(stack: ExitStack, a: argparse.Namespace, tmp: Path) -> list[Target]:
    """Upstream, LiteLLM proxy and Tollgate, each with the key wrk sends."""
    from gateway.config import DEFAULT_CONFIG_PATH, load_settings

    names = [b.model_name for b in load_settings(DEFAULT_CONFIG_PATH).model_list]
    py, here = sys.executable, str(Path(__file__).resolve())
    up_port, ll_port, tg_port = _free_port(), _free_port(), _free_port()
    up_url = f"http://127.0.0.1:{up_port}"
    upstream = stack.enter_context(started(
        "upstream", [py, here, "--serve-upstream", str(up_port), "--models", ",".join(names)],
        up_url, "/v1/models", tmp / "upstream.log"))
    ll_key = "sk-bench-" + secrets.token_hex(16)  # LiteLLM checks it like Tollgate's keys
    (tmp / "litellm.yaml").write_text(yaml.safe_dump(litellm_config(up_url + "/v1", ll_key, passthrough_backend())))
    (tmp / "quiet.json").write_text(json.dumps(QUIET_LOGGING))
    litellm = stack.enter_context(started(
        "litellm", [str(ensure_litellm_proxy()), "--config", str(tmp / "litellm.yaml"),
                    "--port", str(ll_port), "--num_workers", "1",
                    "--log_config", str(tmp / "quiet.json")],
        f"http://127.0.0.1:{ll_port}", "/health/liveliness", tmp / "litellm.log",
        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}))
    admin = "bench-admin-" + secrets.token_hex(6)
    db_url = a.database_url or f"sqlite:///{tmp / 'tollgate.db'}"
    (tmp / "tollgate.yaml").write_text(yaml.safe_dump(
        tollgate_config(up_url + "/v1", db_url, admin, tmp, a.router_path)))
    argv = [py, "-c", "from gateway.cli import main; main()", "serve", "--config",
            str(tmp / "tollgate.yaml"), "--port", str(tg_port), "--log-level", "warning"]
    if a.workers != 1:
        argv += ["--workers", str(a.workers)]
    tollgate = stack.enter_context(started(
        "tollgate", argv, f"http://127.0.0.1:{tg_port}", "/ready", tmp / "tollgate.log",
        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"}))
    r = httpx.post(f"{tollgate.url}/admin/tenants", json={"name": "bench"},
                   headers={"authorization": f"Bearer {admin}"}, timeout=30)
    r.raise_for_status()
    tg_key = r.json()["api_key"]
    backend = passthrough_backend()
    return [Target("upstream", upstream, backend),
            Target("litellm", litellm, backend, ll_key),
            Target("passthrough", tollgate, backend, tg_key),
            Target("auto", tollgate, "auto", tg_key)]


# ------------------------------------------------------------------ load and timing


@dataclass
class Target:
    name: str
    server: Server
    model: str
    key: str = ""
    runs: dict[tuple[int, bool], list[dict]] = field(default_factory=dict)


def run_wrk(wrk: str, lua: Path, t: Target, conc: int, stream: bool, seconds: float) -> dict:
    threads = min(conc, 2)
    out = subprocess.run(
        [wrk, f"-t{threads}", f"-c{conc}", f"-d{max(1, round(seconds))}s", "--timeout", "10s", "-s", str(lua),
         f"{t.server.url}/v1/chat/completions", "--", t.model, "1" if stream else "0", t.key],
        capture_output=True, text=True, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("WRK_JSON "))
    res = json.loads(line.removeprefix("WRK_JSON "))
    res["rps"] = res["requests"] / (res["duration_us"] / 1e6)
    return res


def routing_decision_ms(n_samples: int, router_path: str | None) -> dict[int, float]:
    """p50 of the decision alone (encode + head + search + tie-break), as the gateway makes
    it, for prompts of about 20, 50 and 200 tokens (cl100k, the gateway's prompt counter)."""
    from gateway.config import DEFAULT_CONFIG_PATH, load_settings
    from gateway.serving.routing import route_request, router_model_map
    from router_core.artifact import load_router
    from router_core.encoders import encoder_for_router
    from router_core.litellm_env import litellm

    settings = load_settings(DEFAULT_CONFIG_PATH)
    router = load_router(router_path)
    encoder = encoder_for_router(router.config, threads=settings.encoder_threads)
    by_rm = router_model_map(settings, router, [b.model_name for b in settings.model_list])
    costs = {b: 1e-4 * (i + 1) for i, b in enumerate(by_rm.values())}
    vocab = WRK_LUA.split('"')[1].split() + ["market", "energy", "river", "theorem"]
    rng = random.Random(0)
    out = {}
    for n_tokens in (20, 50, 200):
        texts = []
        for i in range(n_samples + 10):
            words = [f"Request {i}:"]
            while litellm.token_counter(model="gpt-4", text=" ".join(words)) < n_tokens:
                words.append(rng.choice(vocab))
            texts.append(" ".join(words))
        times = []
        for i, text in enumerate(texts):
            t = time.perf_counter()
            phi = encoder.encode([text])
            route_request(router, phi, lam=0.2, delta=None, backends_by_router_model=by_rm,
                          costs_usd_by_backend=costs, max_cost_usd=None)
            if i >= 10:  # the first calls warm the encoder
                times.append((time.perf_counter() - t) * 1000)
        out[n_tokens] = statistics.median(times)
    return out


def measure(a: argparse.Namespace, wrk: str, lua: Path, targets: list[Target]) -> None:
    for t in targets:  # warm-up: connections, lazy imports, first-call caches
        run_wrk(wrk, lua, t, 4, False, 2)
        run_wrk(wrk, lua, t, 4, True, 1)
    for r in range(a.rounds):
        for conc in CONCURRENCY:
            for stream in (False, True):
                order = targets[r % len(targets):] + targets[:r % len(targets)]
                for t in order:
                    res = run_wrk(wrk, lua, t, conc, stream, a.duration)
                    t.runs.setdefault((conc, stream), []).append(res)
                    t.server.sample_rss()
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)


def med(t: Target, conc: int, stream: bool, key: str) -> float:
    return statistics.median(x[key] for x in t.runs[(conc, stream)])


def report(targets: list[Target], routing: dict[int, float], a: argparse.Namespace) -> None:
    by = {t.name: t for t in targets}
    ll, up = by["litellm"], by["upstream"]
    db = "PostgreSQL" if a.database_url else "SQLite"
    print(f"overhead: {a.rounds} interleaved rounds of {a.duration:g} s per cell, wrk, unique "
          f"prompts, 1 upstream, {a.workers} worker(s) each, Tollgate on {db}, encoder "
          f"{a.encoder or 'as the router records'}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    head = (f"{'target':<12} {'stream':<6} {'p50 c=1':>9} {'added':>7} {'req/s c=32':>11} "
            f"{'p99 c=32':>9} {'RSS MB':>7} {'added/LL':>9} {'req/s/LL':>9} {'RSS/LL':>7} "
            f"{'errors':>6}")
    print(head)
    for stream in (False, True):
        base = med(up, 1, stream, "p50_us") / 1000
        ll_added = med(ll, 1, stream, "p50_us") / 1000 - base
        for t in targets:
            p50 = med(t, 1, stream, "p50_us") / 1000
            rps = med(t, 32, stream, "rps")
            p99 = med(t, 32, stream, "p99_us") / 1000
            errors = sum(x["errors"] for k, v in t.runs.items() if k[1] == stream for x in v)
            rss = t.server.peak_rss_mb if t.name != "upstream" else float("nan")
            rel = t.name != "upstream"
            print(f"{t.name:<12} {'yes' if stream else 'no':<6} {p50:>9.2f} {p50 - base:>7.2f} "
                  f"{rps:>11.0f} {p99:>9.1f} {rss:>7.0f} "
                  f"{_ratio(p50 - base, ll_added, rel):>9} "
                  f"{_ratio(rps, med(ll, 32, stream, 'rps'), rel):>9} "
                  f"{_ratio(rss, ll.server.peak_rss_mb, rel):>7} {errors:>6}")
    print("(times in ms; added = p50 at c=1 minus the upstream's; /LL = ratio to LiteLLM proxy; "
          "the fake upstream ends a stream by closing the connection, which wrk counts as a "
          "read error on its own row)")
    print("routing decision p50 (encode + head + search + tie-break): " + ", ".join(
        f"{n} tokens {ms:.3f} ms" for n, ms in routing.items()))
    auto = by["auto"]
    base = med(up, 1, False, "p50_us") / 1000
    errors = sum(x["errors"] for t in targets if t.name != "upstream"
                 for v in t.runs.values() for x in v)
    print(f"routing_p50_ms={routing[50]:.3f} "
          f"added_p50_ms={med(auto, 1, False, 'p50_us') / 1000 - base:.2f} "
          f"litellm_added_p50_ms={med(ll, 1, False, 'p50_us') / 1000 - base:.2f} "
          f"throughput_ratio_c32={med(auto, 32, False, 'rps') / med(ll, 32, False, 'rps'):.2f} "
          f"rss_mb={auto.server.peak_rss_mb:.0f} errors={errors}")


def _ratio(x: float, y: float, show: bool) -> str:
    return f"{x / y:.2f}" if show and y > 0 and not math.isnan(x) else "-"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per wrk run")
    ap.add_argument("--workers", type=int, default=1, help="Tollgate's worker processes")
    ap.add_argument("--database-url", default=None, help="Tollgate's database (default SQLite)")
    ap.add_argument("--routing-samples", type=int, default=300)
    ap.add_argument("--router", default=None, help="router artifact to serve (default packaged)")
    ap.add_argument("--encoder", default=None,
                    help="serve the packaged router with this encoder kind of its vectors")
    ap.add_argument("--serve-upstream", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--models", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.serve_upstream is not None:
        serve_upstream(a.serve_upstream, a.models.split(","))
        return
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    wrk = ensure_wrk()
    ensure_litellm_proxy()
    with tempfile.TemporaryDirectory(prefix="tollgate-overhead-") as tmpdir, ExitStack() as st:
        tmp = Path(tmpdir)
        lua = tmp / "bench.lua"
        lua.write_text(WRK_LUA)
        a.router_path = a.router or served_router(tmp, a.encoder)
        targets = start_all(st, a, tmp)
        measure(a, wrk, lua, targets)
        routing = routing_decision_ms(a.routing_samples, a.router_path)
    report(targets, routing, a)


if __name__ == "__main__":
    main()
