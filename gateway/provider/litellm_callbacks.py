"""LiteLLM's logging callbacks (``litellm_settings.success_callback`` / ``failure_callback`` /
``callbacks``), handed to litellm as LiteLLM Proxy does, so Langfuse, OpenTelemetry, a
``CustomLogger`` ... see every upstream call the gateway makes through litellm.

A value is either a name litellm knows (``langfuse``, ``otel``, ``datadog``, ...: litellm
builds the integration on first use, from its package the user installs and its environment
variables), or, when it has a dot, LiteLLM Proxy's ``module.attribute`` reference to an object
(e.g. ``custom_callbacks.proxy_handler_instance``, a ``litellm.integrations.custom_logger.
CustomLogger`` instance), imported with the config file's directory on the import path.

``resolve`` happens while the app is built (an import that fails is a config error naming the
key); ``install`` when it starts serving, and its undo when it stops, restores litellm's
callback lists as they were (litellm moves ``callbacks`` into its own async lists on use).
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
from collections.abc import Callable
from typing import Any

from gateway.config import ConfigError, Settings
from router_core.env.litellm_env import litellm

log = logging.getLogger(__name__)

KEYS = ("success_callback", "failure_callback", "callbacks")
# every list litellm keeps callbacks in (it copies ``callbacks`` into the async ones on use)
LITELLM_LISTS = ("success_callback", "failure_callback", "callbacks", "input_callback",
                 "service_callback", "_async_success_callback", "_async_failure_callback",
                 "_async_input_callback")


def resolve(settings: Settings) -> dict[str, list[Any]]:
    """key -> the values to give litellm: names as they are, ``module.attr`` imported. A name
    litellm cannot set up here (its package is not installed: litellm would then fail every
    call) is left out with a warning; the startup block names it (``describe``)."""
    out: dict[str, list[Any]] = {}
    for key, values in settings.litellm_callbacks.items():
        out[key] = []
        for v in values:
            problem = unusable(v) if isinstance(v, str) and _known_name(v) else None
            if problem is not None:
                log.warning("litellm_settings.%s: %r left out: %s", key, v, problem)
                continue
            out[key].append(_resolve_one(v, f"litellm_settings.{key}", settings.config_dir))
    return out


@functools.lru_cache(maxsize=64)
def unusable(name: str) -> str | None:
    """Why litellm cannot set up callback ``name`` in this environment (None: it can). Tried
    once on its own, litellm's callback lists restored after. A litellm release without the
    internals it is tried with (gateway/provider/litellm_compat.py): handed to litellm unchecked."""
    try:
        from litellm.litellm_core_utils import litellm_logging
    except ImportError:
        return None
    if not hasattr(litellm_logging, "set_callbacks"):
        return None

    saved = {n: list(getattr(litellm, n)) for n in (*LITELLM_LISTS, "_in_memory_loggers")
             if isinstance(getattr(litellm, n, None), list)}
    quiet = logging.getLogger("LiteLLM")
    level, quiet.level = quiet.level, logging.CRITICAL  # its traceback of the probe
    try:
        if name in (getattr(litellm, "_known_custom_logger_compatible_callbacks", ()) or ()):
            made = litellm_logging._init_custom_logger_compatible_class(
                name, internal_usage_cache=None, llm_router=None)
            if made is None:  # litellm logged why and went on; every call would repeat it
                return "litellm could not build it (is its package installed?)"
        litellm_logging.set_callbacks(callback_list=[name])  # success/failure_callback's way
    except Exception as e:  # noqa: BLE001 - a missing package, a missing key, ...
        text = " ".join(str(e).replace("\x1b[91m", "").replace("\x1b[0m", "").split())
        return f"{type(e).__name__}: {text[:200]}"
    finally:
        quiet.level = level
        for n, values in saved.items():
            setattr(litellm, n, values)
    return None


def _known_name(value: str) -> bool:
    known = set(getattr(litellm, "_known_custom_logger_compatible_callbacks", ()) or ())
    return value in known or "." not in value


def _resolve_one(value: Any, key: str, config_dir: str | None) -> Any:
    if not isinstance(value, str) or _known_name(value):
        return value
    module, _, attr = value.rpartition(".")
    added = config_dir is not None and config_dir not in sys.path
    if added:
        sys.path.insert(0, config_dir)
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"{key}: cannot load {value!r} ({type(e).__name__}: {e}); a "
                          "custom callback is module.attribute, the module beside the config "
                          "file or importable") from None
    finally:
        if added:
            sys.path.remove(config_dir)
    return obj


def describe(settings: Settings) -> list[str]:
    """One line per key for the startup block (empty: none configured)."""
    lines = []
    for key, values in settings.litellm_callbacks.items():
        given = [str(v) for v in values if not (isinstance(v, str) and _known_name(v)
                                                and unusable(v))]
        left = [f"{v} (left out: {unusable(v)})" for v in values
                if isinstance(v, str) and _known_name(v) and unusable(v)]
        lines += [f"{key}: {', '.join(given + left)}"] if values else []
    return lines


def install(resolved: dict[str, list[Any]]) -> Callable[[], None]:
    """Add the callbacks to litellm's lists; returns what undoes it (restores the lists)."""
    if not any(resolved.values()):
        return lambda: None
    saved = {name: list(getattr(litellm, name)) for name in LITELLM_LISTS
             if isinstance(getattr(litellm, name, None), list)}
    for key, values in resolved.items():
        current = list(getattr(litellm, key) or [])
        setattr(litellm, key, current + [v for v in values if v not in current])

    def undo() -> None:
        for name, values in saved.items():
            setattr(litellm, name, values)

    return undo


def none_installed() -> bool:
    """No callback in any of litellm's lists: nothing reads litellm's own logging of a call."""
    return not any(getattr(litellm, n, None) for n in LITELLM_LISTS)
