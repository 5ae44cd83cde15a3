"""``tollgate models learn NAME``: refine a cold-start backend from its observed outcomes.

A backend the router knew nothing about joined on a prior (gateway/learning/cold_start.py);
the shadow judge and client feedback have since recorded outcomes for it. ``learn`` refits
its descriptor with the readout (the prior as its mean), without retraining the head, and
publishes the version like ``models add``: the artifact directory, and with a database the
active version every running gateway hot-swaps to. Gateways also do this on a schedule
(``retraining.refine_priors_s``).
"""

from __future__ import annotations

from pathlib import Path

import click

from gateway.cli.models import _engine, _live_router, _router_dir, _settings_path, _with_common


@click.command("learn")
@click.argument("name")
@_with_common
def learn_command(
    name: str, config: Path | None, router: Path | None, database_url: str | None
) -> None:
    """Refine backend NAME's cold-start descriptor from its outcomes and hot-swap it."""
    from gateway.config import load_settings
    from gateway.learning.cold_start import publish_refinement, with_priors
    from gateway.pricing import resolve_prices
    from router_core.artifact import save_router

    engine = _engine(database_url)
    if engine is None:
        raise click.UsageError("learn reads the outcomes from the database: give --database-url")
    cfg_path = _settings_path(config)
    settings = load_settings(cfg_path)
    prices = resolve_prices(settings, strict=False)
    router_dir = _router_dir(cfg_path, router)
    current = with_priors(_live_router(router_dir, engine), settings, prices)
    try:
        new, n = publish_refinement(engine, current, settings, prices, name)
    except ValueError as e:
        raise click.ClickException(str(e)) from e
    save_router(new, router_dir)
    kind = next(e.kind for e in new.experts if e.name == name)
    click.echo(f"{name}: descriptor refined from {n} outcomes ({kind}); router version "
               f"{new.version}")  # fmt: skip
