"""``tollgate models learn NAME``: refine a cold-start backend from its observed outcomes.

A backend the router knew nothing about joined on a prior (gateway/pool/priors.py);
the shadow judge and client feedback have since recorded outcomes for it. ``learn`` refits
its descriptor with the readout (the prior as its mean), without retraining the head, and
publishes the version like ``models add``: the artifact directory, and with a database the
active version every running gateway hot-swaps to. Gateways also do this on a schedule
(``retraining.refine_priors_s``).
"""

from __future__ import annotations

from pathlib import Path

import click

from gateway.cli.model_publish import engine_for, live_router, publish, with_common, wrote


@click.command("learn")
@click.argument("name")
@with_common
def learn_command(
    name: str, config: Path | None, router: Path | None, database_url: str | None
) -> None:
    """Refine backend NAME's cold-start descriptor from its outcomes and hot-swap it."""
    from gateway.cli.model_files import targets
    from gateway.config import load_settings, resolve_config_path
    from gateway.learning.refine_priors import refine_backend
    from gateway.pool import build_pool
    from gateway.pricing import resolve_prices

    engine = engine_for(database_url)
    if engine is None:
        raise click.UsageError("learn reads the outcomes from the database: give --database-url")
    t = targets(config, router)
    settings = load_settings(t.config if t.config.exists() else resolve_config_path(config))
    prices = resolve_prices(settings, strict=False)
    pool = build_pool(settings, prices, live_router(t.read_router, engine))
    current, quality = pool.router, pool.qualities.get(name)
    try:
        new, n = refine_backend(engine, current, settings, prices, name,
                                prior=quality.prior if quality is not None else None)
    except ValueError as e:
        raise click.ClickException(str(e)) from e
    publish(new, t, engine, current.version, "learned")
    kind = next(e.kind for e in new.experts if e.name == name)
    click.echo(f"{name}: descriptor refined from {n} outcomes ({kind}); router version "
               f"{new.version}; wrote {wrote(t)}")
