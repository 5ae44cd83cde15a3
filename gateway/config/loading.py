"""From a file, a mapping and the environment to ``Settings``: LiteLLM's sections
translated, ``os.environ/NAME`` resolved, one-line errors naming the key; and where the CLI
finds its config file, data directory and database."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gateway.config.settings import DEFAULT_CONFIG_PATH, ConfigError, Settings
from gateway.litellm_sections import ENV_PREFIX, resolve_env, translate
from gateway.store.engine import DEFAULT_DATABASE_URL, database_url_from_env


def _one_line(e: ValidationError, sources: dict[str, str]) -> str:
    """The first problem of a validation error as one line naming the key (and the LiteLLM
    key it came from, when it was mapped from one)."""
    errs = e.errors()
    err = errs[0]
    loc = ".".join(str(p) for p in err["loc"])
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = f"unknown key {loc!r}"
    elif loc in sources:
        msg = f"{loc} (from {sources[loc]}): {msg}"
    elif loc:
        msg = f"{loc}: {msg}"
    more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
    return msg + more


def _from_env(value: Any, key: str, sources: dict[str, str], source: str) -> Any:
    """``os.environ/NAME`` read now; an unset NAME is a config error naming it (not a type
    error on the None it would become)."""
    if isinstance(value, str) and value.startswith(ENV_PREFIX):
        resolved = resolve_env(value)
        if resolved is None:
            where = f"{key} (from {sources[key]})" if key in sources else key
            raise ConfigError(f"{source}: {where}: {value} is not set "
                              f"(export {value[len(ENV_PREFIX):]}=...)")
        return resolved
    return value


def load_settings(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> Settings:
    """Read config.yaml (default: the repo's), then the environment.

    ``TOLLGATE_DATABASE_URL`` and ``TOLLGATE_ADMIN_KEY`` win over the file.
    """
    path = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e}") from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}{where}: not valid YAML: {problem}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    raw.update(overrides or {})
    # custom callbacks are imported from the config's directory
    return settings_from_dict(raw, source=str(path), config_dir=str(path.resolve().parent))


def settings_from_dict(raw: dict[str, Any], source: str = "config",
                       config_dir: str | None = None) -> Settings:
    """Validate a config mapping and apply the environment overrides: the frozen value, built
    once (``config_dir``: the directory of the file it came from)."""
    try:
        translated = translate(raw)
    except ValueError as e:
        raise ConfigError(f"{source}: {e}") from e
    raw = translated.raw
    if os.environ.get("TOLLGATE_DATABASE_URL"):
        raw["database_url"] = os.environ["TOLLGATE_DATABASE_URL"]
    if os.environ.get("TOLLGATE_ADMIN_KEY"):
        raw["admin_key"] = os.environ["TOLLGATE_ADMIN_KEY"]
    if os.environ.get("TOLLGATE_METRICS_TOKEN"):
        raw["metrics_token"] = os.environ["TOLLGATE_METRICS_TOKEN"]
    raw["database_url"] = raw.get("database_url") or DEFAULT_DATABASE_URL
    for key in ("database_url", "admin_key", "metrics_token"):
        raw[key] = _from_env(raw.get(key), key, translated.sources, source)
    try:
        return Settings.model_validate(
            raw, context={"ignored_keys": translated.ignored, "config_dir": config_dir})
    except ValidationError as e:
        raise ConfigError(f"{source}: {_one_line(e, translated.sources)}") from None


def data_home() -> Path:
    """Where the gateway writes what it owns besides the database (a changed router, the
    config `models add` edits when the served one is the packaged one): $TOLLGATE_HOME,
    else the current directory."""
    return Path(os.environ.get("TOLLGATE_HOME") or ".")


def resolve_config_path(given: Path | None) -> Path:
    """--config, $TOLLGATE_CONFIG, ./config.yaml, $TOLLGATE_HOME/config.yaml, then the
    packaged config.yaml."""
    if given is not None:
        return given
    if os.environ.get("TOLLGATE_CONFIG"):
        return Path(os.environ["TOLLGATE_CONFIG"])
    for candidate in (Path("config.yaml"), data_home() / "config.yaml"):
        if candidate.is_file():
            return candidate
    return DEFAULT_CONFIG_PATH


def resolve_database_url(database_url: str | None, config_path: str | Path | None) -> str:
    """What a CLI command uses: its --database-url, else the database of the config `serve`
    would read (--config, $TOLLGATE_CONFIG, ./config.yaml, ...; see resolve_config_path),
    where `TOLLGATE_DATABASE_URL` wins over the file."""
    if database_url:
        return database_url
    path = resolve_config_path(Path(config_path) if config_path else None)
    if config_path is None and not path.is_file():
        return database_url_from_env()  # no config anywhere (an install without the repo)
    return load_settings(path).database_url
