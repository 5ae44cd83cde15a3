"""Options shared by `tollgate train` and `tollgate eval`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from router_core.encoders import DEFAULT_KIND, known_kinds


def encoder_option(help: str) -> Callable[[Any], Any]:
    """``--encoder KIND``, one of the registry's kinds, passed on as ``encoder_kind``."""
    return click.option("--encoder", "encoder_kind", type=click.Choice(known_kinds()),
                        default=DEFAULT_KIND, show_default=True, help=help)
