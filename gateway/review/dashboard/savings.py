"""The saving, always beside the quality change it costs (pure functions, no I/O).

A saving is only half a claim: what it cost in quality is the other half, so every saving
this module returns carries its quality change against the same comparator, estimated and
measured, or says the quality change is unknown.

Per route (``route_savings``), over the window's answered requests:

- A route with a promise (``routes.NAME.max_drop``) is compared with its **reference**. Each
  routed row carries the rule's record per candidate (``candidates[i].promise``: p̂, cost,
  drop bound...) and its reason names the reference ("promise: within 0.01 of R (...)"; a
  stand-in when the request could not use R). Over the rows with records:
  saving = Σ (c_ref − c_chosen) with the records' expected costs, share = saving / Σ c_ref;
  estimated quality change = mean (p̂_chosen − p̂_ref), the route's own estimate.
- A route without a promise, and passthrough, keep the saving against the **strongest**
  backend s (the dearest by p_in + p_out): ĉ_s = n_prompt·p_in,s + n_completion·p_out,s at
  the request's own token counts, saving = Σ ĉ_s − Σ c; the estimated quality change is
  mean (p̂_chosen − p̂_s) over the rows whose candidates include s with a p̂, else unknown.
- **Measured** (both kinds): on the rows not answered by the comparator, the judged ones
  are those where observations (paired, judge, shadow, feedback; queries.judged_outcomes)
  exist on the prompt for both the answered backend's and the comparator's router model;
  measured change = (share of rows not answered by the comparator) × mean (q_chosen −
  q_comparator) over the judged rows (rows answered by the comparator itself change
  nothing), n = judged prompts; with none judged it is unknown ("n/a"), with every row on
  the comparator it is 0.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

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
        return _Compared(route, ref_name, stand_in, float(pc["cost"]), float(pr["cost"]),
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


def quality_change(compared: Sequence[_Compared]) -> dict[str, Any]:
    """Estimated and measured quality change over rows compared with one comparator."""
    est = [c.estimated for c in compared if c.estimated is not None]
    known = [c for c in compared if c.on_comparator is not None]
    off = [c for c in known if not c.on_comparator]
    judged = [c.measured for c in off if c.measured is not None]
    if known and not off:
        measured, note = 0.0, "every request answered by the comparator"
    elif judged:
        measured, note = len(off) / len(known) * float(np.mean(judged)), None
    else:
        measured, note = None, "n/a"
    return {
        "estimated_quality_change": float(np.mean(est)) if est else None,
        "estimated_n": len(est),
        "measured_quality_change": measured,
        "measured_n": len(judged),
        "measured_note": note,
        "off_comparator_share": len(off) / len(known) if known else None,
        "quality_change_known": bool(est) or measured is not None,
    }


def _money(compared: Sequence[_Compared]) -> dict[str, Any]:
    priced = [c for c in compared if c.actual_usd is not None and c.comparator_usd is not None]
    actual = float(sum(c.actual_usd for c in priced))  # type: ignore[misc]
    comp = float(sum(c.comparator_usd for c in priced))  # type: ignore[misc]
    return {"compared": len(priced), "actual_usd": actual, "comparator_usd": comp,
            "saving_usd": comp - actual if priced else None,
            "saving_share": (comp - actual) / comp if comp > 0 else None}


def strongest_backend(prices: Mapping[str, Any]) -> str | None:
    return max(prices, key=lambda n: prices[n].input_per_token + prices[n].output_per_token,
               default=None)


def route_savings(rows: Iterable[Mapping[str, Any]], prices: Mapping[str, Any],
                  outcomes: Mapping[str, Mapping[str, float]],
                  promises: Mapping[str, Mapping[str, Any]], routes: Sequence[str] = ()
                  ) -> list[dict[str, Any]]:
    """One entry per route (configured ones and those seen in the window), each saving
    beside its quality change; ``rows`` are the answered ones, ``promises`` route ->
    {reference, max_drop} from the pool. On a route with a promise only the rows with
    promise records are compared (``compared`` of ``requests``)."""
    strongest = strongest_backend(prices)
    sp = prices[strongest] if strongest is not None else None
    by_route: dict[str, list[_Compared]] = {r: [] for r in routes}
    for r in rows:
        c = compare_row(r, strongest, sp, outcomes)
        by_route.setdefault(c.route, []).append(c)
    out = []
    for route in sorted(by_route, key=lambda r: (r == "passthrough", r)):
        seen = by_route[route]
        cfg = promises.get(route) or {}
        promised = bool(cfg) or any(c.via_promise for c in seen)
        comp = [c for c in seen if c.via_promise] if promised else seen
        names = [c.comparator for c in comp if c.comparator and not c.stand_in]
        reference = (cfg.get("reference") or (max(set(names), key=names.count) if names
                                              else None)) if promised else strongest
        q, money = quality_change(comp), _money(comp)
        out.append({
            "route": route,
            "against": "reference" if promised else "strongest",
            "reference": reference,
            "promise": cfg.get("max_drop", comp[0].max_drop if comp and promised else None),
            "requests": len(seen),
            "stand_in": sum(c.stand_in for c in comp),
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


def overall_saving(answered: pd.DataFrame, rows: Sequence[Mapping[str, Any]],
                   prices: Mapping[str, Any], outcomes: Mapping[str, Mapping[str, float]],
                   n_buckets: int) -> dict[str, Any]:
    """Today's saving against always using the strongest backend (the cumulative chart),
    with the quality change against that same backend beside it."""
    strongest = strongest_backend(prices)
    saving: dict[str, Any] = {"strongest": strongest}
    if strongest is None:
        return {**saving, "compared": 0, "quality_change": UNKNOWN,
                "quality_change_known": False}
    ps = prices[strongest]
    est = (answered["prompt_tokens"] * ps.input_per_token
           + answered["completion_tokens"] * ps.output_per_token)
    actual_b = answered.groupby("bucket")["cost_usd"].sum()
    est_b = est.groupby(answered["bucket"]).sum()
    saving.update({
        "actual_usd": float(answered["cost_usd"].sum()),
        "strongest_usd": float(est.sum()),
        "cumulative_actual": np.cumsum(
            [float(actual_b.get(b, 0.0)) for b in range(n_buckets)]).tolist(),
        "cumulative_strongest": np.cumsum(
            [float(est_b.get(b, 0.0)) for b in range(n_buckets)]).tolist(),
    })
    saving["saving_usd"] = saving["strongest_usd"] - saving["actual_usd"]
    saving["saving_share"] = (saving["saving_usd"] / saving["strongest_usd"]
                              if saving["strongest_usd"] > 0 else None)
    compared = [compare_row(r, strongest, ps, outcomes, use_promise=False) for r in rows]
    q = quality_change(compared)
    return {**saving, **q, "compared": len(compared),
            "quality_change": _label(q, len(compared))}
