"""The saving, always beside the quality change it costs (pure functions, no I/O).

A saving is only half a claim: what it cost in quality is the other half, so every saving
this module returns carries its quality change against the same comparator, estimated and
measured, or says the quality change is unknown.

Per route (``route_savings``), over the window's answered requests:

- A route with a promise (``routes.NAME.max_drop``) is compared with its **reference**. Each
  routed row carries the rule's record per candidate (``candidates[i].promise``: p̂, cost,
  drop bound...) and its reason names the reference ("promise: within 0.01 of R (...)"; a
  stand-in when the request could not use R). Over the rows with records:
  saving = Σ (ĉ_ref − c) where c is the bill (the row's settled cost) and ĉ_ref = c · c_ref /
  c_chosen the reference's estimate from the records' expected costs (issue 47, item 8: the
  records' c_chosen once stood in for the bill), share = saving / Σ ĉ_ref;
  estimated quality change = mean (p̂_chosen − p̂_ref), the route's own estimate.
- A route without a promise, and passthrough, keep the saving against the **strongest**
  backend s (the dearest by p_in + p_out): ĉ_s = n_prompt·p_in,s + n_completion·p_out,s at
  the request's own token counts, saving = Σ ĉ_s − Σ c; the estimated quality change is
  mean (p̂_chosen − p̂_s) over the rows whose candidates include s with a p̂, else unknown.
- Passthrough is not compared: the client chose the model, so no saving is claimed for it.
- The **headline** (``routed``) sums the routed routes' comparisons (each against its own
  reference, or the strongest on a route without a promise): saving = Σ c_comparator − Σ c,
  beside the quality change over the same rows, and a per-bucket cumulative series of both.
- **Measured** (both kinds): on the rows not answered by the comparator, the judged ones
  are those where observations (paired, judge, shadow, feedback; judged_outcomes.py)
  exist on the prompt for both the answered backend's and the comparator's router model;
  measured change = (share of rows not answered by the comparator) × mean (q_chosen −
  q_comparator) over the judged rows (rows answered by the comparator itself change
  nothing), n = judged prompts; with none judged it is unknown ("n/a"), with every row on
  the comparator it is 0.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

UNKNOWN = "quality change unknown"
_PROMISE = re.compile(r"^promise: within (\S+) of ")


@dataclass(frozen=True)
class _Compared:
    """One answered row against its comparator."""

    route: str
    comparator: str | None  # the backend compared with (reference, stand-in or strongest)
    stand_in: bool
    actual_usd: float | None
    comparator_usd: float | None
    estimated: float | None  # p̂_chosen − p̂_comparator
    on_comparator: bool | None  # answered by the comparator itself (None: cannot tell)
    measured: float | None  # q_chosen − q_comparator where both are observed
    via_promise: bool = False  # compared through the row's promise records
    max_drop: float | None = None


def _by_backend(row: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["backend"]: c for c in row.get("candidates") or [] if c.get("backend")}


def promise_reference(row: Mapping[str, Any]) -> tuple[float | None, str | None, bool]:
    """(max_drop, the backend the request was compared with, whether it stood in for the
    route's reference) from a promise row's reason and records; (None, None, False) when the
    row is not a promise decision."""
    reason = row.get("reason") or ""
    cands = _by_backend(row)
    if not any("promise" in c for c in cands.values()):
        return None, None, False
    m = _PROMISE.match(reason)
    drop = float(m.group(1)) if m else None
    for b in cands:  # "...; B stood in for the reference, which this request may not use"
        if f"; {b} stood in for the reference" in reason:
            return drop, b, True
    if m:
        rest = reason[m.end():]
        named = [b for b in cands if rest.startswith(b) and rest[len(b):len(b) + 2] in
                 ("", " (", "; ")]
        if named:
            return drop, max(named, key=len), False
    zero = [b for b, c in cands.items() if (c.get("promise") or {}).get("drop_bound") == 0.0]
    return drop, (zero[0] if len(zero) == 1 else None), False


def _measured(row: Mapping[str, Any], chosen: Mapping[str, Any] | None,
              ref: Mapping[str, Any] | None, outcomes: Mapping[str, Mapping[str, float]]
              ) -> float | None:
    if chosen is None or ref is None:
        return None
    seen = outcomes.get(row["id"]) or {}
    qc, qr = seen.get(chosen.get("model") or ""), seen.get(ref.get("model") or "")
    return None if qc is None or qr is None else float(qc) - float(qr)


def compare_row(row: Mapping[str, Any], strongest: str | None, strongest_price: Any,
                outcomes: Mapping[str, Mapping[str, float]], *, use_promise: bool = True
                ) -> _Compared:
    """One answered row against its reference (promise rows) or the strongest backend."""
    route = row.get("route") or "passthrough"
    cands = _by_backend(row)
    answered = row.get("chosen_model")
    chosen = cands.get(answered or "")
    drop, ref_name, stand_in = promise_reference(row) if use_promise else (None, None, False)
    if ref_name is not None:
        ref = cands.get(ref_name)
        pc, pr = (chosen or {}).get("promise"), (ref or {}).get("promise")
        if pc is None or pr is None:  # answered outside the records: no comparison
            return _Compared(route, ref_name, stand_in, None, None, None, None, None,
                             True, drop)
        return _Compared(route, ref_name, stand_in, *_billed_and_reference(row, pc, pr),
                         float(pc["p"]) - float(pr["p"]), answered == ref_name,
                         _measured(row, chosen, ref, outcomes), True, drop)
    actual = float(row.get("cost_usd") or 0.0)
    if strongest is None:
        return _Compared(route, None, False, actual, None, None, None, None)
    est_s = (int(row.get("prompt_tokens") or 0) * strongest_price.input_per_token
             + int(row.get("completion_tokens") or 0) * strongest_price.output_per_token)
    strong = cands.get(strongest)
    qc, qs = (chosen or {}).get("quality"), (strong or {}).get("quality")
    estimated = None if qc is None or qs is None else float(qc) - float(qs)
    on = answered == strongest if (strong is not None or answered == strongest) else None
    return _Compared(route, strongest, False, actual, est_s, estimated, on,
                     _measured(row, chosen, strong, outcomes))


def _billed_and_reference(row: dict[str, Any], chosen: dict, ref: dict
                          ) -> tuple[float, float]:
    """(actual, comparator) of a promise row (issue 47, item 8): actual is the bill, the
    settled cost on the row; the reference's cost is an estimate, the bill scaled by the
    records' expected costs c_ref / c_chosen (the record's own c_ref when c_chosen is 0)."""
    actual = float(row.get("cost_usd") or 0.0)
    c_chosen, c_ref = float(chosen["cost"]), float(ref["cost"])
    return actual, (actual * c_ref / c_chosen if c_chosen > 0 else c_ref)


@dataclass
class Tally:
    """Running sums over the rows compared with one comparator: what the quality change and
    the money need, so a fold over pages of rows never keeps the rows."""

    requests: int = 0
    est_sum: float = 0.0
    est_n: int = 0
    known: int = 0  # rows where it is known whether the comparator answered
    off: int = 0  # ... and it did not
    judged_sum: float = 0.0
    judged_n: int = 0
    priced: int = 0
    actual_usd: float = 0.0
    comparator_usd: float = 0.0
    stand_in: int = 0
    first_drop: float | None = None
    comparators: Counter[str] = field(default_factory=Counter)  # named (not stand-ins)

    def add(self, c: _Compared) -> None:
        if self.requests == 0:
            self.first_drop = c.max_drop
        self.requests += 1
        self.stand_in += c.stand_in
        if c.comparator and not c.stand_in:
            self.comparators[c.comparator] += 1
        if c.estimated is not None:
            self.est_sum, self.est_n = self.est_sum + c.estimated, self.est_n + 1
        if c.on_comparator is not None:
            self.known += 1
            if not c.on_comparator:
                self.off += 1
                if c.measured is not None:
                    self.judged_sum += c.measured
                    self.judged_n += 1
        if c.actual_usd is not None and c.comparator_usd is not None:
            self.priced += 1
            self.actual_usd += c.actual_usd
            self.comparator_usd += c.comparator_usd

    def merge(self, other: Tally) -> None:
        """Add ``other``'s rows to these sums (the headline over several routes)."""
        for name in ("requests", "est_sum", "est_n", "known", "off", "judged_sum", "judged_n",
                     "priced", "actual_usd", "comparator_usd", "stand_in"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.comparators.update(other.comparators)

    def quality(self) -> dict[str, Any]:
        """Estimated and measured quality change against the comparator."""
        if self.known and not self.off:
            measured, note = 0.0, "every request answered by the comparator"
        elif self.judged_n:
            measured = self.off / self.known * (self.judged_sum / self.judged_n)
            note = None
        else:
            measured, note = None, "n/a"
        return {
            "estimated_quality_change": self.est_sum / self.est_n if self.est_n else None,
            "estimated_n": self.est_n,
            "measured_quality_change": measured,
            "measured_n": self.judged_n,
            "measured_note": note,
            "off_comparator_share": self.off / self.known if self.known else None,
            "quality_change_known": bool(self.est_n) or measured is not None,
        }

    def money(self) -> dict[str, Any]:
        actual, comp = self.actual_usd, self.comparator_usd
        return {"compared": self.priced, "actual_usd": actual, "comparator_usd": comp,
                "saving_usd": comp - actual if self.priced else None,
                "saving_share": (comp - actual) / comp if comp > 0 else None}


def strongest_backend(prices: Mapping[str, Any]) -> str | None:
    return max(prices, key=lambda n: prices[n].input_per_token + prices[n].output_per_token,
               default=None)


class SavingsFold:
    """Every answered row of a window, one page at a time (``add``), against its reference
    (promise rows) or the strongest backend: per route (``route_savings``) and over the
    routed routes (``routed``, the headline)."""

    def __init__(self, prices: Mapping[str, Any], promises: Mapping[str, Mapping[str, Any]],
                 routes: Sequence[str] = (), bucket: Callable[[Any], int] | None = None,
                 n_buckets: int = 1) -> None:
        self.strongest = strongest_backend(prices)
        self.price = prices[self.strongest] if self.strongest is not None else None
        self.promises = promises
        # route -> (every row, the rows compared through their promise records)
        self.routes: dict[str, tuple[Tally, Tally]] = {r: (Tally(), Tally()) for r in routes}
        self._bucket, self._n = bucket or (lambda _: 0), n_buckets
        # route -> (every row, promise rows) -> per bucket [Σ actual, Σ comparator]
        self._series: dict[str, tuple[list[list[float]], list[list[float]]]] = {}

    def add(self, rows: Iterable[Mapping[str, Any]],
            outcomes: Mapping[str, Mapping[str, float]]) -> None:
        for r in rows:
            c = compare_row(r, self.strongest, self.price, outcomes)
            every, via = self.routes.setdefault(c.route, (Tally(), Tally()))
            every.add(c)
            if c.via_promise:
                via.add(c)
            if c.actual_usd is not None and c.comparator_usd is not None:
                series = self._series.setdefault(c.route, (
                    [[0.0, 0.0] for _ in range(self._n)], [[0.0, 0.0] for _ in range(self._n)]))
                b = self._bucket(r.get("created_at"))
                for kept in (series[0], series[1]) if c.via_promise else (series[0],):
                    kept[b][0] += c.actual_usd
                    kept[b][1] += c.comparator_usd

    def _compared(self, route: str) -> tuple[Tally, bool, int]:
        """The tally a route is judged by (its promise rows when it has a promise), whether
        it has one, and which of its series goes with that tally."""
        every, via = self.routes[route]
        promised = bool(self.promises.get(route)) or via.requests > 0
        return (via, True, 1) if promised else (every, False, 0)

    def routed(self) -> dict[str, Any]:
        """The headline: routed traffic only (not passthrough), each route against its own
        comparator, with the quality change over the same rows and cumulative series."""
        total, routes = Tally(), []
        actual, comparator = [0.0] * self._n, [0.0] * self._n
        for route in sorted(r for r in self.routes if r != "passthrough"):
            tally, _, which = self._compared(route)
            if not tally.requests:
                continue
            routes.append(route)
            total.merge(tally)
            for b, (a, c) in enumerate((self._series.get(route) or ([], []))[which]):
                actual[b] += a
                comparator[b] += c
        passthrough = self.routes.get("passthrough", (Tally(), Tally()))[0].requests
        every = sum(t.requests for r, (t, _) in self.routes.items() if r != "passthrough")
        q, money = total.quality(), total.money()
        return {"against": "reference", "routes": routes, "strongest": self.strongest,
                "requests": every,
                **money, **q, "quality_change": _label(q, money["compared"]),
                "passthrough_requests": passthrough,
                "cumulative_actual": list(accumulate(actual)),
                "cumulative_comparator": list(accumulate(comparator))}

    def route_savings(self) -> list[dict[str, Any]]:
        """One entry per route (configured ones and those seen), each saving beside its
        quality change; on a route with a promise only the rows with promise records are
        compared (``compared`` of ``requests``)."""
        out = []
        for route in sorted(self.routes, key=lambda r: (r == "passthrough", r)):
            every, _ = self.routes[route]
            if route == "passthrough":  # the client chose the model: nothing to compare
                out.append({"route": route, "against": None, "reference": None,
                            "promise": None, "requests": every.requests, "stand_in": 0,
                            "compared": 0, "saving_usd": None, "saving_share": None,
                            "quality_change_known": False,
                            "quality_change": "not compared: the client chose the model"})
                continue
            cfg = self.promises.get(route) or {}
            comp, promised, _ = self._compared(route)
            named = comp.comparators.most_common(1)
            reference = (cfg.get("reference") or (named[0][0] if named else None)
                         ) if promised else self.strongest
            q, money = comp.quality(), comp.money()
            out.append({
                "route": route,
                "against": "reference" if promised else "strongest",
                "reference": reference,
                "promise": cfg.get("max_drop", comp.first_drop if promised else None),
                "requests": every.requests,
                "stand_in": comp.stand_in,
                **money, **q,
                "quality_change": _label(q, money["compared"]),
            })
        return out


def _label(q: Mapping[str, Any], n: int) -> str:
    """The quality change in words, as the page shows it."""
    if not n:
        return "no requests compared"
    if not q["quality_change_known"]:
        return UNKNOWN
    est, mea = q["estimated_quality_change"], q["measured_quality_change"]
    on = f" (on {q['estimated_n']} of {n})" if q["estimated_n"] < n else ""
    parts = [f"estimated {est:+.3f}{on}" if est is not None else "estimated unknown"]
    if mea is None:
        parts.append("measured n/a")
    elif q["measured_n"] == 0:  # nothing to judge: every request went to the comparator
        parts.append(f"measured {mea:+.3f} ({q['measured_note']})")
    else:
        parts.append(f"measured {mea:+.3f} (n={q['measured_n']})")
    return ", ".join(parts)
