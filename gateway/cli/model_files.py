"""Where `tollgate models add|remove` write: the config the gateway runs with, and the data
directory, never the install.

- The config file is found as `tollgate serve` finds it (``resolve_config_path``: --config,
  ``$TOLLGATE_CONFIG``, ./config.yaml, then the packaged one). The packaged config and router
  are read-only: a change to them is written to a copy in the data directory instead
  (``<data dir>/config.yaml`` with ``router_path`` pointing at ``<data dir>/router``).
- The data directory is ``$TOLLGATE_HOME``, else the current directory (``data_home``;
  `serve` finds ``$TOLLGATE_HOME/config.yaml`` too).
- The config is edited with ruamel.yaml's round trip: comments, order and layout stay.
"""

from __future__ import annotations

from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

from gateway.config import DEFAULT_CONFIG_PATH, data_home, resolve_config_path


@dataclass(frozen=True)
class Targets:
    config: Path  # the config to edit (a data-directory copy of the packaged one)
    read_router: Path  # the router artifact to start from
    write_router: Path  # where the changed artifact goes
    copied_from: Path | None  # the packaged config, when `config` is a fresh copy of it


def targets(config: Path | None, router: Path | None) -> Targets:
    from router_core.artifact import DEFAULT_ROUTER_DIR

    served = resolve_config_path(config)
    packaged = _same(served, DEFAULT_CONFIG_PATH)
    cfg = data_home() / "config.yaml" if packaged else served
    copied_from = served if packaged and not cfg.exists() else None
    if router is not None:
        return Targets(cfg, Path(router), Path(router), copied_from)
    source = cfg if cfg.exists() else served
    current = router_path_of(source) or DEFAULT_ROUTER_DIR
    write = data_home() / "router" if _same(current, DEFAULT_ROUTER_DIR) else current
    return Targets(cfg, current, write, copied_from)


def router_path_of(config: Path) -> Path | None:
    """The config's ``router_path`` (relative to the config's folder), or None."""
    import yaml

    raw = (yaml.safe_load(config.read_text()) or {}) if config.exists() else {}
    found = raw.get("router_path") if isinstance(raw, dict) else None
    if not found:
        return None
    p = Path(found)
    return p if p.is_absolute() else config.parent / p


def edit_config(t: Targets, add: dict[str, Any] | None = None, remove: str | None = None) -> None:
    """Drop every ``model_list`` entry named ``remove`` (or ``add``'s name), append ``add``,
    and point ``router_path`` at the written router when it is not the config's already."""
    from ruamel.yaml import YAML

    yaml = YAML()  # round trip: comments and layout survive
    yaml.preserve_quotes = True
    source = t.copied_from or t.config
    text = source.read_text() if source.exists() else ""
    doc = yaml.load(text) if text.strip() else None
    if doc is None:
        doc = yaml.load("model_list: []\n")
    pool = doc.get("model_list")
    if pool is None:
        doc["model_list"] = pool = yaml.load("[]")
    drop = {n for n in (remove, add and add["model_name"]) if n}
    for i in reversed(range(len(pool))):
        if isinstance(pool[i], dict) and pool[i].get("model_name") in drop:
            del pool[i]
    if add is not None:
        pool.append(add)
    if not _same(router_path_of(t.config) or Path("/nonexistent"), t.write_router):
        doc["router_path"] = _relative(t.write_router, t.config.parent)
    out = StringIO()
    yaml.dump(doc, out)
    if t.config.exists():
        t.config.with_name(t.config.name + ".bak").write_text(t.config.read_text())
    t.config.parent.mkdir(parents=True, exist_ok=True)
    tmp = t.config.with_name(f".{t.config.name}.tmp")
    tmp.write_text(out.getvalue())
    tmp.replace(t.config)


def _same(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path.resolve())
