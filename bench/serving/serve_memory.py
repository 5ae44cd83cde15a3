"""Where a serving worker's memory goes: RSS by import, then by serving, for one encoder.

A fresh interpreter imports what ``tollgate serve`` loads, one group at a time in the order
a worker loads them, and records its RSS (VmRSS) after each group; a group's share counts
the dependencies it is the first to import. Then it builds the app (router, encoder, store),
serves real HTTP in that process (the fake upstream runs in its own process) and sends
``--requests`` ``auto``, passthrough and streamed passthrough requests, with litellm's own
token counting off as ``tollgate serve`` runs it (gateway/cli/serve.py). The SQLite database
is upgraded first by another process, as ``serve --workers N``'s parent does for its
workers. It prints the table, the modules that must not load when serving (torch,
transformers, pandas, scikit-learn, ...) if any did, the tokenizers loaded (none unless a
request needed a count), and last one line
``rss_mb=… litellm_mb=… heavy_loaded=… tokenizers=…``.

    python -m bench.serving.serve_memory [--encoder minilm-onnx-int8] [--requests 50]

The encoder defaults to the packaged router's own; ``--encoder`` serves a copy of it
recording another kind of the same vectors (as ``python -m bench.serving.overhead --encoder``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# in the order a worker loads them (gateway.app's imports, then the encoder at startup)
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("numpy", ("numpy",)),
    ("sqlalchemy", ("sqlalchemy", "sqlalchemy.orm")),
    ("fastapi, starlette, uvicorn", ("fastapi", "uvicorn")),
    ("openai SDK", ("openai",)),
    ("litellm", ("litellm",)),
    ("prometheus-client", ("prometheus_client",)),
    ("gateway (the rest of gateway.app)", ("gateway.app",)),
)
# what serving with a non-torch encoder has no use for
HEAVY = ("torch", "transformers", "sentence_transformers", "sklearn", "pandas", "scipy",
         "model2vec", "pyarrow", "matplotlib", "faiss", "alembic")

CHILD = r"""
import importlib, json, sys, time
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
args = json.loads(sys.argv[1])
rows = [("python", rss(), len(sys.modules))]
for label, modules in args["groups"]:
    for m in modules:
        importlib.import_module(m)
    rows.append((label, rss(), len(sys.modules)))

import httpx, openai
from gateway.app import create_app
from gateway.config import settings_from_dict
from gateway.sandbox.local_server import serve_in_thread
from router_core.artifact import load_router

from gateway.cli.serve import no_litellm_token_counting
no_litellm_token_counting()  # as `tollgate serve` does
router = load_router(args["router"])
app = create_app(settings_from_dict(args["config"], source="bench"), router=router)
rows.append(("app built (router, store)", rss(), len(sys.modules)))
# the lifespan's warm-ups, one at a time (serving's startup repeats them at no cost)
import asyncio
from router_core.env.litellm_env import litellm
ctx = app.state.ctx
ctx.encoder.encode(["warm up the encoder"])
rows.append(("encoder loaded and warm", rss(), len(sys.modules)))
asyncio.run(litellm.acompletion(model=ctx.settings.model_list[0].litellm_model,
                                messages=[{"role": "user", "content": "warm up"}],
                                mock_response="ok"))
rows.append(("litellm's first completion (mock)", rss(), len(sys.modules)))
with serve_in_thread(app) as url:
    rows.append(("serving (store, log writer, learning loop)", rss(), len(sys.modules)))
    admin = {"authorization": "Bearer " + args["config"]["admin_key"]}
    key = httpx.post(url + "/admin/tenants", json={"name": "mem"}, headers=admin,
                     timeout=60).json()["api_key"]
    client = openai.OpenAI(base_url=url + "/v1", api_key=key)
    versions = set()
    for i in range(args["requests"]):
        raw = client.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": f"Request {i}: why is the sky blue?"}])
        versions.add(raw.headers.get("x-tollgate-router-version"))
        client.chat.completions.create(
            model=args["passthrough"], messages=[{"role": "user", "content": f"Say {i}."}])
        for _ in client.chat.completions.create(
                model=args["passthrough"], stream=True, stream_options={"include_usage": True},
                messages=[{"role": "user", "content": f"Stream {i}."}]):
            pass
    time.sleep(1.0)  # the log writer's batch
    rows.append((f"after {args['requests']} auto + {2 * args['requests']} passthrough", rss(),
                 len(sys.modules)))
