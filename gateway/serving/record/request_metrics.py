"""What a finished request adds to the Prometheus metrics (gateway/review/metrics.py names
them): its count and latency by route, what timed-out attempts were charged, and the answering
backend's cost and tokens. Read from the ``Outcome`` (gateway/serving/record/outcome.py) once,
when it finishes.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.serving.record.outcome import Outcome


def count_request(out: Outcome, status: int) -> None:
    """The request's metrics; a unit call counts tokens only when its input is counted in
    tokens (``Outcome.by_tokens``: embeddings), and then only its prompt."""
    m, route = out.ctx.metrics, out.route_label
    model = out.answered.model_name if out.answered else "none"
    stream = str(bool(out.plan and out.plan.request.stream)).lower()
    m.requests.labels(route, model, str(status), stream).inc()
    m.latency.labels(route, stream).observe(time.perf_counter() - out.t0)
    for backend, usd in out.timeout_charges:
        m.timeout_charges.labels(backend).inc()
        m.timeout_charged_usd.labels(backend).inc(usd)
        m.cost.labels(backend).inc(usd)
    if out.answered is not None and not out.cache_hit:
        m.cost.labels(model).inc(out.answer_cost())
        if out.unit is None or out.by_tokens:
            m.tokens.labels(model, "prompt").inc(out.prompt_tokens or 0)
        if out.unit is None:
            m.tokens.labels(model, "completion").inc(out.completion_tokens or 0)
