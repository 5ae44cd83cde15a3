"""Where a forwarded request's CPU goes: Tollgate's passthrough (and ``auto``) under py-spy.

Why CPU, not latency: at c=32 one worker is CPU-bound, so req/s ≈ 1 / (CPU s per request),
and CPU per request and its shares hold still while a neighbour's job makes wall times drift.
One run, interleaved rounds, with bench/serving/servers.py's servers (fake upstream, LiteLLM
proxy, ``tollgate serve``: 1 worker, SQLite in a temp dir) and its wrk script (unique
~50-token prompts), c=32, not streamed. Targets: ``passthrough`` (a backend named), ``auto`` (with
``--auto``), ``litellm`` (the proxy), ``bare``: ``litellm.acompletion`` in a loop, 32 in
flight, in a process of its own: litellm's CPU per call, the floor of any gateway on it, and
``inline``: that loop as the gateway calls litellm (its SDK client, litellm's setup run on
the loop: gateway/provider/litellm_inline.py, litellm's own logging left out:
gateway/provider/litellm_unlogged.py), ``logged``: the same with litellm's logging on, and
``sdk``: the same loop through the openai SDK alone, what litellm's own work adds to a call.
Each round: CPU ms per request (process CPU time / requests, unprofiled), then Tollgate under
the same load with ``py-spy record --gil``: the samples of the thread holding the GIL, i.e.
the Python CPU time; the rest of the CPU time measured meanwhile is "off the GIL" (sqlite and
sockets in C, GIL hand-offs between threads). A GIL sample is charged to:
  litellm / transport   inside ``litellm.acompletion`` or litellm's own threads and tasks;
                        openai SDK / httpx / httpcore / h11 / sockets at the leaf: transport
  sqlalchemy [step]     else SQLAlchemy or sqlite3, with the Tollgate step that runs it
  tollgate: step        else the innermost Tollgate frame's step (auth, budget, log, plan,
                        forward, other), what it calls included (token counting)
  server                else uvicorn / starlette / fastapi / pydantic; asyncio/other the rest
Last line: ``litellm_share`` (transport included), ``tollgate_share`` (its steps and their
SQL; off-GIL time not attributed), ``cpu_ms_per_request`` (passthrough, median),
``max_speedup_without_tollgate`` = 1 / (1 − tollgate_share), ``bare_litellm_cpu_ms``,
``proxy_cpu_ms`` and ``floor_vs_proxy`` = proxy_cpu_ms / bare_litellm_cpu_ms: the most
throughput, in multiples of LiteLLM proxy's, for a server spending only litellm's CPU;
``inline_litellm_cpu_ms``, ``logged_litellm_cpu_ms``, ``bare_sdk_cpu_ms`` and
``litellm_vs_sdk`` = bare_litellm_cpu_ms / bare_sdk_cpu_ms.

    python -m bench.serving.forwarding_profile [--rounds 3] [--duration 10] [--auto] [--keep DIR]

Installs wrk (apt-get), LiteLLM's proxy (as bench/serving/overhead/ does) and py-spy (into
``$TOLLGATE_CACHE_DIR/bench/profilers-venv``) when missing; py-spy needs ptrace (root here).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psutil

from bench.serving.servers import WRK_LUA, cache_dir, ensure_wrk, run_wrk, start_all
from bench.serving.servers import Target as WrkTarget
from bench.serving.stack_attribution import categorise, hot_call, read_samples

CONC = 32
RATE = 100  # py-spy samples per second
OFF_GIL = "off the GIL (C without the GIL: sqlite, sockets; GIL hand-offs)"
WORDS = WRK_LUA.split('"')[1].split() + ["market", "energy", "river", "theorem"]
def ensure_py_spy() -> str:
    venv = cache_dir() / "profilers-venv"
    exe = venv / "bin" / "py-spy"
    if not exe.exists():
        print(f"installing py-spy into {venv}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "py-spy"], check=True)
    return str(exe)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its children (a proxy may fork a worker)."""
    p, total = psutil.Process(pid), 0.0
    for q in [p, *p.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += q.cpu_times().user + q.cpu_times().system
    return total


def wrk_cpu(wrk: str, lua: Path, t: WrkTarget, seconds: float) -> tuple[float, dict]:
    """CPU ms per request of ``t``'s server under wrk at c=32, and wrk's result."""
    before = cpu_s(t.server.proc.pid)
    res = run_wrk(wrk, lua, t, CONC, False, seconds)
    return (cpu_s(t.server.proc.pid) - before) * 1000 / max(1, res["requests"]), res


def profiled(wrk: str, spy: str, lua: Path, t: WrkTarget, seconds: float, out: Path) -> Counter:
    """CPU seconds of ``t``'s server under wrk at c=32 by component (module docstring), hot
    calls under ('hot', call), and ('meta', 'cpu_s' | 'requests')."""
    spy_proc = subprocess.Popen(
        [spy, "record", "--pid", str(t.server.proc.pid), "--gil", "--full-filenames",
         "--format", "raw", "--rate", str(RATE), "--duration", str(round(seconds) + 1),
         "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.5)  # py-spy attaches
    before = cpu_s(t.server.proc.pid)
    res = run_wrk(wrk, lua, t, CONC, False, seconds)
    cpu = cpu_s(t.server.proc.pid) - before
    _, err = spy_proc.communicate(timeout=120)
    if not out.exists():
        raise RuntimeError(f"py-spy failed: {err.decode()[-2000:]}")
    counts: Counter = Counter()
    for stack, n in read_samples(out):
        counts[cat := categorise(stack)] += n / RATE
        if (h := hot_call(stack, cat)) is not None:
            counts[("hot", h)] += n / RATE
    gil = sum(v for k, v in counts.items() if not isinstance(k, tuple))
    counts[OFF_GIL] = max(0.0, cpu - gil)
    counts[("meta", "cpu_s")], counts[("meta", "requests")] = cpu, res["requests"]
    return counts


def _loop_cpu(call: Callable[[str], Awaitable[Any]], seconds: float) -> dict:
    """``call(prompt)``, 32 in flight, unique prompts, after a 2 s warm-up; CPU ms per call."""
    rng = random.Random(os.getpid())
    done = 0

    async def worker(tid: int, until: float, count: bool) -> None:
        nonlocal done
        i = 0
        while time.monotonic() < until:
            i += 1
            await call(" ".join([f"Request {tid}-{i}-{rng.randrange(10**9)}:",
                                 *(rng.choice(WORDS) for _ in range(38))]) + "?")
            done += count

    async def main() -> dict:
        nonlocal done
        await asyncio.gather(*(worker(t, time.monotonic() + 2, False) for t in range(CONC)))
        c0, w0 = time.process_time(), time.monotonic()
        await asyncio.gather(*(worker(t, w0 + seconds, True) for t in range(CONC)))
        cpu, wall = time.process_time() - c0, time.monotonic() - w0
        return {"calls": done, "cpu_ms": cpu * 1000 / max(1, done), "rps": done / wall}

    return asyncio.run(main())


def bare_litellm(up_url: str, model: str, seconds: float) -> dict:
    """``--bare bare``: litellm.acompletion as a plain caller makes it (litellm builds its
    client; its setup runs in the loop's default executor's threads)."""
    from router_core.env.litellm_env import litellm

    litellm.suppress_debug_info = True
    return _loop_cpu(lambda text: litellm.acompletion(
        model=f"openai/{model}", api_base=up_url, api_key="sk-fake", max_tokens=256,
        messages=[{"role": "user", "content": text}], timeout=600, num_retries=0,
        max_retries=0), seconds)


def _gateway_call(up_url: str, model: str, seconds: float, logged: bool) -> dict:
    """litellm called as the gateway calls it: its own SDK client, the setup run on the loop
    (gateway/provider/litellm_inline.py) and, unless ``logged``, litellm's own logging
    left out (gateway/provider/litellm_unlogged.py)."""
    from gateway.provider.litellm_inline import inline_setup, install_inline_setup
    from gateway.provider.litellm_unlogged import unlogged
    from gateway.provider.request_json import sdk_client
    from router_core.env.litellm_env import litellm

    litellm.suppress_debug_info = True

    async def call(text: str) -> Any:
        if not installed:
            install_inline_setup()
            installed.append(True)
        kw = {"model": f"openai/{model}", "api_base": up_url, "api_key": "sk-fake",
              "max_tokens": 256, "messages": [{"role": "user", "content": text}],
              "timeout": 600, "num_retries": 0, "max_retries": 0}
        kw["client"] = sdk_client(kw)
        with inline_setup(kw), (contextlib.nullcontext() if logged else unlogged()):
            return await litellm.acompletion(**kw)

    installed: list[bool] = []
    return _loop_cpu(call, seconds)


def bare_inline(up_url: str, model: str, seconds: float) -> dict:
    """``--bare inline``: litellm's call as the gateway makes it (``_gateway_call``)."""
    return _gateway_call(up_url, model, seconds, logged=False)


def bare_logged(up_url: str, model: str, seconds: float) -> dict:
    """``--bare logged``: the same, with litellm's own logging of each call left on."""
    return _gateway_call(up_url, model, seconds, logged=True)


def bare_sdk(up_url: str, model: str, seconds: float) -> dict:
    """``--bare sdk``: the same call through the openai SDK alone (what litellm itself
    calls for an OpenAI-wire deployment), its answer dumped as the gateway dumps litellm's."""
    import openai

    # retries: a keep-alive connection the fake upstream closed fails the SDK's next request
    # on it (litellm's aiohttp transport reconnects instead); rare, and CPU either way
    client = openai.AsyncOpenAI(base_url=up_url, api_key="sk-fake", max_retries=2, timeout=600)

    async def call(text: str) -> Any:
        resp = await client.chat.completions.create(
            model=model, max_tokens=256, messages=[{"role": "user", "content": text}])
        return resp.model_dump(exclude_none=True)

    return _loop_cpu(call, seconds)


BARE = {"bare": bare_litellm, "logged": bare_logged, "inline": bare_inline, "sdk": bare_sdk}


def run_bare(kind: str, up_url: str, model: str, seconds: float) -> dict:
    """A ``BARE`` loop in a process of its own (its CPU time is its own)."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.serving.forwarding_profile", "--bare", kind,
         "--url", up_url, "--model", model, "--duration", str(seconds)],
        capture_output=True, text=True, check=True,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}).stdout
    return json.loads(out.strip().splitlines()[-1])


def _shares(counts: Counter) -> dict[str, float]:
    """Component → share of the server's CPU time (GIL-held samples, the rest off the GIL)."""
    total = sum(v for k, v in counts.items() if not isinstance(k, tuple))
    return {k: v / total for k, v in counts.items() if not isinstance(k, tuple)}


def report(cpu: dict[str, list[float]], rps: dict[str, list[float]],
           shares: dict[str, Counter], a: argparse.Namespace) -> None:
    med = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"forwarding_profile: {a.rounds} interleaved rounds of {a.duration:g} s, wrk c={CONC}, "
          f"unique prompts, 1 worker, SQLite; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")
    print(f"{'target':<12} {'req/s':>6} {'CPU ms/req':>10}  (runs)")
    for k, xs in cpu.items():
        print(f"{k:<12} {statistics.median(rps[k]):>6.0f} {med[k]:>10.2f}  "
              f"({', '.join(f'{x:.2f}' for x in xs)})")
    for name, counts in shares.items():
        share = _shares(counts)
        meta = {k[1]: v for k, v in counts.items() if k[0] == "meta"}
        print(f"\n{name}: {meta['cpu_s']:.1f} CPU s over {meta['requests']:.0f} requests "
              f"profiled ({meta['cpu_s'] * 1000 / meta['requests']:.2f} ms/req under py-spy); "
              f"ms/req = share × {med[name]:.2f} (unprofiled median)")
        for k, v in sorted(share.items(), key=lambda kv: -kv[1]):
            print(f"  {k:<50} {100 * v:>5.1f}%  {v * med[name]:>6.2f} ms")
        print("  hottest Tollgate calls (innermost Tollgate function → what it calls):")
        total = sum(v for k, v in counts.items() if not isinstance(k, tuple))
        hot = sorted(((k[1], v) for k, v in counts.items() if k[0] == "hot"), key=lambda kv: -kv[1])
        for k, v in hot[:a.top]:
            print(f"    {100 * v / total:>5.1f}%  {k}")
    share = _shares(shares["passthrough"])
    ll = share.get("litellm", 0) + share.get("transport (openai/httpx/httpcore)", 0)
    tg = sum(v for k, v in share.items() if k.startswith(("tollgate", "sqlalchemy")))
    bare, proxy, sdk = med["bare"], med["litellm"], med["sdk"]
    print(f"\nlitellm_share={ll:.3f} tollgate_share={tg:.3f} "
          f"cpu_ms_per_request={med['passthrough']:.2f} "
          f"max_speedup_without_tollgate={1 / (1 - tg):.2f} bare_litellm_cpu_ms={bare:.2f} "
          f"proxy_cpu_ms={proxy:.2f} floor_vs_proxy={proxy / bare:.2f} "
          f"inline_litellm_cpu_ms={med['inline']:.2f} "
          f"logged_litellm_cpu_ms={med['logged']:.2f} bare_sdk_cpu_ms={sdk:.2f} "
          f"litellm_vs_sdk={bare / sdk:.2f}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per wrk run")
    ap.add_argument("--auto", action="store_true", help="also profile model=auto")
    ap.add_argument("--top", type=int, default=12, help="hot calls to list")
    ap.add_argument("--keep", default=None, help="folder to keep py-spy's raw profiles in")
    ap.add_argument("--bare", choices=sorted(BARE), default=None, help=argparse.SUPPRESS)
    ap.add_argument("--url", default="", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.bare:
        print(json.dumps(BARE[a.bare](a.url, a.model, a.duration)))
        return
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    wrk, spy = ensure_wrk(), ensure_py_spy()
    cpu: dict[str, list[float]] = {}
    rps: dict[str, list[float]] = {}
    shares: dict[str, Counter] = {}  # target → component → CPU s, summed over rounds
    with tempfile.TemporaryDirectory(prefix="tollgate-profile-") as tmpdir, ExitStack() as st:
        tmp = Path(tmpdir)
        (lua := tmp / "bench.lua").write_text(WRK_LUA)
        a.database_url, a.router_path, a.workers = None, None, 1
        targets = start_all(st, a, tmp)  # upstream, LiteLLM proxy, passthrough, auto
        up_url = targets[0].server.url + "/v1"
        targets = [t for t in targets[1:] if a.auto or t.name != "auto"]
        for t in targets:  # warm-up: connections, lazy imports, first-call caches
            run_wrk(wrk, lua, t, 4, False, 2)
        keep = Path(a.keep) if a.keep else tmp
        keep.mkdir(parents=True, exist_ok=True)
        for r in range(a.rounds):
            names = [t.name for t in targets] + list(BARE)
            k = r % len(names)
            for name in names[k:] + names[:k]:
                t = next((x for x in targets if x.name == name), None)
                if t is None:
                    res = run_bare(name, up_url, targets[0].model, a.duration)
                    ms = res["cpu_ms"]
                else:
                    ms, res = wrk_cpu(wrk, lua, t, a.duration)
                cpu.setdefault(name, []).append(ms)
                rps.setdefault(name, []).append(res["rps"])
                if t is not None and name != "litellm":
                    shares.setdefault(name, Counter()).update(profiled(
                        wrk, spy, lua, t, a.duration, keep / f"{name}_r{r}.txt"))
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    report(cpu, rps, shares, a)


if __name__ == "__main__":
    main()
