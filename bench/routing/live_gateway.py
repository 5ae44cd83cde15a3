"""`tollgate serve` as a user runs it, on a config whose backends answer from 127.0.0.1.

Shared by the live promise benches (live_routes.py, wrong_prior_loop.py): a config's backends
rewritten to reach a local OpenAI-compatible upstream with their prices kept (each backend's
price as ``gateway.pricing.resolve_prices`` reads it from the original config, written into
``model_info``, and ``base_model`` set to the model it was, so the router recognises it as
before), the gateway started as a subprocess, a tenant made through the admin API, and what a
request's explanation (``GET /v1/routing/{id}``) says about the route's reference.
"""

from __future__ import annotations

import re
import secrets
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.serving.servers import Server, started

LOCAL_KEY = "sk-local-upstream"


def upstream_name(model_name: str) -> str:
    """The name a backend is served under on the local upstream (its model_name)."""
    return model_name


def local_model_list(raw: Mapping[str, Any], prices: Mapping[str, Any], upstream_url: str
                     ) -> list[dict]:
    """``raw``'s model_list with every deployment on the local upstream, prices kept."""
    out = []
    for entry in raw.get("model_list") or []:
        name = entry["model_name"]
        params = dict(entry.get("litellm_params") or {})
        info = {k: v for k, v in dict(entry.get("model_info") or {}).items()
                if not k.startswith(("input_cost_per", "output_cost_per"))}
        info.setdefault("base_model", params.get("model") or name)
        price = prices.get(name)
        if price is not None:
            info.update(input_cost_per_token=price.input_per_token,
                        output_cost_per_token=price.output_per_token)
        out.append({"model_name": name,
                    "litellm_params": {"model": f"openai/{upstream_name(name)}",
                                       "api_base": upstream_url, "api_key": LOCAL_KEY},
                    "model_info": info})
    return out


def local_config(path: Path, upstream_url: str, tmp: Path, admin_key: str) -> dict:
    """The config at ``path`` on the local upstream: its own routes (or none), a temporary
    SQLite file, the bench's admin key; LiteLLM's other sections are kept as they are."""
    from gateway.config import load_settings
    from gateway.pricing import resolve_prices

    raw = yaml.safe_load(Path(path).read_text()) or {}
    prices = resolve_prices(load_settings(path), strict=False)
    general = {k: v for k, v in dict(raw.get("general_settings") or {}).items()
               if k not in ("master_key", "database_url")}
    out = {k: v for k, v in raw.items() if k not in ("model_list", "general_settings")}
    if general:
        out["general_settings"] = general
    out.update(model_list=local_model_list(raw, prices, upstream_url),
               database_url=f"sqlite:///{tmp / 'tollgate.db'}", admin_key=admin_key,
               reliability={**dict(raw.get("reliability") or {}),
                            "spool_dir": str(tmp / "spool")})
    return out


@contextmanager
def tollgate_serve(config: dict, tmp: Path, name: str = "tollgate") -> Iterator[Server]:
    """``tollgate serve`` on ``config`` (one worker), until the block ends."""
    from gateway.sandbox.local_server import free_port

    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    argv = [sys.executable, "-c", "from gateway.cli import main; main()", "serve", "--config",
            str(path), "--port", str(port), "--log-level", "warning", "--workers", "1"]
    with started(name, argv, f"http://127.0.0.1:{port}", "/ready", tmp / f"{name}.log",
                 env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"}) as server:
        yield server


def tenant_key(url: str, admin_key: str, name: str = "bench") -> str:
    """A tenant without a budget, made with the admin API: its API key."""
    r = httpx.post(f"{url}/admin/tenants", json={"name": name},
                   headers={"authorization": f"Bearer {admin_key}"}, timeout=60)
    r.raise_for_status()
    return r.json()["api_key"]


def admin_key() -> str:
    return "bench-admin-" + secrets.token_hex(8)


# ------------------------------------------------------------------ reading an explanation

_PROMISED = re.compile(r"promise: within [0-9.eE+-]+ of (.+?) \(")


def reference_of(expl: Mapping[str, Any]) -> str | None:
    """The backend the route promised against, as the explanation names it (a reference
    record anywhere in it, else the reason line ``promise: within D of NAME (...)``)."""
    found = _reference_record(expl)
    if found is not None and found.get("backend"):
        return str(found["backend"])
    m = _PROMISED.search(str((expl.get("decision") or {}).get("reason") or ""))
    return m.group(1) if m else None


def _reference_record(node: Any) -> Mapping[str, Any] | None:
    """The first ``reference`` mapping in the document (depth first)."""
    if isinstance(node, Mapping):
        ref = node.get("reference")
        if isinstance(ref, Mapping):
            return ref
        children = node.values()
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        found = _reference_record(child)
        if found is not None:
            return found
    return None


def explanation(http: httpx.Client, request_id: str, tries: int = 30) -> dict:
    """GET /v1/routing/{id}, as a client should: a 429 (a key has at most
    ``WAITS_PER_KEY`` lookups in flight, gateway/review/explain.py) is retried after its
    ``retry-after``."""
    for _ in range(tries):
        doc = http.get(f"/v1/routing/{request_id}")
        if doc.status_code != 429:
            doc.raise_for_status()
            return doc.json()
        time.sleep(float(doc.headers.get("retry-after") or 1.0))
    doc.raise_for_status()
    return doc.json()


def candidate_p(expl: Mapping[str, Any], backend: str) -> float | None:
    """p̂ of ``backend`` on this request: its candidate entry, else a reference record."""
    for c in (expl.get("decision") or {}).get("candidates") or []:
        if c.get("backend") == backend and c.get("quality") is not None:
            return float(c["quality"])
    ref = _reference_record(expl)
    if ref is not None and ref.get("backend") == backend:
        p = ref.get("p", ref.get("quality"))
        return None if p is None else float(p)
    return None


def strongest_candidate(expl: Mapping[str, Any]) -> str | None:
    """The candidate with the highest p̂ (what a route without a promise is compared with)."""
    cands = [c for c in (expl.get("decision") or {}).get("candidates") or []
             if c.get("quality") is not None]
    return max(cands, key=lambda c: float(c["quality"]))["backend"] if cands else None
