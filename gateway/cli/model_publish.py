"""What `tollgate models add|remove|learn` share: the database and live router they start
from, the common options, and publishing a new router version (the artifact directory, and
with a database the recorded, activated version running gateways hot-swap to)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from gateway.cli.model_files import Targets


def engine_for(database_url: str | None) -> Any:
    if not database_url:
        return None
    from gateway.store.engine import make_engine

    return make_engine(database_url)


def live_router(router_dir: Path, engine: Any) -> Any:
    """The router to extend: the database's active version (what gateways serve), else the
    artifact directory's."""
    from router_core.artifact import load_router

    if engine is not None:
        from gateway.learning import router_versions

        row = router_versions.active_version(engine)
        if row is not None:
            return router_versions.load_version(engine, row["version"])
    return load_router(router_dir)


def new_version(old: str, what: str) -> str:
    base = old.split("@", 1)[0]
    return f"{base}@{what}-{time.strftime('%Y%m%d%H%M%S', time.gmtime())}"


def publish(router: Any, t: Targets, engine: Any, parent: str, status: str) -> None:
    from router_core.artifact import load_probes, save_router

    save_router(router, t.write_router, probes=load_probes(t.read_router))
    if engine is None:
        return
    from gateway.learning import router_versions

    row = router_versions.active_version(engine) or {}
    try:  # the operator's own publish: past a hold, but never over a version it did not see
        router_versions.record_version(
            engine,
            router,
            status=status,
            parent=parent,
            metrics={"change": status},
            n_observations=int(row.get("n_observations") or 0),
            max_obs_id=int(row.get("max_observation_id") or 0),
            activate=True,
            operator=True,
        )
    except router_versions.StaleParent as e:
        raise click.ClickException(f"not published: {e}; run the command again to build on "
                                   "it") from e


def wrote(t: Targets) -> str:
    note = f" (a copy of the packaged {t.copied_from.name})" if t.copied_from else ""
    return f"config {t.config}{note}, router {t.write_router}"


_common = [
    click.option("--config", "config", type=click.Path(dir_okay=False, path_type=Path),
                 default=None,
                 help="config.yaml to update (default: the one `tollgate serve` uses)."),
    click.option("--router", "router", type=click.Path(file_okay=False, path_type=Path),
                 default=None,
                 help="Router artifact directory (default: config's router_path, else a copy of "
                 "the packaged one in $TOLLGATE_HOME or ./router)."),
    click.option("--database-url", envvar="TOLLGATE_DATABASE_URL", default=None,
                 help="Record and activate the new version here, so running gateways "
                 "hot-swap."),
]


def with_common(fn: Any) -> Any:
    for opt in reversed(_common):
        fn = opt(fn)
    return fn
