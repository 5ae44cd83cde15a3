"""The ``x-tollgate-*`` headers of a request's response, read from its ``Outcome``
(gateway/serving/record/outcome.py): its id, the router version that planned it
(``passthrough`` for a request that named its backend), the backend that answered, the output
cap the budget lowered it to, the certificate a promise was kept by, the response cache's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.serving.plan.planning import PASSTHROUGH_VERSION

if TYPE_CHECKING:
    from gateway.serving.record.outcome import Outcome


def tollgate_headers(out: Outcome) -> dict[str, str]:
    plan = out.plan
    version = plan.router_version if plan else PASSTHROUGH_VERSION
    h = {"x-tollgate-request-id": out.rid, "x-tollgate-router-version": version}
    if out.answered is not None:
        h["x-tollgate-model"] = out.answered.model_name
    if out.output_cap is not None:
        h["x-tollgate-output-cap"] = str(out.output_cap)
    cert = ((plan.routed.promise or {}).get("certificate")
            if plan is not None and plan.routed is not None else None)
    if cert is not None:  # a certificate from judged pairs decided (promise_routing.py)
        bound = "none" if cert["upper_drop"] is None else f"{cert['upper_drop']:.4f}"
        h["x-tollgate-certificate"] = (f"region={cert['region']}; "
                                       f"n_prompts={cert['n_prompts']}; drop_bound={bound}")
    if out.cache is not None:
        h.update(out.cache.headers())
    return h
