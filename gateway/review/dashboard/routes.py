"""``/dashboard``: the review page, rendered and served by the gateway itself.

The page is static HTML (Jinja2) plus a vendored Chart.js (``static/``, MIT, from npm), so it
works with no internet; it fetches JSON from ``/dashboard/api/*``. Log in with the admin key
(every tenant, with a tenant picker) or a tenant's API key (only that tenant's requests,
spend and feedback). The key is posted from a form, never put in a URL, and never kept: the
login opens a server session whose signed id is an HttpOnly, SameSite=Strict cookie scoped to
``/dashboard`` (``access.py``); every call re-checks the session, so logout, a revoked key
or a disabled tenant loses the dashboard at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from gateway.auth import Principal
from gateway.context import GatewayContext
from gateway.errors import GatewayError, invalid
from gateway.review.dashboard import versions as versions_mod
from gateway.review.dashboard.access import (
    COOKIE,
    SESSION_TTL_S,
    dashboard_principal,
    login_session,
    session_principal,
)
from gateway.review.dashboard.guard import DashboardGuard
from gateway.review.dashboard.queries import (
    LogFilter,
    flat,
    parse_duration,
    select_logs,
    tenant_names,
)
from gateway.review.dashboard.spend_by import SpendScope, spend_by_key, spend_by_user
from gateway.review.dashboard.summary_job import job_for, run_job, shareable
from gateway.review.explain import Waits, load_explanation
from gateway.store.periods import utcnow

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
STATIC_TYPES = {".js": "text/javascript", ".css": "text/css", ".md": "text/markdown"}
WINDOWS = ("15m", "1h", "6h", "24h", "7d", "30d")
MAX_PAGE = 500  # rows in one page of the request table
MAX_OFFSET = 1_000_000_000  # beyond any log, and far inside a 64-bit OFFSET
DEFAULT_PORTS = {"http": 80, "https": 443}
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")


def _templates() -> Environment:
    return Environment(loader=FileSystemLoader(HERE / "templates"),
                       autoescape=select_autoescape(["html"]))


def _html(env: Environment, name: str, status: int = 200,
          headers: dict[str, str] | None = None, **values: Any) -> HTMLResponse:
    body = env.get_template(name).render(**values)
    return HTMLResponse(body, status_code=status, headers={
        "content-security-policy": CSP, "x-content-type-options": "nosniff",
        # same-origin, not no-referrer: under no-referrer a browser's own form POST carries
        # Origin: null, which the login's cross-origin check refuses (same_origin)
        "referrer-policy": "same-origin", "cache-control": "no-store", **(headers or {})})


def same_origin(request: Request) -> bool:
    """Whether a state-changing POST comes from a page of this gateway: its ``Origin`` (else
    ``Referer``) names the host of the request's ``Host`` header, and its port when ``Host``
    carries one. A request with neither header is not from a browser form and passes; a
    browser always sends ``Origin`` on a cross-origin POST (``null`` from sandboxed or
    privacy-stripped contexts, refused). The scheme is not compared: behind a TLS proxy that
    is not in ``forwarded_allow_ips`` the gateway sees http while the page is https."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if source is None:
        return True
    host = request.headers.get("host", "")
    try:
        src = urlsplit(source)
        own = urlsplit(f"//{host}")
        if not src.hostname or src.scheme not in DEFAULT_PORTS or not own.hostname:
            return False
        if src.hostname.lower() != own.hostname.lower():
            return False
        return own.port is None or (src.port or DEFAULT_PORTS[src.scheme]) == own.port
    except ValueError:  # a malformed port or address
        return False


def _scope(who: Principal, tenant: str | None) -> tuple[str, ...] | None:
    """The tenant ids this view covers: a tenant only ever its own; the admin all or one."""
    if not who.admin:
        return (who.tenant_id or "",)
    return (tenant,) if tenant else None


def _window(value: str | None) -> str:
    w = value or "24h"
    if w not in WINDOWS:
        raise invalid(f"window must be one of {', '.join(WINDOWS)}", param="window")
    return w


