"""The encoder cascade (router_core/tuning/cascade_fit.py) on real encoders and the packaged router:
the static encoder's decision stands when its margin clears the threshold, MiniLM decides the
rest, and an artifact keeps its cascade through save and load."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from router_core.artifact import load_router, save_router
from router_core.encoders import make_encoder
from router_core.runtime.margin import decision_margin
from router_core.tuning.cascade_fit import STATIC_KIND, cascade_choices, fit_cascade, route_text

LAMS = np.array([0.0, 0.1, 0.5, 2.0])


class Counting:
    """A real encoder that counts its calls (how the test sees whether MiniLM ran)."""

    def __init__(self, encoder):
        self.encoder, self.kind, self.calls = encoder, encoder.kind, 0

    def encode(self, texts):
        self.calls += 1
        return self.encoder.encode(texts)


@pytest.fixture(scope="module")
def fitted(mbpp_table):
    """The packaged router (int8 MiniLM) with a cascade fitted on 120 mbpp prompts and its
    threshold on 120 others; 80 more are held out."""
    router = load_router()
    full = make_encoder(dict(router.config["encoder"]))
    static = make_encoder({**full.settings(), "kind": STATIC_KIND})
    prompts = [str(p) for p in mbpp_table.prompts[:320]]
    X_full, X_static = full.encode(prompts), static.encode(prompts)
    cascaded = fit_cascade(router, X_full[:120], X_static[:120], X_full[120:240],
                           X_static[120:240], LAMS, static.settings(), agreement=0.9)
    return cascaded, full, static, prompts[240:]


def test_the_static_decision_stands_when_confident_and_minilm_decides_otherwise(fitted):
    router, full, static, held_out = fitted
    t = router.cascade.threshold
    assert 0.0 < t < 1.0  # neither every decision trusted nor none
    full_counted = Counting(full)
    sources = []
    for text in held_out:
        phi = router.cascade.estimate(static.encode([text]))
        on_static = router.route(router.project(phi)[0], 0.5)
        on_full = router.route(router.project(full.encode([text]))[0], 0.5)
        before = full_counted.calls
        decision = route_text(router, text, static, full_counted, 0.5)
        if decision_margin(on_static) >= t:
            assert full_counted.calls == before  # MiniLM never ran
            assert decision.encoder == STATIC_KIND
            assert decision.ranked == on_static.ranked
        else:
            assert full_counted.calls == before + 1
            assert decision.encoder == full.kind
            assert decision.ranked == on_full.ranked
        sources.append(decision.encoder)
    assert set(sources) == {STATIC_KIND, full.kind}  # both paths taken on real prompts
    assert not hasattr(router.cascade, "counts")  # deciding writes nothing on the router


def test_the_batched_cascade_is_the_single_one(fitted):
    router, full, static, held_out = fitted
    # one text per call, as served: int8 MiniLM's activations are quantised per batch
    X_full = np.vstack([full.encode([t]) for t in held_out])
    X_static = np.vstack([static.encode([t]) for t in held_out])
    idx, ran_full = cascade_choices(router, X_full, X_static, np.array([0.5]),
                                    router.cascade.threshold)
    names = np.asarray(router.model_names)
    singles = [route_text(router, t, static, full, 0.5) for t in held_out]
    assert list(names[idx[0]]) == [d.chosen for d in singles]
    assert list(ran_full[0]) == [d.encoder == full.kind for d in singles]


def test_the_thresholds_extremes(fitted):
    router, full, static, held_out = fitted
    never = replace(router, cascade=replace(router.cascade, threshold=float("inf")))
    always = replace(router, cascade=replace(router.cascade, threshold=0.0))
    text = held_out[0]
    assert route_text(never, text, static, full, 0.5).encoder == full.kind
    assert route_text(always, text, static, full, 0.5).encoder == STATIC_KIND


def test_an_artifact_keeps_its_cascade(fitted, tmp_path):
    """The head is stored in half precision and served exactly as it was fitted: the fit
    rounds it before choosing the threshold, so nothing changes on the way to disk."""
    router, _full, static, held_out = fitted
    save_router(router, tmp_path / "r")
    with np.load(tmp_path / "r" / "arrays.npz") as z:
        assert z["cascade.head.0.weight"].dtype == np.float16
        assert z["head.0.weight"].dtype == np.float32  # the router's own head is not rounded
    back = load_router(tmp_path / "r")
    assert back.cascade.head.layers[0][0].dtype == np.float32
    assert back.cascade.threshold == router.cascade.threshold
    assert back.cascade.encoder == router.cascade.encoder
    for (w, b), (w2, b2) in zip(router.cascade.head.layers, back.cascade.head.layers):
        np.testing.assert_array_equal(w, w2)
        np.testing.assert_array_equal(b, b2)
    X = static.encode(held_out[:10])
    np.testing.assert_array_equal(router.cascade.estimate(X), back.cascade.estimate(X))
    assert back.without_expert(back.model_names[0]).cascade is back.cascade


def test_the_static_head_is_trained_to_the_routers_own_estimates(fitted, mbpp_table):
    """EstimateMatch reads p̂ through the frozen router exactly as the router does, is zero
    when Φ̂ = Φ, and on prompts it did not see the trained head's estimates sit closer to
    MiniLM's than another prompt's do."""
    import torch

    from router_core.losses import EstimateMatch, router_quality

    router, full, static, held_out = fitted
    X = full.encode(held_out)
    quality = router_quality(router)
    np.testing.assert_allclose(quality(torch.tensor(X)).numpy(),
                               router.quality_estimates(router.project(X)), atol=1e-5)
    match = EstimateMatch(quality, weight=10.0)
    assert float(match(torch.tensor(X), torch.tensor(X))) == pytest.approx(0.0, abs=1e-6)
    trained = router.quality_estimates(router.project(router.cascade.estimate(
        static.encode(held_out))))
    want = router.quality_estimates(router.project(X))
    shuffled = router.quality_estimates(router.project(X[::-1].copy()))
    # measured 0.057 against 0.103 for another prompt's estimates (120 training prompts)
    assert np.abs(trained - want).mean() < 0.75 * np.abs(shuffled - want).mean()


def test_word_windows_are_short_consecutive_runs_of_each_prompt():
    from router_core.tuning.cascade_fit import word_windows

    prompts = [" ".join(f"w{i}_{j}" for j in range(n)) for i, n in enumerate((3, 40, 400))]
    windows = word_windows(prompts, seed=3)
    assert windows == word_windows(prompts, seed=3) != word_windows(prompts, seed=4)
    for prompt, window in zip(prompts, windows):
        words = window.split()
        assert 1 <= len(words) <= 60 and window in prompt
        assert len(words) >= min(5, len(prompt.split()))
    assert word_windows([""]) == [""]
