"""Graceful shutdown: on SIGTERM (or SIGINT) stop accepting, finish in-flight requests within a
bound, then flush the request log.

The sequence, on uvicorn's own machinery:
1. the signal marks the gateway not ready (``/ready`` answers 503, so a load balancer stops
   sending) and uvicorn closes its listening sockets: new connections are refused;
2. requests in flight (streams included) run to completion for up to ``grace_s`` seconds
   (``timeout_graceful_shutdown``); idle keep-alive connections are closed;
3. after ``grace_s`` the remaining request tasks are cancelled; the handler settles each
   one's reservation with what was used and queues its log row even then
   (``gateway.serving.chat.handler``: a cancelled request's outcome still finishes);
4. the lifespan ends: the store finishes settlements, the log writer flushes its queue, and
   rows the database cannot take now go to the local spool (``gateway.reliability.spool``), replayed by
   the next replica that finds the database up. No accepted request loses its log row.

``run(app, ...)`` is what ``tollgate serve`` uses.
"""

from __future__ import annotations

import contextlib
import logging
from types import FrameType
from typing import TYPE_CHECKING, Any

import uvicorn

from gateway.reliability import edge

if TYPE_CHECKING:
    from gateway.config import Settings
    from gateway.context import GatewayContext

log = logging.getLogger(__name__)


class GracefulServer(uvicorn.Server):
    """uvicorn.Server that marks the app not ready as soon as an exit signal arrives."""

    def __init__(self, config: uvicorn.Config, app: Any) -> None:
        super().__init__(config)
        self._app = app

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        ctx = _context(self._app)
        if ctx is not None and ctx.ready:
            ctx.ready = False
            log.info("signal %s: draining (not ready), finishing requests in flight", sig)
        super().handle_exit(sig, frame)


def _context(app: Any) -> GatewayContext | None:
    """A Tollgate app's context; None for another ASGI app (``app.state`` is Starlette's
    free-form namespace)."""
    return getattr(getattr(app, "state", None), "ctx", None)


def server(app: Any, host: str = "127.0.0.1", port: int = 4000, grace_s: float | None = None,
           forwarded_allow_ips: list[str] | None = None, **config: Any) -> GracefulServer:
    """A uvicorn server for ``app`` with the graceful-shutdown bound and the edge
    (``gateway.reliability.edge``: trusted proxies, head size and deadline) from its
    settings; ``forwarded_allow_ips`` replaces the settings' list when given."""
    ctx = _context(app)
    reliability = ctx.settings.reliability.resolved() if ctx is not None else None
    if grace_s is None:
        grace_s = reliability.shutdown_grace_s if reliability is not None else 30.0
    config.setdefault("log_level", "info")
    for name, value in edge.uvicorn_options(reliability, forwarded_allow_ips).items():
        config.setdefault(name, value)
    cfg = uvicorn.Config(app, host=host, port=port, lifespan="on",
                         timeout_graceful_shutdown=grace_s, **config)
    return GracefulServer(edge.configure(cfg, reliability), app)


def run(app: Any, host: str = "127.0.0.1", port: int = 4000, grace_s: float | None = None,
        forwarded_allow_ips: list[str] | None = None, **config: Any) -> None:
    """Serve until SIGTERM/SIGINT, then shut down as the module docstring describes."""
    server(app, host, port, grace_s, forwarded_allow_ips, **config).run()


def run_workers(app_factory: str, settings: Settings, host: str, port: int, workers: int,
                forwarded_allow_ips: list[str] | None = None, **config: Any) -> None:
    """``workers`` processes behind one port, each serving ``app_factory()`` (an import string
    "module:function"); uvicorn's supervisor restarts a worker that dies.

    The schema is upgraded once here, before the workers start, so that N stores do not race
    to migrate a new SQLite file (PostgreSQL's advisory lock would serialise them anyway).
    Steps 2-4 above hold in every worker; step 1's early "not ready" is uvicorn's own there
    (the listening socket closes first).
    """
    from sqlalchemy.exc import OperationalError
    from uvicorn.supervisors import Multiprocess

    from gateway.store import migrate

    try:
        migrate.upgrade(settings.database_url)
    except OperationalError:  # unreachable or not created: the workers start anyway, each
        pass  # store says why in one line and upgrades once the database answers
    reliability = settings.reliability.resolved()
    config.setdefault("log_level", "info")
    for name, value in edge.uvicorn_options(reliability, forwarded_allow_ips).items():
        config.setdefault(name, value)
    # uvicorn.run(workers=N) with the edge's limits on the Config it pickles to each worker
    cfg = edge.configure(uvicorn.Config(
        app_factory, factory=True, host=host, port=port, workers=workers, lifespan="on",
        timeout_graceful_shutdown=reliability.shutdown_grace_s, **config), reliability)
    with contextlib.suppress(KeyboardInterrupt):
        Multiprocess(cfg, sockets=[cfg.bind_socket()]).run()