def build_router() -> APIRouter:
    """The page and its API; the API behind the app's dashboard rate limit and query slots
    (guard.py), set from its settings when the app starts."""
    api = _Api(DashboardGuard.in_process())

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        api.guard = app.state.dashboard_guard = DashboardGuard.from_settings(
            app.state.ctx.settings)
        try:
            yield
        finally:
            await api.guard.close()

    pages = _Pages(_templates())
    r = APIRouter(prefix="/dashboard", include_in_schema=False, lifespan=lifespan)
    for method, path, endpoint in (
        ("GET", "", pages.page), ("POST", "/login", pages.login), ("POST", "/logout", logout),
        ("GET", "/static/{name}", static), ("GET", "/api/summary", api.summary),
        ("GET", "/api/requests", api.requests), ("GET", "/api/explain/{request_id}",
                                                 api.explain),
        ("GET", "/api/routers", api.routers), ("GET", "/api/spend", api.spend), ("GET", "/plot/deferral.png", api.deferral),
    ):
        r.add_api_route(path, endpoint, methods=[method])
    return r


class _Pages:
    """The two HTML pages: the login form, and the dashboard once a key is in the cookie."""

    def __init__(self, env: Environment) -> None:
        self.env = env

    async def page(self, request: Request) -> Response:
        ctx: GatewayContext = request.app.state.ctx
        who = await session_principal(request)
        if who is None:
            return _html(self.env, "login.html")
        return _html(self.env, "dashboard.html", who=who, windows=WINDOWS,
                     router_version=ctx.pool.current.version)

    async def login(self, request: Request) -> Response:
        ctx: GatewayContext = request.app.state.ctx
        if not same_origin(request):  # a form on another site posting here (login CSRF)
            return _html(self.env, "login.html", status=403,
                         error="Log in from the dashboard's own page.")
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        key = (form.get("key") or [""])[0].strip()
        try:
            cookie = await login_session(ctx, request, key) if key else None
        except GatewayError as e:  # too many wrong keys from this address: 429, Retry-After
            return _html(self.env, "login.html", status=e.status, headers=e.headers,
                         error=e.message)
        if cookie is None:
            return _html(self.env, "login.html", status=401,
                         error="That key is not the admin key or a live tenant key.")
        resp = RedirectResponse("/dashboard", status_code=303)
        resp.set_cookie(COOKIE, cookie, httponly=True, samesite="strict", path="/dashboard",
                        secure=request.url.scheme == "https", max_age=SESSION_TTL_S)
        return resp


async def logout(request: Request) -> Response:
    """End the session server-side (a copied cookie dies with it), then drop the cookie."""
    ctx: GatewayContext = request.app.state.ctx
    if not same_origin(request):
        raise GatewayError(403, "Cross-origin request refused.", "permission_error",
                           code="cross_origin")
    cookie = request.cookies.get(COOKIE)
    if cookie:
        await ctx.store.close_session(cookie)
    resp = RedirectResponse("/dashboard", status_code=303)
    resp.delete_cookie(COOKIE, path="/dashboard")
    return resp


async def static(name: str) -> Response:
    path = (STATIC / name).resolve()
    if path.parent != STATIC or not path.is_file() or path.suffix not in STATIC_TYPES:
        return JSONResponse({"error": {"message": "not found", "type": "invalid_request_error",
                                       "param": None, "code": "not_found"}}, 404)
    return FileResponse(path, media_type=STATIC_TYPES[path.suffix],
                        headers={"cache-control": "public, max-age=3600"})


