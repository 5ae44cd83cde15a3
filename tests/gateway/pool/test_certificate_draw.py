"""A certificate's mix is served at its certified shares, whichever encoder placed the prompt.

A request is ranked on the static encoder's Φ̂ and, when that decision is not confident, again
on MiniLM's Φ (gateway/serving/plan/routing.py ``cascaded``). A draw keyed on Φ's bytes drew
twice, and a candidate served only when both draws took it: the live loop's region certified
for 7% of its prompts served its candidate 2 times in 423 (bench/routing/learning_loop.py).
The draw is keyed on the prompt's text (``text_share``): both passes draw alike, and over
many prompts the candidate's share is the certified one.
"""

from __future__ import annotations

import numpy as np

from gateway.pool.certificates import RouteCertificate, text_share

REF, CHEAP = "fake-frontier", "fake-cheap"
MIX = 0.3


def _certificate() -> RouteCertificate:
    centroid = np.zeros((1, 8), np.float32)
    centroid[0, 0] = 1.0
    return RouteCertificate(reference=REF, promise=0.03, backends=(REF, CHEAP),
                            centroids=centroid, mixes=({CHEAP: MIX},),
                            n_prompts=np.array([[0.0, 400.0]]),
                            upper=np.array([[0.0, 0.09]]), alpha=0.05, pairs=400)


def _phi(rng: np.random.Generator) -> np.ndarray:
    x = np.zeros(8, np.float32)
    x[0] = 1.0
    return x + 0.05 * rng.standard_normal(8).astype(np.float32)


def test_both_encoders_passes_draw_the_same_backend_at_the_certified_share() -> None:
    cert, rng = _certificate(), np.random.default_rng(0)
    texts = [f"prompt number {i}: what is {i} + {i}?" for i in range(2000)]
    static = [cert.choose(_phi(rng), text_share(t)) for t in texts]
    minilm = [cert.choose(_phi(rng), text_share(t)) for t in texts]  # another Φ, same text
    assert [a.backend for a in static] == [b.backend for b in minilm]
    share = np.mean([a.backend == CHEAP for a in static])
    # binomial(2000, 0.3): sd 0.010; the Φ-keyed double draw served ≈ 0.3² = 0.09
    assert abs(share - MIX) < 0.04


def test_a_phi_keyed_draw_would_not_agree_across_passes() -> None:
    """What the text key replaced: two Φ of one prompt drew independently."""
    cert, rng = _certificate(), np.random.default_rng(1)
    both = [cert.choose(_phi(rng)).backend == CHEAP and cert.choose(_phi(rng)).backend == CHEAP
            for _ in range(2000)]
    assert np.mean(both) < 0.15  # ≈ MIX², far below the certified MIX
