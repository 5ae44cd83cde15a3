"""How `tollgate serve` logs: one format for every logger, text or JSON, litellm once.

- Every line goes through the root logger's one handler (stderr), so nothing prints twice:
  litellm attaches its own handlers to its loggers *and* propagates to the root; those
  handlers are removed.
- litellm, httpx and httpcore log at WARNING unless ``--log-level debug``: an upstream call
  is then no longer four lines, and the gateway's access line (``tollgate.access``) says
  what happened. uvicorn's own access line is off for the same reason. Startup chatter of
  alembic, faiss and sentence-transformers is at WARNING too: the startup block says it.
- With ``--workers N``, a warning the parent printed while starting (an optional callback
  left out, ...) is not printed again by each worker: once per process group
  (``StartupWarnings``, ``drop_parent_warnings``).
- ``--log-format json``: one JSON object per line (ts, level, logger, message, and the
  access line's fields under their own names) for a log pipeline.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime
from typing import Any

QUIET_BY_DEFAULT = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm", "httpx",
                    "httpcore", "openai", "alembic", "faiss", "sentence_transformers")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class CustomPricingNotice(logging.Filter):
    """Drops litellm's notice, once per backend priced in config.yaml, that cache-token
    prices default to 0: Tollgate never charges cache tokens, so it says nothing useful."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "has custom pricing but not in built-in cost map" not in record.getMessage()


PARENT_WARNINGS_ENV = "TOLLGATE_PARENT_WARNINGS"


class StartupWarnings(logging.Handler):
    """Collects the warnings a `tollgate serve` parent logs while it starts, for its workers
    (``export``): a worker builds the same app and would repeat each of them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def export(self) -> None:
        """Hand the messages to the worker processes about to start (they inherit it)."""
        logging.getLogger().removeHandler(self)
        os.environ[PARENT_WARNINGS_ENV] = json.dumps(self.messages[-200:])


def collect_startup_warnings() -> StartupWarnings:
    handler = StartupWarnings()
    logging.getLogger().addHandler(handler)
    return handler


class ParentWarnings(logging.Filter):
    """In a worker: drops the first occurrence of each warning its parent already printed."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__()
        self.pending = set(messages)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not self.pending:
            return True
        message = record.getMessage()
        if message in self.pending:
            self.pending.discard(message)
            return False
        return True


def drop_parent_warnings() -> None:
    """Install ``ParentWarnings`` on the root handler of a worker process."""
    try:
        messages = json.loads(os.environ.get(PARENT_WARNINGS_ENV, "[]"))
    except ValueError:
        return
    if isinstance(messages, list) and messages:
        for handler in logging.getLogger().handlers:
            handler.addFilter(ParentWarnings([str(m) for m in messages]))


class JsonFormatter(logging.Formatter):
    """A record as one JSON line; ``extra={"fields": {...}}`` adds structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(level: str = "info", fmt: str = "text") -> None:
    """Set up the root logger once for the process (idempotent)."""
    # import litellm first: its import attaches the handlers removed below
    from gateway.provider import litellm_maps

    litellm_maps.loaded()

    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper())
    library_level = logging.DEBUG if level == "debug" else logging.WARNING
    for name in QUIET_BY_DEFAULT:
        lib = logging.getLogger(name)
        for h in list(lib.handlers):
            lib.removeHandler(h)
        lib.setLevel(library_level)
        lib.propagate = True
    notice = CustomPricingNotice()
    for name in ("LiteLLM", "litellm"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, CustomPricingNotice) for f in logger.filters):
            logger.addFilter(notice)
