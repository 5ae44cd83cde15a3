"""One request on a route with a promise: the cheapest backend confidently within the drop.

The rule is router_core.promise's (``promise_choice``, its explanation ``explain``): with each
allowed backend's belief (p̂, n) on this prompt's q, the reference's estimate taken
optimistically and the candidate's pessimistically,

    D_h = (p̂_r + z·sd_r) − (p̂_h − z·sd_h),    E = {r} ∪ {h : D_h ≤ τ},    h* = argmin_E c_h

with c_h this request's expected cost. Fallbacks keep the promise as long as they can: the
rest of E by cost, then the reference, then the others by p̂. When the tenant's policy or a
cost cap leaves the reference out, the strongest allowed backend stands in for it and the
reason says so. The decision is logged in the usual ``Decision`` form (quality = p̂, score =
−D_h, the equivalent set = E) with the explanation record beside it; the record's
``promised_reference`` holds the route's own reference's p̂ on this prompt whether or not the
request may use it, and the chosen backend's estimated drop from it, so the drop can be read
per request.

Where the route has a certificate from judged pairs (gateway/pool/certificates.py) and this
prompt's region has a certified mix, the certificate decides instead: the prompt draws one of
the mix's backends or the reference (by its text, so the static and the MiniLM pass draw
alike), and the record's ``certificate`` (and the reason) says
so, with its evidence (judged prompts, drop bound). Elsewhere, the rule above.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gateway.pool import Pool
from gateway.pool.certificates import Certified
from gateway.pool.promise import RoutePromise
from gateway.serving.plan.routing import Routed
from router_core.promise import drop_bounds, explain
from router_core.runtime.decision import Candidate, Decision, NoEligibleModel


def promise_route(pool: Pool, promise: RoutePromise, phi: Any, by_rm: Mapping[str, str],
                  costs_usd: Mapping[str, float], max_cost_usd: float | None,
                  normaliser: float, share: float | None = None) -> Routed:
    """The promise decision over ``by_rm`` (expert -> backend) for Φ(x) = ``phi``; ``share``:
    the prompt's place in [0, 1) a certificate's mix draws on (certificates.text_share)."""
    experts = [e for e, b in by_rm.items() if e in pool.qualities
               and (max_cost_usd is None or costs_usd[b] <= max_cost_usd)]
    if not experts:
        raise NoEligibleModel("no backend satisfies the allowed list and maximum cost")
    router = pool.router
    q = router.project(phi)[0]
    P, N = pool.belief_stack(tuple(experts)).estimate(q[None, :])  # = stack_estimates(...)
    prior_view = pool.before_stack(tuple(experts))
    before = None if prior_view is None else prior_view.estimate(q[None, :])
    cost = np.array([costs_usd[by_rm[e]] for e in experts])
    ref_expert = pool.expert_of(promise.reference)
    stand_in = ref_expert not in experts
    ref = (int(np.argmax([pool.qualities[e].level for e in experts])) if stand_in
           else experts.index(ref_expert))
    names = [by_rm[e] for e in experts]
    record = explain(names, P[0], N[0], cost, ref, promise.max_drop, promise.z,
                     how=[pool.qualities[e].how for e in experts], tolerance=promise.tolerance,
                     before=before)  # fmt: skip
    cert = certified(pool, promise, phi, names, stand_in, share)
    if cert is not None:  # the region's certified mix decides (gateway/pool/certificates.py)
        record["chosen"] = cert.backend
        record["why"] = cert.reason(pool.certificates[promise.route].alpha)
        record["certificate"] = cert.explain()
    record["promised_reference"] = promised_reference(
        pool, promise, q, by_rm, experts, P[0], N[0], stand_in,
        float(P[0, names.index(record["chosen"])]), costs_usd, max_cost_usd)
    D = drop_bounds(P, N, ref, promise.z, before)[0]
    h = names.index(record["chosen"])
    within = [i for i in np.argsort(cost, kind="stable") if D[i] <= promise.tolerance]
    order = [h, *[i for i in within if i != h]]
    order += [ref] if ref not in order else []
    order += [i for i in np.argsort(-P[0], kind="stable") if i not in order]
    sims = {e.name: float(np.dot(e.descriptor, q)) for e in router.experts if e.name in experts}
    cands = tuple(Candidate(model=experts[i], similarity=sims[experts[i]],
                            quality=float(P[0, i]), cost=float(cost[i] / normaliser),
                            cost_usd=float(cost[i]),
                            score=-float(D[i]) if np.isfinite(D[i]) else -1e9)
                  for i in order)
    reason = (f"promise: {promise.describe()}; {record['why']}"
              + (f"; {names[ref]} stood in for the reference, which this request may not use"
                 if stand_in else ""))
    decision = Decision(chosen=experts[h], ranked=tuple(experts[i] for i in order),
                        candidates=cands, equivalent=tuple(experts[i] for i in within),
                        reason=reason, lam=0.0, delta=promise.tolerance)
    return Routed(decision=decision, router_version=router.version,
                  backends=tuple(names[i] for i in order), by_router_model=dict(by_rm),
                  priors=pool.priors, promise=record)


def certified(pool: Pool, promise: RoutePromise, phi: Any, names: list[str],
              stand_in: bool, share: float | None = None) -> Certified | None:
    """The route's certificate's pick for this prompt, when its region has a certified mix
    and the pick is a backend this request may use (else None: the prior-based rule). A
    certificate is against the route's reference: none applies while another stands in."""
    cert = pool.certificates.get(promise.route)
    if cert is None or stand_in or cert.reference != promise.reference:
        return None
    pick = cert.choose(phi, share)
    return pick if pick is not None and pick.backend in names else None


def promised_reference(pool: Pool, promise: RoutePromise, q: np.ndarray,
                       by_rm: Mapping[str, str], experts: list[str], p: np.ndarray,
                       n: np.ndarray, stand_in: bool, p_chosen: float,
                       costs_usd: Mapping[str, float], max_cost_usd: float | None) -> dict:
    """The route's reference on this prompt: its p̂ and n (estimated even when the request
    may not use it), whether it was allowed (else why not), and the estimated drop of the
    chosen backend from it, p̂_r − p̂_h*."""
    expert = pool.expert_of(promise.reference)
    if not stand_in:
        i = experts.index(expert)
        p_ref, n_ref = float(p[i]), float(n[i])
    elif expert in pool.qualities:
        P1, N1 = pool.belief_stack((expert,)).estimate(q[None, :])
        p_ref, n_ref = float(P1[0, 0]), float(N1[0, 0])
    else:
        p_ref = n_ref = None
    if not stand_in:
        why_not = None
    elif promise.reference not in by_rm.values():
        why_not = "not allowed (tenant policy or the request's allowed_models)"
    elif max_cost_usd is not None and costs_usd.get(promise.reference, 0.0) > max_cost_usd:
        why_not = f"over max_cost_usd={max_cost_usd:g}"
    else:
        why_not = "not routable"
    return {"backend": promise.reference, "allowed": not stand_in, "why_not": why_not,
            "p": None if p_ref is None else round(p_ref, 4),
            "n": None if n_ref is None else round(n_ref, 1),
            "estimated_drop": None if p_ref is None else round(p_ref - p_chosen, 4)}
