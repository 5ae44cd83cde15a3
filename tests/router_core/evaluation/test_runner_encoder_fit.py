"""An encoder that must be fitted (activations: layer, standardiser, PCA) sees train rows only."""

from __future__ import annotations

import numpy as np

from router_core.data.table import RoutingTable
from router_core.encoders.both import ConcatEncoder
from router_core.evaluation.runner import run_evaluation


class RecordingEncoder:
    """Φ = a fixed random vector per text; records what it was fitted on."""

    kind = "recording"
    needs_fit = True
    dim = 8

    def __init__(self) -> None:
        self.fitted_on: list[str] = []

    def fit(self, texts, outcomes, progress=False):
        self.fitted_on = list(texts)
        assert outcomes.shape == (len(texts), 2)
        return self

    def encode(self, texts, batch_size=32, progress=False):
        out = []
        for t in texts:
            v = np.random.default_rng(abs(hash(t)) % 2**32).normal(size=self.dim)
            out.append(v / np.linalg.norm(v))
        return np.array(out, dtype=np.float32)

    def settings(self):
        return {"kind": self.kind, "components": [1.0]}


def _table() -> RoutingTable:
    rng = np.random.default_rng(0)
    n = 90
    split = np.array(["train"] * 60 + ["val"] * 10 + ["test"] * 20, dtype=object)
    return RoutingTable(
        name="toy",
        prompt_ids=np.array([f"p{i}" for i in range(n)], dtype=object),
        prompts=np.array([f"prompt {i}" for i in range(n)], dtype=object),
        models=("a", "b"),
        quality=(rng.random((n, 2)) < 0.6).astype(float),
        cost=np.tile([1.0, 3.0], (n, 1)),
        split=split,
        category=np.array(["x", "y", "z"] * 30, dtype=object),
    )


def test_runner_fits_the_encoder_on_training_prompts_only_and_notes_its_settings():
    table = _table()
    enc = RecordingEncoder()
    both = ConcatEncoder([RecordingEncoder(), enc])
    res = run_evaluation(
        table,
        encoder=both,
        routers=["oracle", "knn", "shared_trunk"],
        n_boot=10,
        log=lambda _m: None,
    )
    assert enc.fitted_on == [f"prompt {i}" for i in range(60)]
    assert both.dim == 16
    # the fitted arrays stay out of the notes; the kind is recorded
    assert res.notes["encoder"]["kind"] == "both"
    assert res.notes["encoder"]["parts"][1] == {"kind": "recording"}
    assert set(res.metrics) == {"oracle", "knn", "shared_trunk"}
