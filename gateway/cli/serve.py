"""`tollgate serve` and `tollgate demo`.

Embedded defaults of `serve`: the database is `TOLLGATE_DATABASE_URL` or the SQLite file
`./tollgate.db` (upgraded to the current schema on start), the router is the packaged
`router_core/default_router`, the config is `--config`, else `$TOLLGATE_CONFIG`, else
`./config.yaml` when present, else the repository's `config.yaml`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

from gateway.config import ConfigError, resolve_config_path


@click.command("serve")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="config.yaml to serve (see the README's config reference).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=4000, show_default=True, type=int)
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
def serve_command(config_path: Path | None, host: str, port: int, log_level: str) -> None:
    """Run the gateway (OpenAI-compatible API on http://HOST:PORT/v1)."""
    from gateway.app import create_app
    from gateway.config import load_settings
    from gateway.reliability.shutdown import run

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: "
                        "%(message)s")
    path = resolve_config_path(config_path)
    try:
        settings = load_settings(path)
    except ConfigError as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"tollgate: config {path}, database {_safe_url(settings.database_url)}, "
               f"serving on http://{host}:{port}/v1", err=True)
    run(create_app(settings), host, port, log_level=log_level)


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - only for display
        return "<unparseable URL>"


@click.command("demo")
@click.option("--prompts", "n_prompts", default=40, show_default=True,
              help="How many test prompts to send.")
@click.option("--cost-weight", default=None, type=float,
              help="λ of the `auto` route (default: the demo config's).")
@click.option("--seed", default=0, show_default=True)
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Benchmark data folder (default: $TOLLGATE_DATA_DIR or ../shared/data).")
@click.option("--router", "router_path", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Router artifact (default: the packaged one).")
def demo_command(n_prompts: int, cost_weight: float | None, seed: int, data_dir: Path | None,
                 router_path: Path | None) -> None:
    """Route RouterBench prompts through a local gateway, no provider keys needed."""
    from gateway.sandbox.demo import run_demo

    run_demo(n_prompts=n_prompts, cost_weight=cost_weight, seed=seed, data_dir=data_dir,
             router_path=router_path, echo=click.echo)


def register(group: click.Group) -> None:
    group.add_command(serve_command)
    group.add_command(demo_command)