import tiktoken.registry
from litellm.rust_bridge import tokenizer as native
tokenizers = sorted(tiktoken.registry.ENCODINGS) + [
    f"native {k}" for k in ("_native_tiktoken", "_native_anthropic")
    if getattr(getattr(native, k, None), "cache_info", lambda: None)() is not None
    and getattr(native, k).cache_info().currsize]
print("RESULT " + json.dumps({
    "rows": rows,
    "encoder": dict(router.config.get("encoder") or {}).get("kind", "minilm"),
    "router_versions": sorted(v or "" for v in versions),
    "heavy_loaded": sorted(m for m in args["heavy"] if m in sys.modules),
    "tokenizers": tokenizers,
}))
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--encoder", default=None,
                    help="serve the packaged router with this encoder kind of its vectors")
    ap.add_argument("--router", default=None, help="router artifact (default: the packaged)")
    ap.add_argument("--requests", type=int, default=50)
    a = ap.parse_args(argv)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from bench.serving.servers import (
        passthrough_backend,
        served_router,
        started,
        tollgate_config,
        upstream_argv,
    )
    from gateway.config import DEFAULT_CONFIG_PATH, load_settings
    from gateway.sandbox.local_server import free_port

    names = [b.model_name for b in load_settings(DEFAULT_CONFIG_PATH).model_list]
    with tempfile.TemporaryDirectory(prefix="tollgate-mem-") as tmpdir:
        tmp = Path(tmpdir)
        router_path = a.router or served_router(tmp, a.encoder)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with started("upstream", upstream_argv(port, names), url, "/v1/models",
                     tmp / "upstream.log"):
            db_url = f"sqlite:///{tmp / 'tollgate.db'}"
            migrate = "import sys; from gateway.store.migrate import upgrade; upgrade(sys.argv[1])"
            subprocess.run([sys.executable, "-c", migrate, db_url], check=True)
            config = tollgate_config(url + "/v1", db_url, "mem-admin-key", tmp, router_path)
            payload = {"groups": GROUPS, "router": router_path, "config": config,
                       "requests": a.requests, "passthrough": passthrough_backend(),
                       "heavy": HEAVY}
            env = {"HF_HUB_OFFLINE": "1",  # as the image runs: no hub retries for tokenizers
                   **os.environ}
            done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(payload)],
                                  capture_output=True, text=True, env=env, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"the serving process failed:\n{done.stderr[-4000:]}")
    res = json.loads(line.removeprefix("RESULT "))
    print(f"serving memory: encoder {res['encoder']}, one worker, SQLite, RSS (VmRSS) after "
          f"each step; router versions seen: {', '.join(res['router_versions'])}")
    print(f"{'step':<44} {'RSS MB':>8} {'+MB':>7} {'modules':>8}")
    prev = 0.0
    for label, rss, n in res["rows"]:
        print(f"{label:<44} {rss:>8.1f} {rss - prev:>+7.1f} {n:>8}")
        prev = rss
    heavy = res["heavy_loaded"]
    print("modules serving does not need, loaded: " + (", ".join(heavy) or "none"))
    print("tokenizers loaded: " + (", ".join(res["tokenizers"]) or "none"))
    rows = {label: rss for label, rss, _ in res["rows"]}
    labels = [label for label, _, _ in res["rows"]]
    litellm_mb = rows["litellm"] - rows[labels[labels.index("litellm") - 1]]
    print(f"rss_mb={res['rows'][-1][1]:.0f} litellm_mb={litellm_mb:.0f} "
          f"heavy_loaded={','.join(heavy) or 'none'} "
          f"tokenizers={','.join(t.replace(' ', '_') for t in res['tokenizers']) or 'none'}")


if __name__ == "__main__":
    main()
