"""The decision rule on hand-made candidates (router_core/runtime/decision.py)."""

import json

import numpy as np
import pytest

from router_core.runtime.decision import NoEligibleModel, decide


def test_cheapest_of_the_equivalent_set_wins() -> None:
    d = decide(["big", "small", "bad"], similarity=np.array([0.9, 0.8, 0.1]),
               quality=np.array([0.80, 0.79, 0.30]), cost=np.array([1.0, 0.1, 0.0]),
               lam=0.0, delta=0.02)
    assert d.chosen == "small"
    assert set(d.equivalent) == {"big", "small"}
    assert d.ranked == ("small", "big", "bad")
    assert "cheapest of 2 equivalent" in d.reason


def test_a_candidate_with_a_nan_score_is_left_out_not_chosen() -> None:
    d = decide(["broken", "ok"], similarity=np.array([0.9, 0.5]),
               quality=np.array([np.nan, 0.6]), cost=np.array([0.0, 0.5]), lam=0.1, delta=0.0,
               cost_usd=[0.0, 0.01])
    assert d.chosen == "ok"
    assert d.ranked == ("ok",)
    assert d.candidates[0].cost_usd == 0.01
    with pytest.raises(NoEligibleModel):
        decide(["broken"], similarity=np.array([0.9]), quality=np.array([np.nan]),
               cost=np.array([0.0]), lam=0.1, delta=0.0)


def test_to_dict_holds_every_field_as_plain_json_types() -> None:
    from dataclasses import asdict, fields

    from router_core.runtime.decision import Decision

    d = decide(["a", "b"], np.array([0.9, 0.5]), np.array([0.8, 0.7]), np.array([1.0, 0.1]),
               lam=0.2, delta=0.05, cost_usd=[0.01, None])
    out = d.to_dict()
    # ``encoder`` (which encoder of a cascade decided) is written only when there is one
    assert d.encoder is None and set(out) == {f.name for f in fields(Decision)} - {"encoder"}
    assert out["ranked"] == list(d.ranked) and out["equivalent"] == list(d.equivalent)
    assert out["candidates"] == [asdict(c) for c in d.candidates]
    lists = ("ranked", "equivalent", "candidates", "encoder")
    assert {k: v for k, v in out.items() if k not in lists} \
        == {k: v for k, v in asdict(d).items() if k not in lists}
    json.dumps(out)  # the log row stores it as JSON
    from dataclasses import replace
    cascaded = replace(d, encoder="minilm-static").to_dict()
    assert set(cascaded) == {f.name for f in fields(Decision)}
    assert cascaded["encoder"] == "minilm-static"
