"""The `tollgate` command. Each area registers its commands on `main` below."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="tollgate")
def main() -> None:
    """Tollgate: an OpenAI-compatible gateway that routes to the cheapest adequate model."""


def _register() -> None:
    # Each area owns its commands in its own module; they are attached to the group here.
    from gateway.cli.store import register as register_store

    register_store(main)
    from router_core.cli import train_command

    main.add_command(train_command)
    from router_core.evaluation.cli import eval_command

    main.add_command(eval_command)
    from gateway.cli.logs import logs_command

    main.add_command(logs_command)
    from gateway.cli.serve import register as register_serve

    register_serve(main)  # serve, demo
    from gateway.cli.learning import register as register_learning
    from gateway.sandbox.simulate import simulate_command

    register_learning(main)  # retrain, router history|rollback (issue 5)
    main.add_command(simulate_command)
    from gateway.cli.models import register as register_models

    register_models(main)  # models add|list|remove (issue 6)


_register()
