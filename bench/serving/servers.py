"""The servers the load benches drive with ``wrk``, and ``wrk`` itself.

A fake OpenAI-compatible upstream, LiteLLM's proxy (``litellm[proxy]`` in its own venv under
``$TOLLGATE_CACHE_DIR/bench``) and ``tollgate serve``, each its own process on 127.0.0.1,
with the key ``wrk`` sends; the wrk Lua script that gives every request a unique ~50-token
prompt; one wrk run. Used by bench/serving/overhead/, forwarding_profile.py and
serve_memory.py.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

REPLY = "They weigh the same: one kilogram each."
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
    """The fake upstream, answering ``names`` on ``port``, until killed."""
    from gateway.sandbox.local_upstream import FakeBackend, FakeUpstream

    FakeUpstream([FakeBackend(n, reply=REPLY) for n in names], port=port).start()
    while True:
        time.sleep(3600)


UPSTREAM_MAIN = ("import sys; from bench.serving.servers import serve_upstream; "
                 "serve_upstream(int(sys.argv[1]), sys.argv[2].split(','))")


def upstream_argv(port: int, names: list[str]) -> list[str]:
    """The command running :func:`serve_upstream` in its own process (from the repo root)."""
    return [sys.executable, "-c", UPSTREAM_MAIN, str(port), ",".join(names)]


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
    from gateway.sandbox.local_server import free_port

    names = [b.model_name for b in load_settings(DEFAULT_CONFIG_PATH).model_list]
    py = sys.executable
    up_port, ll_port, tg_port = free_port(), free_port(), free_port()
    up_url = f"http://127.0.0.1:{up_port}"
    upstream = stack.enter_context(started(
        "upstream", upstream_argv(up_port, names), up_url, "/v1/models", tmp / "upstream.log"))
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
            str(tmp / "tollgate.yaml"), "--port", str(tg_port), "--log-level", "warning",
            "--workers", str(a.workers)]  # always: serve's default depends on the database
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
            Target("passthrough", tollgate, backend, tg_key, admin_key=admin),
            Target("auto", tollgate, "auto", tg_key, admin_key=admin)]


# ------------------------------------------------------------------ load and timing


@dataclass
class Target:
    name: str
    server: Server
    model: str
    key: str = ""
    runs: dict[tuple[int, bool], list[dict]] = field(default_factory=dict)
    admin_key: str = ""  # Tollgate's: what reads its /metrics


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
