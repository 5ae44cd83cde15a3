"""`tollgate retrain` and `tollgate router history|rollback|resume`: the learning loop by hand."""

from __future__ import annotations

import json
from typing import Any

import click
from sqlalchemy.engine import Engine

from gateway.learning import router_versions
from gateway.learning.retrain import RetrainConfig, retrain_once
from router_core.evaluation.promotion import DEFAULT_MARGIN


def _cli_engine(database_url: str | None, config_path: str | None) -> tuple[Engine, Any]:
    """An engine on the configured database (upgraded to head) and the settings."""
    from gateway.config import load_settings, resolve_database_url
    from gateway.store import make_engine
    from gateway.store.migrate import upgrade_engine

    settings = load_settings(config_path) if config_path else None
    engine = make_engine(resolve_database_url(database_url, config_path))
    upgrade_engine(engine)
    return engine, settings


def _db_options(fn: Any) -> Any:
    fn = click.option("--config", "config_path", default=None, help="config.yaml to read.")(fn)
    return click.option(
        "--database-url",
        default=None,
        help="Database URL (default: TOLLGATE_DATABASE_URL or the SQLite file).",
    )(fn)


@click.command("retrain")
@_db_options
@click.option("--force", is_flag=True, help="Retrain even without min_observations new.")
@click.option("--min-new", type=int, default=None, help="New observations needed.")
@click.option(
    "--margin",
    type=float,
    default=DEFAULT_MARGIN,
    show_default=True,
    help="Promote unless the candidate's held-out AUDC is lower by more.",
)
def retrain_cmd(
    database_url: str | None,
    config_path: str | None,
    force: bool,
    min_new: int | None,
    margin: float,
) -> None:
    """Retrain on the observations, promote if not worse, record the version."""
    from router_core.artifact import load_router

    engine, settings = _cli_engine(database_url, config_path)
    try:
        fallback = load_router(settings.router_path if settings else None)
        default_min = settings.retraining.min_observations if settings else 500
        cfg = RetrainConfig(min_new=default_min if min_new is None else min_new, margin=margin)
        report = retrain_once(engine, fallback, cfg, force=force)
    finally:
        engine.dispose()
    click.echo(json.dumps(report, indent=2, default=str))
    if report["status"] == "locked":
        raise SystemExit(2)


@click.group("router")
def router_group() -> None:
    """Router versions: history, rollback and resume."""


@router_group.command("history")
@_db_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object per version.")
def history_cmd(database_url: str | None, config_path: str | None, as_json: bool) -> None:
    """Every recorded router version with its status and held-out metrics."""
    engine, _ = _cli_engine(database_url, config_path)
    try:
        rows = router_versions.history(engine)
        on_hold = router_versions.held(engine)
    finally:
        engine.dispose()
    if on_hold and not as_json:
        click.echo("held: an operator's rollback; refinement and retraining publish nothing "
                   "until `tollgate router resume`")
    for r in rows:
        m = r.get("metrics") or {}
        cand = m.get("candidate") or {}
        cur = m.get("current") or {}
        if as_json:
            click.echo(json.dumps(r, default=str))
            continue
        mark = "*" if r["active"] else " "
        audc = f"{cand['audc']:.4f}" if "audc" in cand else "-"
        prev = f"{cur['audc']:.4f}" if cur and "audc" in cur else "-"
        click.echo(
            f"{mark} {r['version']:<40} {r['status']:<9} audc {audc} "
            f"(current {prev}) obs {r['n_observations']} "
            f"{r['created_at']:%Y-%m-%d %H:%M:%S}"
        )


@router_group.command("rollback")
@click.argument("version")
@_db_options
def rollback_cmd(version: str, database_url: str | None, config_path: str | None) -> None:
    """Make VERSION the live router again (replicas hot-swap to it) and hold it: refinement
    and retraining publish nothing until `tollgate router resume`."""
    engine, _ = _cli_engine(database_url, config_path)
    try:
        router_versions.activate(engine, version)
    except LookupError as e:
        raise click.ClickException(str(e)) from e
    finally:
        engine.dispose()
    click.echo(f"active router version: {version} (held until `tollgate router resume`)")


@router_group.command("resume")
@_db_options
def resume_cmd(database_url: str | None, config_path: str | None) -> None:
    """Lift a rollback's hold: refinement and retraining publish again, on the active
    version."""
    engine, _ = _cli_engine(database_url, config_path)
    try:
        was = router_versions.release_hold(engine)
    finally:
        engine.dispose()
    click.echo("resumed: refinement and retraining publish on the active version"
               if was else "no hold: nothing to resume")


def register(main: click.Group) -> None:
    """Add ``tollgate retrain`` and ``tollgate router history|rollback|resume`` to the CLI."""
    main.add_command(retrain_cmd)
    main.add_command(router_group)
