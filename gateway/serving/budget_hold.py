"""The money one request holds against its tenant's budget, from first reservation to settling.

The reservation for a backend is ĉ = N_prompt·p_in + n·m·p_out, N_prompt the prompt-token
bound of gateway/pricing.py (not the tokenizer's estimate) and m the output cap sent
upstream, so the settled cost cannot pass what is held. A fallback to a dearer backend tops
the hold up; settling charges the actual cost across the reservations and releases the rest.
A provider reporting more than was held anyway is an overrun (gateway/store/ledger.py): the
ledger holds it apart and refuses the tenant; it is counted in ``tollgate_budget_overruns``.

An attempt that timed out after its request was sent may be billed by the provider, which
has the prompt: the request then *owes* the prompt's input cost on that backend (``owe``, at
most what is held beyond earlier debts), and every later attempt must fit on top of what is
owed (``fit`` holds owed + ĉ), so the settled total (owed + the answer's cost) stays within
the hold and the hard budget holds.
"""

from __future__ import annotations

from gateway.context import GatewayContext, call
from gateway.errors import store_unavailable
from gateway.pricing import Price
from gateway.store.errors import BudgetExceeded, StoreUnavailable
from gateway.store.records import Reservation, Tenant


class BudgetHold:
    """Money held for one request: one reservation, topped up when a fallback costs more."""

    def __init__(self, ctx: GatewayContext, tenant: Tenant, request_id: str) -> None:
        self._ctx, self._tenant, self._rid = ctx, tenant, request_id
        self.reservations: list[Reservation] = []
        self.held = 0.0
        self.refusal: BudgetExceeded | None = None  # the last refusal, with the ledger's numbers
        self.owed = 0.0  # charged for attempts that timed out after sending (module docstring)
        self.attempt_usd = 0.0  # ĉ of the attempt in flight (the last ``fit``)
        self.settled = False

    async def ensure(self, usd: float) -> bool:
        """Hold at least ``usd`` in total; False (and ``refusal`` set) when it does not fit."""
        if usd <= self.held:
            return True
        try:
            r = await call(self._ctx.store.reserve, self._tenant, usd - self.held, self._rid)
        except BudgetExceeded as e:
            self.refusal = e
            return False
        except ValueError:  # an amount past what the ledger can book: it cannot fit
            return False
        except StoreUnavailable as e:
            raise store_unavailable() from e
        self.reservations.append(r)
        self.held = usd
        return True

    def room_usd(self) -> float:
        """What this request could hold in total, from the last refusal's ledger numbers."""
        e = self.refusal
        if e is None:
            return self.held
        return self.held + max(0.0, e.budget_usd - e.spent_usd - e.reserved_usd)

    def owe(self, usd: float) -> float:
        """Owe ``usd`` for a timed-out attempt, never past what is held: what was owed."""
        usd = max(0.0, min(usd, self.held - self.owed))
        self.owed += usd
        return usd

    async def fits_again(self) -> bool:
        """Whether the attempt in flight can be made once more on top of what is owed (the
        next deployment of a group after a billable timeout)."""
        return await self.ensure(self.owed + self.attempt_usd)

    async def fit(self, price: Price, prompt_tokens: int, want: int, n: int, *,
                  shrink: bool, min_tokens: int) -> int | None:
        """Hold enough for a prompt of ``prompt_tokens`` (the bound) and ``n`` answers of
        ``want`` tokens, on top of what is owed; the output cap to send, or None.

        With ``shrink`` (the client set no max_tokens) a budget too small for ``want`` lowers
        the cap to what the room left pays, unless that is below ``min_tokens``.
        """
        if await self._fits(price.cost(prompt_tokens, want * n)):
            return want
        if not shrink:
            return None
        room = self.room_usd() - self.owed
        cap = min(want, price.affordable_output_tokens(room, prompt_tokens) // n)
        if cap < min_tokens:
            return None
        if await self._fits(price.cost(prompt_tokens, cap * n)):
            return cap
        return None

    async def _fits(self, attempt_usd: float) -> bool:
        if await self.ensure(self.owed + attempt_usd):
            self.attempt_usd = attempt_usd
            return True
        return False

    async def settle(self, actual_usd: float) -> None:
        """Charge ``actual_usd`` across the reservations (in order), release the rest."""
        if self.settled:
            return
        self.settled = True
        left = max(0.0, actual_usd)
        for i, r in enumerate(self.reservations):
            amount = r.amount_usd
            last = i == len(self.reservations) - 1
            part = left if last else min(left, amount)
            left -= part
            result = await call(self._ctx.store.settle, r, part)
            overrun = result.overrun_usd
            if overrun > 0:
                self._ctx.metrics.overruns.inc()
                self._ctx.metrics.overrun_usd.inc(overrun)
