"""Money in the ledger: integer nano-dollars (nUSD), and the largest amount it takes."""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal

NANO = Decimal(1_000_000_000)
# Largest single amount (budget, reservation, charge): 1e9 USD = 1e18 nUSD, so the ledger's
# sum spent + reserved + x stays inside a signed 64-bit BIGINT (9.2e18).
MAX_AMOUNT_USD = 1e9


def usd_to_nusd(usd: float | Decimal, rounding: str = ROUND_CEILING) -> int:
    """USD → integer nano-dollars, rounded up by default (a reservation or charge never
    shrinks); ``rounding`` is a ``decimal`` rounding mode."""
    value = usd if isinstance(usd, Decimal) else Decimal(repr(float(usd)))
    if not value.is_finite() or abs(value) > Decimal(repr(MAX_AMOUNT_USD)):
        raise ValueError(f"amount must be finite and at most {MAX_AMOUNT_USD:g} USD, "
                         f"got {usd!r}")
    return int((value * NANO).to_integral_value(rounding=rounding))


def nusd_to_usd(nusd: int | None) -> float | None:
    return None if nusd is None else nusd / 1e9
