"""The `tollgate` command: a click group whose subcommands load only when they run.

Each area owns its commands in its own module. `tollgate --help` and `--version` import none
of them (torch, scikit-learn, litellm and FastAPI cost seconds), so the listing below carries
each command's one-line help; tests/gateway/cli/test_startup_speed.py checks it against the real
commands so it cannot drift.
"""

from __future__ import annotations

import importlib

import click

from gateway import __version__

# name: (module, attribute or None when the module's ``register(group)`` adds it, short help)
COMMANDS: dict[str, tuple[str, str | None, str]] = {
    "serve": ("gateway.cli.serve", "serve_command",
              "Run the gateway (OpenAI-compatible API on http://HOST:PORT/v1)."),
    "demo": ("gateway.cli.serve", "demo_command",
             "Route RouterBench prompts through a local gateway, no provider keys needed."),
    "models": ("gateway.cli.models", None,
               "Add, list and remove the models the router can choose (no retraining)."),
    "tenants": ("gateway.cli.store", "tenants_group", "Tenants and their budgets."),
    "keys": ("gateway.cli.store", "keys_group", "API keys (shown once, stored hashed)."),
    "db": ("gateway.cli.store", "db_group", "Database schema (Alembic)."),
    "logs": ("gateway.cli.logs", "logs_command",
             "Show routed requests: decisions, costs, latency, fallbacks and feedback."),
    "retrain": ("gateway.cli.learning", None,
                "Retrain on the observations, promote if not worse, record the version."),
    "router": ("gateway.cli.learning", None, "Router versions: history, rollback and resume."),
    "train": ("router_core.cli.train", "train_command",
              "Train a Tollgate router (CSCR head + calibration) and save it to OUT."),
    "eval": ("router_core.evaluation.cli", "eval_command",
             "Evaluate Tollgate and the baselines on one split: AUDC, QNC, peak, overpayment."),
    "simulate": ("gateway.cli.simulate", "simulate_command",
                 ("Close the learning loop on recorded benchmark outcomes and print it round "
                  "by round.")),
}


def load_command(name: str) -> click.Command:
    """Import the module that owns ``name`` and return its click command."""
    module_name, attr, _ = COMMANDS[name]
    module = importlib.import_module(module_name)
    if attr is not None:
        return getattr(module, attr)
    scratch = click.Group()
    module.register(scratch)
    return scratch.commands[name]


class LazyGroup(click.Group):
    """A group that lists commands from ``COMMANDS`` and imports one only to run it."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return load_command(cmd_name) if cmd_name in COMMANDS else None

    def invoke(self, ctx: click.Context) -> object:
        """An error any command ends on is one line (gateway/cli/errors.py): a config error
        is ``Error: <file>: <key>: ...``; ``TOLLGATE_DEBUG=1`` keeps the traceback."""
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt,
                SystemExit):
            raise
        except Exception as e:
            from gateway.cli.errors import debugging, one_line

            if debugging():
                raise
            raise click.ClickException(one_line(e)) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="tollgate")
def main() -> None:
    """Tollgate: an OpenAI-compatible gateway that routes to the cheapest adequate model."""
