"""The routing hook of the encoder cascade (gateway/serving/plan/routing.py ``cascaded``) on real
encoders, the packaged router given a cascade fitted on real prompts, the real
``route_request`` and the real batched MiniLM (``EmbeddingBatcher``): the static decision
stands when its margin clears the threshold, MiniLM decides the rest, and a static encoder
that does not give the recorded vectors is never trusted."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

import numpy as np
import pytest

from gateway.serving.plan.embedding import EmbeddingBatcher
from gateway.serving.plan.routing import (
    Routed,
    cascaded,
    route_request,
    routed_margin,
    warm_cascade,
)
from router_core.artifact import load_router
from router_core.data import load_dataset
from router_core.encoders import make_encoder
from router_core.tuning.cascade_fit import STATIC_KIND, fit_cascade

HANG = 120  # a hook that never returns fails the test instead of hanging it


@dataclass(frozen=True)
class Ranked:
    """The part of a plan the hook reads and rewrites."""

    routed: Routed


@pytest.fixture(scope="module")
def setup():
    router = load_router()
    full = make_encoder(dict(router.config["encoder"]))
    static = make_encoder({**full.settings(), "kind": STATIC_KIND})
    table = load_dataset("routerbench")
    prompts = [str(p) for p in table.prompts[np.asarray(table.category, str) == "mbpp"][:300]]
    X_full, X_static = full.encode(prompts), static.encode(prompts)
    check = {"text": prompts[0], "vector": [float(v) for v in X_static[0]]}
    router = fit_cascade(router, X_full[:120], X_static[:120], X_full[120:240],
                         X_static[120:240], np.array([0.0, 0.1, 0.5, 2.0]), static.settings(),
                         agreement=0.9, check=check)
    return router, full, prompts[240:]


def _rank(router):
    names = router.model_names
    costs = {e.name: e.cost_usd for e in router.experts}
    return lambda phi: Ranked(route_request(router, phi, lam=0.5, delta=None,
                                            backends_by_router_model={n: n for n in names},
                                            costs_usd_by_backend=costs, max_cost_usd=None))


async def _decide_all(router, full, texts):
    batcher = EmbeddingBatcher(full.encode)
    out = []
    try:
        for text in texts:
            before = len(batcher.batch_sizes)
            plan = await cascaded(router, text, batcher.embed, _rank(router))
            out.append((plan, len(batcher.batch_sizes) > before))
    finally:
        batcher.close()
    return out


def test_the_static_decision_stands_when_confident_else_minilm_decides(setup):
    router, full, texts = setup
    static = router.cascade.static_encoder(make_encoder)
    assert static is not None  # the recorded check vector matches this install's encoder
    decided = asyncio.run(asyncio.wait_for(_decide_all(router, full, texts), HANG))
    rank = _rank(router)
    kinds = []
    for text, (plan, ran_minilm) in zip(texts, decided):
        on_static = rank(router.cascade.estimate(static.encode([text]))).routed
        confident = routed_margin(on_static) >= router.cascade.threshold
        assert ran_minilm is not confident
        expected = on_static if confident else rank(full.encode([text])).routed
        assert plan.routed.decision.ranked == expected.decision.ranked
        assert plan.routed.decision.encoder == (STATIC_KIND if confident else full.kind)
        kinds.append(plan.routed.decision.encoder)
    assert set(kinds) == {STATIC_KIND, full.kind}
    assert not hasattr(router.cascade, "counts")  # planning is pure: the decision names its
    # encoder and record_routing counts it in the metrics (tests/gateway/review/ metrics)
    assert "encoder" in decided[0][0].routed.decision.to_dict()  # logged with the decision


def test_a_static_encoder_unlike_the_recorded_one_is_never_trusted(setup):
    router, full, texts = setup
    fit = dict(router.cascade.fit)
    fit["check"] = {**fit["check"], "vector": list(-np.asarray(fit["check"]["vector"]))}
    # a fresh cascade (its own encoder slot) whose check no longer matches
    doubtful = replace(router, cascade=replace(router.cascade, fit=fit, _built=[]))
    decided = asyncio.run(asyncio.wait_for(_decide_all(doubtful, full, texts[:5]), HANG))
    assert all(ran for _, ran in decided)
    assert {p.routed.decision.encoder for p, _ in decided} == {full.kind}


def test_warm_cascade_builds_the_packaged_routers_static_encoder() -> None:
    """``warm_cascade`` (which the gateway's lifespan awaits, gateway/app.py) builds and checks
    the static encoder, so no routed request waits for it. (That the lifespan calls it is
    not asserted here: the packaged router's gateway is served only by subprocess tests.)"""
    router = load_router()
    assert router.cascade is not None and not router.cascade._built
    asyncio.run(asyncio.wait_for(warm_cascade(router), HANG))
    assert router.cascade._built and router.cascade._built[0] is not None