class _Api:
    """The JSON endpoints (and the curve image). Each counts against the caller's dashboard
    rate limit; the database reads run in the guard's query slots. They raise
    GatewayError; the app answers it as an OpenAI error body."""

    def __init__(self, guard: DashboardGuard) -> None:
        self.guard = guard
        self.waits = Waits()  # rows a key waits for at once (gateway/review/explain.py)

    async def _caller(self, request: Request) -> Principal:
        who = await dashboard_principal(request)
        await self.guard.admit(who)
        return who

    async def summary(self, request: Request, window: str | None = None,
                      tenant: str | None = None) -> Response:
        ctx: GatewayContext = request.app.state.ctx
        who = await self._caller(request)
        w = _window(window)
        now = utcnow()
        start = now - parse_duration(w)
        scope = _scope(who, tenant)
        job = job_for(ctx, scope, start, now)
        if shareable(ctx.store.engine):  # off this process's GIL (summary_job.py)
            data = await self.guard.shared(("summary", scope, w), run_job, job, apart=True)
        else:
            data = await self.guard.shared(("summary", scope, w), run_job, job,
                                           ctx.store.engine)
        return JSONResponse({"viewer": {"admin": who.admin, "label": who.label}, "window": w,
                             **data})

    async def requests(self, request: Request, window: str | None = None,
                       tenant: str | None = None, limit: int = 50, offset: int = 0,
                       route: str | None = None, model: str | None = None,
                       status: str | None = None, feedback: str | None = None) -> Response:
        """A page of the request log, newest first: ``offset`` rows skipped, ``limit`` shown
        (at most ``MAX_PAGE``); ``has_more`` says whether a next page exists."""
        ctx: GatewayContext = request.app.state.ctx
        who = await self._caller(request)
        start = utcnow() - parse_duration(_window(window))
        if not 0 <= offset <= MAX_OFFSET:
            raise invalid(f"offset must be between 0 and {MAX_OFFSET}", param="offset")
        limit = max(1, min(limit, MAX_PAGE))
        try:
            f = LogFilter(tenant_ids=_scope(who, tenant), since=start, route=route,
                          model=model, status=status, feedback=feedback, limit=limit + 1,
                          offset=offset)
            rows, names = await self.guard.run(_table_page, ctx.store.engine, f)
        except ValueError as e:
            raise invalid(str(e)) from e
        if not who.admin:
            names = {k: v for k, v in names.items() if k == who.tenant_id}
        return JSONResponse({"object": "list", "offset": offset, "limit": limit,
                             "has_more": len(rows) > limit,
                             "data": [flat(row, names) for row in rows[:limit]]})

    async def spend(self, request: Request, by: str = "key", window: str | None = None,
                    tenant: str | None = None) -> Response:
        """Per key or per developer: requests, the bill, the budget (spend_by.py); a tenant
        key sees its own key and its own user only."""
        ctx: GatewayContext = request.app.state.ctx
        who = await self._caller(request)
        if by not in ("key", "user"):
            raise invalid("by must be key or user", param="by")
        w = _window(window)
        scope = SpendScope(since=utcnow() - parse_duration(w), tenant_ids=_scope(who, tenant),
                           key_id=None if who.admin else (who.key_id or ""),
                           user_id=None if who.admin else (who.user_id or ""))
        if by == "key":
            data = await self.guard.run(spend_by_key, ctx.store.engine, scope)
        else:
            data = await self.guard.run(spend_by_user, ctx.store.engine, scope)
        return JSONResponse({"object": "list", "by": by, "window": w,
                             "billed_is": "the settled cost on the log rows (the bill)",
                             "data": data})

    async def explain(self, request_id: str, request: Request) -> Response:
        ctx: GatewayContext = request.app.state.ctx
        who = await self._caller(request)
        return JSONResponse(await load_explanation(ctx, who, request_id, self.waits))

    async def routers(self, request: Request) -> Response:
        ctx: GatewayContext = request.app.state.ctx
        who = await self._caller(request)
        live = ctx.pool.current.version
        data = await self.guard.run(
            versions_mod.list_versions, ctx.store.engine, live, _live_metrics(ctx),
            None if who.admin else who.tenant_id)
        return JSONResponse({"object": "list", "live": live, "data": data})

    async def deferral(self, request: Request, version: str) -> Response:
        ctx: GatewayContext = request.app.state.ctx
        await self._caller(request)
        metrics = await self.guard.run(versions_mod.version_metrics, ctx.store.engine, version)
        png = None if metrics is None else await self.guard.run(
            versions_mod.deferral_png, version, metrics)
        if png is None:
            raise GatewayError(404, f"no stored evaluation curve for router {version!r}",
                               code="not_found", param="version")
        return Response(png, media_type="image/png", headers={"cache-control": "no-store"})


def _table_page(engine: Any, f: LogFilter) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The table's rows without the logged prompt (the table never shows it), and the
    tenants' names."""
    return select_logs(engine, f, skip=("prompt_text",)), tenant_names(engine)


def _live_metrics(ctx: GatewayContext) -> dict[str, Any] | None:
    """The live artifact's own training metrics (router.json), when it is on disk."""
    from router_core.artifact import DEFAULT_ROUTER_DIR, load_meta

    path = Path(ctx.settings.router_path) if ctx.settings.router_path else DEFAULT_ROUTER_DIR
    try:
        meta = load_meta(path)
    except (OSError, ValueError):
        return None
    if meta.get("version") != ctx.pool.current.version:
        return None
    return meta.get("metrics")
