"""Which component a py-spy sample of Tollgate's server is charged to (by its frames' modules).

bench/serving/forwarding_profile.py's docstring says the rules; here they are in code, with the table
mapping Tollgate's modules (and a few functions) to the steps of a request.
"""

from __future__ import annotations

from pathlib import Path

TRANSPORT = ("/openai/", "/httpx/", "/httpcore/", "/h11/", "/anyio/", "/ssl.py", "/socket.py")
SERVER = ("/uvicorn/protocols/", "/uvicorn/middleware/", "/starlette/", "/fastapi/", "/pydantic/",
          "/pydantic_core/", "/h11/")  # uvicorn's Server.run alone is the event loop
SQL = ("/sqlalchemy/", "/sqlite3/")
# Tollgate's steps: (path fragment, function names or None for any, step); first match wins;
# step None: a pass-through frame, charged to the step calling it.
STEPS = (
    ("gateway/context.py", {"call"}, None), ("gateway/store/store.py", {"_run"}, None),
    ("gateway/store/store.py", {"reserve", "settle"}, "budget"),
    ("gateway/store/budget_book.py", None, "budget"),
    ("gateway/reliability/outage.py", {"reserve", "settle"}, "budget"),
    ("gateway/store/periods.py", None, "budget"), ("gateway/store/records.py", None, "budget"),
    ("gateway/store/store.py", {"authenticate", "_lookup", "cached_tenant"}, "auth"),
    ("gateway/serving/record/outcome.py", {"finish", "_count"}, "log"),
    ("gateway/serving/record/log_row.py", None, "log"),
    ("gateway/serving/record/outcome.py", None, "forward"),
    ("gateway/serving/forwarding/attempts.py", None, "forward"),
    ("gateway/serving/budget/budget_hold.py", None, "budget"),
    ("gateway/store/ledger.py", None, "budget"),
    ("gateway/auth.py", None, "auth"), ("gateway/store/keys.py", None, "auth"),
    ("gateway/reliability/ratelimit.py", None, "auth"), ("gateway/reliability/guards.py", None, "auth"),
    ("gateway/store/", None, "log"), ("gateway/serving/record/access_log.py", None, "log"),
    ("gateway/review/", None, "log"), ("gateway/reliability/spool.py", None, "log"),
    ("gateway/provider/litellm_transport.py", None, "forward"),
    ("gateway/provider/transport.py", None, "forward"),
    ("gateway/provider/deployments.py", None, "forward"),
    ("gateway/provider/open_stream.py", None, "forward"),
    ("gateway/provider/litellm_errors.py", None, "forward"),
    ("gateway/serving/forwarding/deployments.py", None, "forward"),
    ("gateway/serving/forwarding/answer.py", None, "forward"),
    ("gateway/serving/response_headers.py", None, "forward"),
    ("gateway/serving/", None, "plan"), ("gateway/pool/", None, "plan"),
    ("gateway/pricing.py", None, "plan"),
    ("router_core/", None, "plan"),
)


RUNNERS = ("gateway/reliability/shutdown.py", "gateway/cli/")  # they hold the event loop


def _frame(raw: str) -> tuple[str, str]:
    """py-spy's ``function (path:line)`` as (function, path)."""
    fn, _, rest = raw.partition(" (")
    return fn, rest.rsplit(":", 1)[0]


def _step(fn: str, path: str) -> str | None:
    if not ("/gateway/" in path or "/router_core/" in path) or any(r in path for r in RUNNERS):
        return None
    method = fn.rsplit(".", 1)[-1]  # py-spy names methods Class.name
    for frag, names, step in STEPS:
        if frag in path and (names is None or method in names):
            return step
    return "other"


def categorise(stack: list[str]) -> str:
    """The component a sample (frames root → leaf) is charged to (module docstring)."""
    frames = [_frame(f) for f in stack]
    if _forwarding(frames):
        leaf = frames[-1][1]
        return "transport (openai/httpx/httpcore)" if any(t in leaf for t in TRANSPORT) else "litellm"
    at = [i for i, (fn, p) in enumerate(frames) if _step(fn, p)]
    step = _step(*frames[at[-1]]) if at else "other"
    if any(any(s in p for s in SQL) for _, p in frames):
        return f"sqlalchemy+sqlite [{step}]"
    if at and not any(any(s in p for s in SERVER[:4]) for _, p in frames[at[-1] + 1:]):
        return f"tollgate: {step}"  # not a middleware passing the request on to starlette
    if any(any(s in p for s in SERVER) for _, p in frames):
        return "server (uvicorn/starlette/fastapi/pydantic)"
    return "asyncio/other"


def _forwarding(frames: list[tuple[str, str]]) -> bool:
    """Inside ``litellm.acompletion``, or litellm code no Tollgate frame called (its
    ``completion`` runs in an executor thread, its logging in tasks of its own)."""
    if any(fn == "acompletion" and "/litellm/" in p for fn, p in frames):
        return True
    for fn, p in frames:
        if "/litellm/" in p:
            return True
        if _step(fn, p) is not None:
            return False
    return False


def hot_call(stack: list[str], category: str) -> str | None:
    """'innermost Tollgate function → the function it calls' of a sample charged to Tollgate."""
    frames = [_frame(f) for f in stack]
    idx = [i for i, (fn, p) in enumerate(frames) if _step(fn, p)]
    if not idx or not category.startswith(("tollgate", "sqlalchemy")):
        return None
    (fn, p), inner = frames[idx[-1]], frames[idx[-1] + 1:idx[-1] + 2]
    lib = "".join(f" → {f} ({q.split('site-packages/')[-1]})" for f, q in inner)
    return f"{Path(p).parent.name}/{Path(p).name}:{fn}{lib}"


def read_samples(path: Path) -> list[tuple[list[str], int]]:
    """py-spy's raw output: ``frame;frame;... count`` a line, root first."""
    lines = (line.rpartition(" ") for line in path.read_text().splitlines())
    return [(stack.split(";"), int(n)) for stack, _, n in lines if stack]
