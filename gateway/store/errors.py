"""Exceptions the store raises to the HTTP side.

A database fault is `StoreUnavailable` (→ 503), never a failed authentication (→ 401): a
gateway that turns an outage into "bad key" makes every client throw its key away.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every error raised by `gateway.store`."""


class StoreUnavailable(StoreError):
    """The database could not be reached or did not answer in time (map to HTTP 503)."""


class BudgetExceeded(StoreError):
    """The reservation does not fit: spent + reserved + requested > budget (HTTP 429)."""

    def __init__(self, budget_usd: float, spent_usd: float, reserved_usd: float,
                 requested_usd: float = 0.0, *, overrun_usd: float = 0.0) -> None:
        self.budget_usd = budget_usd
        self.spent_usd = spent_usd
        self.reserved_usd = reserved_usd
        self.requested_usd = requested_usd
        self.overrun_usd = overrun_usd  # > 0: refused until an operator acts on the budget
        hold = (f"; a provider charged ${overrun_usd:.6f} past a reservation, so requests "
                "are refused until an operator reviews the budget" if overrun_usd else "")
        super().__init__(
            f"budget exceeded: budget ${budget_usd:.6f}, spent ${spent_usd:.6f}, "
            f"reserved ${reserved_usd:.6f}, requested ${requested_usd:.6f}{hold}"
        )


class NotFound(StoreError):
    """A tenant or key named by an admin call does not exist."""


class Conflict(StoreError):
    """An admin call would violate a uniqueness rule (e.g. a duplicate tenant name)."""
