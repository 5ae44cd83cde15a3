"""The money one request holds against its tenant's budget, from first reservation to settling.

The reservation for a backend is ĉ = N_prompt·p_in + n·m·p_out, N_prompt the prompt-token
bound of gateway/prompt_tokens.py (not the tokenizer's estimate) and m the output cap sent
upstream, so the settled cost cannot pass what is held. A fallback to a dearer backend tops
the hold up; settling charges the actual cost across the reservations and releases the rest.
A provider reporting more than was held anyway is an overrun (gateway/store/ledger.py): the
ledger holds it apart and refuses the tenant; it is counted in ``tollgate_budget_overruns``.

Admission (gateway/serving/budget/budget_gate.py): a reservation refused only because other
requests' reservations are in flight (settled spend + what this request would hold ≤ budget)
waits in its key's FIFO line (fair across a tenant's keys), at most ``budget_wait_s`` for the whole request, instead of
being refused; a refusal that could succeed later (``retryable``) is a 429 with
``Retry-After``, and ``budget_exceeded`` (``x-should-retry: false``) is left for a settled
spend that leaves less than the smallest request this one could be. Requests whose
provider could bill past their reservation (a client output cap below the backend's
``max_output_tokens``) are admitted only while the tenant's exposure fits
``budget_overrun_exposure`` × budget, and the key's fits that share of the key's own budget.
A key deleted or expired while its request waits ends the wait with the 401 the request
would get now: none is served after the delete.

An attempt that timed out after its request was sent may be billed by the provider: the
request then *owes* that attempt's cost (``owe``, at most what is held beyond earlier debts;
gateway/serving/forwarding/attempts.py says how much), and every later attempt must fit on top of
what is owed (``fit`` holds owed + ĉ), so the settled total (owed + the answer's cost) stays
within the hold and the hard budget holds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from gateway.auth import expired
from gateway.context import GatewayContext, call
from gateway.errors import store_unavailable, unauthorized
from gateway.pricing import Price
from gateway.serving.budget.budget_gate import BudgetGate, LineId, key_account
from gateway.store.errors import BudgetExceeded, NotFound, StoreUnavailable
from gateway.store.records import Reservation, Tenant

_EPS = 1e-12
_FIRST_POLL_S, _LAST_POLL_S = 0.01, 0.25


class BudgetHold:
    """Money held for one request: one reservation, topped up when a fallback costs more."""

    def __init__(self, ctx: GatewayContext, tenant: Tenant, request_id: str) -> None:
        self._ctx, self._tenant, self._rid = ctx, tenant, request_id
        self.reservations: list[Reservation] = []
        self.held = 0.0
        self.refusal: BudgetExceeded | None = None  # the last refusal, with the ledger's numbers
        self.owed = 0.0  # charged for attempts that timed out after sending (module docstring)
        self.attempt_usd = 0.0  # ĉ of the attempt in flight (the last ``fit``)
        self.smallest_usd: float | None = None  # the least this request could have held
        self.exposure_usd = 0.0  # what a provider could bill past the hold (budget_gate.py)
        self.waited_s = 0.0
        # the largest output cap the budget's room would have paid on a candidate that did
        # not fit (the refusal says it, as OpenRouter's 402 does: "can only afford N")
        self.affordable_tokens: int | None = None
        self.settled = False
        # set by the handler: whether the client has gone (ends a wait)
        self.client_gone: Callable[[], Awaitable[bool]] | None = None
        self._deadline: float | None = None
        self._exposed = False

    # -- admission --------------------------------------------------------------------------
    @property
    def _gate(self) -> BudgetGate:
        return self._ctx.budget_gate

    def _wait_s(self) -> float:
        return self._ctx.settings.budget_wait_s

    @property
    def _line_id(self) -> LineId:
        return self._tenant.id, self._tenant.key_id

    def _accounts(self) -> list[tuple[str, float | None]]:
        """The exposure accounts this request counts in, with their limits: its tenant's,
        and its key's own when the key has a budget (budget_gate.py)."""
        share = self._ctx.settings.budget_overrun_exposure
        t = self._tenant

        def limit(budget: float | None) -> float | None:
            return None if share is None or budget is None else share * budget

        out = [(t.id, limit(t.budget_usd))]
        if t.key_id is not None and t.key_budget_usd is not None:
            out.append((key_account(t.key_id), limit(t.key_budget_usd)))
        return out

    def _may_wait(self, e: BudgetExceeded, usd: float) -> bool:
        """The refusal is only about others' reservations: this request fits settled spend."""
        if e.overrun_usd or e.budget_usd <= 0:
            return False
        others = e.reserved_usd - self.held
        return others > _EPS and e.spent_usd + usd <= e.budget_usd + _EPS

    def _time_left(self) -> float:
        if self._deadline is None:
            self._deadline = time.monotonic() + self._wait_s()
        return self._deadline - time.monotonic()

    async def ensure(self, usd: float, exposure_usd: float = 0.0, *, wait: bool = True) -> bool:
        """Hold at least ``usd`` in total; False (and ``refusal`` set) when it does not fit.
        Waits in the tenant's line while it could fit once others settle (module docstring);
        with ``wait=False`` it only tries once, and not before others already in line."""
        if usd <= self.held and exposure_usd <= self.exposure_usd:
            return True
        lid, gate = self._line_id, self._gate
        accounts = self._accounts()
        extra = max(0.0, exposure_usd - self.exposure_usd)
        turn = None
        if gate.queued(lid):  # others of this key wait already: behind them, not before
            if not wait:
                return False
            turn = gate.join(lid)
        try:
            poll = _FIRST_POLL_S
            while True:
                if turn is not None and not turn.done() and not await self._wait_turn(turn):
                    return False
                if (refusal := expired(self._tenant)) is not None:  # it expired while waiting
                    raise refusal
                if all(gate.exposure_fits(a, extra, lim) for a, lim in accounts):
                    claim = self._expose(extra)  # before the await: concurrent checks see it
                    try:
                        got = await self._reserve(usd)
                    except BaseException:
                        self._withdraw(claim)
                        raise
                    if got is not False:
                        return True
                    self._withdraw(claim)
                    if self.refusal is None or not self._may_wait(self.refusal, usd):
                        return False
                elif self.refusal is None:  # a refusal to report: the exposure bound
                    self.refusal = BudgetExceeded(self._tenant.budget_usd or 0.0, 0.0, 0.0, usd)
                left = self._time_left()
                if not wait or left <= 0 or await self._gone():
                    return False
                if turn is None:
                    turn = gate.join(lid)
                    continue
                started = time.monotonic()
                await gate.pause(lid, min(poll, left))
                self.waited_s += time.monotonic() - started
                poll = min(poll * 2, _LAST_POLL_S)
        finally:
            if turn is not None:
                gate.leave(lid, turn)

    async def _wait_turn(self, turn: asyncio.Future[None]) -> bool:
        """Wait to be the head of the line; False when the time is up or the client left."""
        started = time.monotonic()
        try:
            while not turn.done():
                left = self._time_left()
                if left <= 0 or await self._gone():
                    return False
                try:
                    await asyncio.wait_for(asyncio.shield(turn), timeout=min(0.25, left))
                except TimeoutError:
                    pass
        finally:
            self.waited_s += time.monotonic() - started
        return True

    async def _gone(self) -> bool:
        if self.client_gone is None:
            return False
        try:
            return bool(await self.client_gone())
        except Exception:  # noqa: BLE001 - no way to tell: keep waiting until the deadline
            return False

    async def _reserve(self, usd: float) -> bool | None:
        if usd <= self.held:
            return True
        try:
            r = await call(self._ctx.store.reserve, self._tenant, usd - self.held, self._rid)
        except BudgetExceeded as e:
            self.refusal = e
            return False
        except ValueError:  # an amount past what the ledger can book: it cannot fit
            self.refusal = None
            return False
        except NotFound as e:  # the key was deleted (or its tenant disabled), maybe while
            raise unauthorized(  # the request waited: as if it had come after (none served)
                "Authentication Error - this API key was deleted or its tenant disabled.") from e
        except StoreUnavailable as e:
            raise store_unavailable() from e
        self.reservations.append(r)
        self.held = usd
        return True

    def _expose(self, extra: float) -> tuple[float, bool]:
        """Claim ``extra`` exposure in the tenant's line; the claim, to withdraw on refusal."""
        if extra <= 0:
            return 0.0, False
        first = not self._exposed
        for account, _ in self._accounts():
            self._gate.expose(account, extra, first=first)
        self._exposed = True
        self.exposure_usd += extra
        return extra, first

    def _withdraw(self, claim: tuple[float, bool]) -> None:
        """Undo a claim whose reservation was refused (or failed)."""
        extra, first = claim
        if extra <= 0:
            return
        for account, _ in self._accounts():
            self._gate.withdraw(account, extra, last=first)
        self.exposure_usd -= extra
        self._exposed = not first

    @property
    def retryable(self) -> bool:
        """Whether the last refusal could succeed later: the settled spend leaves room for the
        smallest request this one could be, and no overrun awaits an operator."""
        e = self.refusal
        if e is None or e.overrun_usd or self.smallest_usd is None:
            return False
        return e.spent_usd + self.smallest_usd <= e.budget_usd + _EPS

    def room_usd(self) -> float:
        """What this request could hold in total, from the last refusal's ledger numbers:
        the settled spend's room when it may wait for others, else what is free now."""
        e = self.refusal
        if e is None:
            return self.held
        if self._wait_s() > 0 and not e.overrun_usd:
            return max(self.held, e.budget_usd - e.spent_usd)
        return self.held + max(0.0, e.budget_usd - e.spent_usd - e.reserved_usd)

    def owe(self, usd: float) -> float:
        """Owe ``usd`` for a timed-out attempt, never past what is held: what was owed."""
        usd = max(0.0, min(usd, self.held - self.owed))
        self.owed += usd
        return usd

    async def fits_again(self) -> bool:
        """Whether the attempt in flight can be made once more on top of what is owed (the
        next deployment of a group after a billable timeout)."""
        return await self.ensure(self.owed + self.attempt_usd, self.exposure_usd)

    async def fit(self, price: Price, prompt_tokens: int, want: int, n: int, *,
                  shrink: bool, min_tokens: int, worst_tokens: int | None = None) -> int | None:
        """Hold enough for a prompt of ``prompt_tokens`` (the bound) and ``n`` answers of
        ``want`` tokens, on top of what is owed; the output cap to send, or None.

        With ``shrink`` (the client set no max_tokens, or ``budget.lower_max_tokens``) a
        budget too small for ``want`` lowers the cap, unless that is below ``min_tokens``:
        first, without waiting, to half the free room (``_share_cap``), then, after waiting
        for others' reservations, to what the settled spend's room pays.
        ``worst_tokens``: the most the backend can answer (its max_output_tokens), for the
        request's overrun exposure.
        """
        least = price.cost(prompt_tokens, (min(min_tokens, want) if shrink else want) * n)
        self.smallest_usd = least if self.smallest_usd is None else min(self.smallest_usd, least)
        worst = price.cost(prompt_tokens, max(worst_tokens or 0, want) * n)
        full = price.cost(prompt_tokens, want * n)
        if shrink:  # lowered at once to a share of the free room rather than waiting
            if await self._fits(full, worst, wait=False):
                return want
            cap = self._share_cap(price, prompt_tokens, want, n, min_tokens)
            if cap is not None and await self._fits(price.cost(prompt_tokens, cap * n), worst,
                                                    wait=False):
                return cap
        if await self._fits(full, worst):
            return want
        room = self.room_usd() - self.owed
        cap = min(want, price.affordable_output_tokens(room, prompt_tokens) // n)
        self.affordable_tokens = max(self.affordable_tokens or 0, cap)
        if not shrink:
            return None
        if cap < min_tokens:
            return None
        if await self._fits(price.cost(prompt_tokens, cap * n), worst):
            return cap
        return None

    def _share_cap(self, price: Price, prompt_tokens: int, want: int, n: int,
                   min_tokens: int) -> int | None:
        """The output cap paid by half the free room the last refusal saw (all of it when
        half pays for less than ``min_tokens``): the rest stays free for a parallel request,
        which then starts at once instead of waiting for this one (issue 47.4). None when
        the free room pays for less than ``min_tokens``."""
        e = self.refusal
        if e is None or e.overrun_usd:
            return None
        free = e.budget_usd - e.spent_usd - e.reserved_usd + self.held - self.owed
        for share in (0.5, 1.0):
            cap = min(want - 1, price.affordable_output_tokens(share * free, prompt_tokens) // n)
            if cap >= min_tokens:
                return cap
        return None

    async def _fits(self, attempt_usd: float, worst_usd: float, *, wait: bool = True) -> bool:
        exposure = max(0.0, worst_usd - attempt_usd)
        if await self.ensure(self.owed + attempt_usd, exposure, wait=wait):
            self.attempt_usd = attempt_usd
            return True
        return False

    # -- settling ---------------------------------------------------------------------------
    async def settle(self, actual_usd: float) -> float:
        """Charge ``actual_usd`` across the reservations (in order), release the rest; the
        overrun the ledger booked (USD)."""
        if self.settled:
            return 0.0
        self.settled = True
        left = max(0.0, actual_usd)
        overrun = 0.0
        try:
            for i, r in enumerate(self.reservations):
                amount = r.amount_usd
                last = i == len(self.reservations) - 1
                part = left if last else min(left, amount)
                left -= part
                result = await call(self._ctx.store.settle, r, part)
                if result.overrun_usd > 0:
                    overrun += result.overrun_usd
                    self._ctx.metrics.overruns.inc()
                    self._ctx.metrics.overrun_usd.inc(result.overrun_usd)
        finally:
            if self._exposed:
                for account, _ in self._accounts():
                    self._gate.release(account, self.exposure_usd)
                self._exposed = False
            if (self.reservations or self._tenant.budget_usd is not None
                    or self._tenant.key_budgeted):
                self._gate.settled(self._tenant.id)
        return overrun
