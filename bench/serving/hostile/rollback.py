"""An operator's rollback against the replicas' own publishers (issue 48 finding 2).

``rollback_undone``: two cold-start backends of the hostile pool (priced, not in the router's
artifact: each joins on a prior) get judged outcomes one after the other, so the replica
holding the refinement lease publishes two refined router versions, the second built on the
first. The operator then rolls back to the version before both with ``tollgate router
rollback``. The outcomes are still there, so on the rolled-back version a refinement of both
backends is due on every replica. For ``WATCH_S`` (four polls of each replica's loops) the
active version is read every 0.1 s; the figure is how many versions other than the operator's
were active in that time (target 0). Before the fix the lease holder, swapped back to a
version other than the one it last refined on, refined both backends again and activated the
result over the rollback, nothing logged (main df9195f printed ``rollback_undone=2``: both
refinements activated again within the 20 s; this branch 0, ``resumed_published=1``; the
red-team pass saw it 0.7-1.3 s after the swap, 2 of 2 tries).

``resumed_published``: then ``tollgate router resume``; 1 when, ``WATCH_S`` after it, the
active version is a refinement built on the version the operator left active (the loop was
held, not broken).

The outcomes are written as the exploration's shadow judge writes one (an ``observations``
row of source ``shadow`` on a prompt a replica served and stored): which backend the hostile
pool's ``auto`` picks is not this scenario's subject, and a shadow call needs the exploration
budget another issue sets the default of.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from bench.serving.hostile.common import engine_of
from bench.serving.replica_env import Env
from gateway.learning import router_versions
from gateway.learning import tables as ldb

# priced backends of the hostile pool the bench router does not know (each on a cold-start
# prior); the first two without any outcome yet are used (another scenario's feedback may
# have given some of them outcomes, and refined them, already)
CANDIDATES = ("echo", "pricey", "verbose", "quiet", "doc-reader", "miscount")
WATCH_S = 20.0  # four polls (poll_s 5, the default) of each replica's loops
OUTCOMES = 3


def _tollgate(*args: str, db_url: str) -> subprocess.CompletedProcess:
    """The operator's command line, on the bench's database."""
    exe = shutil.which("tollgate", path=str(Path(sys.executable).parent)) or "tollgate"
    return subprocess.run([exe, *args, "--database-url", db_url], check=False,
                          capture_output=True, text=True, timeout=120)


def _active(engine: sa.Engine) -> dict:
    return router_versions.active_version(engine) or {}


def _ask(env: Env, i: int, key: str, text: str) -> httpx.Response:
    r = httpx.post(env.replicas[i % len(env.replicas)].base_url + "/v1/chat/completions",
                   timeout=60, headers={"authorization": f"Bearer {key}"},
                   json={"model": "auto", "messages": [{"role": "user", "content": text}],
                         "max_tokens": 16})
    r.raise_for_status()
    return r


def _served_prompt(env: Env, engine: sa.Engine, key: str) -> str:
    """The prompt key of an ``auto`` request replica 0 served (stored after the answer)."""
    r = _ask(env, 0, key, f"Name a prime number above {uuid.uuid4().int % 1000}.")
    rid = r.headers.get("x-request-id") or r.json().get("id")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        row = ldb.get_served(engine, rid)
        if row is not None:
            return str(row["prompt_key"])
        time.sleep(0.1)
    raise RuntimeError(f"request {rid} was never recorded for learning")


def _judged(engine: sa.Engine, prompt_key: str, backend: str) -> None:
    for _ in range(OUTCOMES):
        ldb.add_observation(engine, key=prompt_key, model=backend, quality=1.0, cost_usd=None,
                            source="shadow")


def _watch(engine: sa.Engine, keep: str, seconds: float) -> set[str]:
    """Every version other than ``keep`` seen active in ``seconds``."""
    seen: set[str] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        version = _active(engine).get("version")
        if version and version != keep:
            seen.add(version)
        time.sleep(0.1)
    return seen


def _published(engine: sa.Engine, over: str, timeout_s: float = 60) -> str | None:
    """The next version activated over ``over`` (None after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while (version := _active(engine).get("version")) == over:
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)
    return version


def _descends(engine: sa.Engine, version: str, ancestor: str) -> bool:
    """Whether ``version`` is a later version built, parent by parent, on ``ancestor``."""
    parent = {r["version"]: r["parent"] for r in router_versions.history(engine)}
    seen: set[str] = set()
    while version in parent and version not in seen:
        seen.add(version)
        version = parent[version]
        if version == ancestor:
            return True
    return False


def rollback_scenario(env: Env) -> dict[str, Any]:
    engine = engine_of(env)
    try:
        key, _ = env.tenant()
        before = _active(engine)["version"]
        prompt_key = _served_prompt(env, engine, key)
        with engine.connect() as conn:
            seen = set(conn.execute(sa.select(ldb.observations_t.c.model).distinct()).scalars())
        cold = [b for b in CANDIDATES if b not in seen][:2]
        if len(cold) < 2:
            return {"rollback_undone": None, "error": "no two backends without outcomes"}
        last = before
        for backend in cold:  # each refinement built on the one before
            _judged(engine, prompt_key, backend)
            last = _published(engine, last)
            if last is None:
                return {"rollback_undone": None, "error": f"{backend} was never refined"}
        done = _tollgate("router", "rollback", before, db_url=env.db_url)
        if done.returncode != 0:
            return {"rollback_undone": None, "error": done.stderr.strip()[-300:]}
        undone = _watch(engine, before, WATCH_S)
        out: dict[str, Any] = {"rollback_undone": len(undone), "rolled_back": last,
                               "to": before, "published_over_it": sorted(undone)}
        resumed = _tollgate("router", "resume", db_url=env.db_url)
        if resumed.returncode != 0:  # a gateway without `router resume`
            out["resumed_published"] = None
            return out
        _watch(engine, before, WATCH_S)
        out["resumed_published"] = int(_descends(engine, _active(engine)["version"], before))
        return out
    finally:
        engine.dispose()
