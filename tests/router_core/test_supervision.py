"""DARS aggregates, utilities, positives, bands, CARO pairs and mixing on hand-made data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from router_core.data.table import RoutingTable
from router_core.training import supervision as sv


def _obs() -> pd.DataFrame:
    # p1: cheap model right 2 of 3 times, big model right 3 of 3; p2: only cheap, once wrong.
    rows = [
        ("p1", "cheap", 1.0, 0.001),
        ("p1", "cheap", 0.0, 0.003),
        ("p1", "cheap", 1.0, 0.002),
        ("p1", "big", 1.0, 0.010),
        ("p1", "big", 1.0, 0.010),
        ("p1", "big", 1.0, 0.010),
        ("p2", "cheap", 0.0, 0.002),
    ]
    return pd.DataFrame(rows, columns=["prompt_key", "model", "quality", "cost"])


def test_aggregates_match_hand_computed_mean_spread_cost():
    agg = sv.aggregate(_obs(), models=["cheap", "big", "absent"])
    assert list(agg.prompt_keys) == ["p1", "p2"]
    assert agg.models == ("cheap", "big", "absent")
    np.testing.assert_allclose(agg.mean_quality[0, :2], [2 / 3, 1.0])
    np.testing.assert_allclose(agg.spread[0, :2], [np.sqrt(2 / 9), 0.0])  # population std
    np.testing.assert_allclose(agg.mean_cost[0, :2], [0.002, 0.010])
    assert agg.count.tolist() == [[3, 3, 0], [1, 0, 0]]
    assert np.isnan(agg.mean_quality[1, 1]) and np.isnan(agg.spread[1, 2])
    assert agg.spread[1, 0] == 0.0  # one sample: no spread


def test_utility_is_mean_minus_lambda_cost_minus_beta_spread():
    agg = sv.aggregate(_obs(), models=["cheap", "big"])
    # c̃ = c̄ / max model mean cost; big's mean cost 0.010 is the max
    u = agg.utility(lam=0.5, beta=0.2)
    expected_cheap = 2 / 3 - 0.5 * (0.002 / 0.010) - 0.2 * np.sqrt(2 / 9)
    np.testing.assert_allclose(u[0], [expected_cheap, 1.0 - 0.5])
    assert np.isnan(u[1, 1])
    # β = 0 is plain expected utility; risk lowers the noisy cheap model only
    u0 = agg.utility(lam=0.5, beta=0.0)
    assert u0[0, 0] > u[0, 0] and u0[0, 1] == u[0, 1]


def test_positives_use_aggregates_not_single_samples():
    agg = sv.aggregate(_obs(), models=["cheap", "big"])
    pos = sv.positives(agg, beta=0.2)
    # 2 of 3 right: 0.667 − 0.2·0.471 = 0.572 ≥ 0.5 → positive; p2 cheap (0/1) is not
    assert pos.tolist() == [[True, True], [False, False]]
    # a very risk-averse β turns the inconsistent cheap model into a non-positive
    assert sv.positives(agg, beta=0.5).tolist()[0] == [False, True]


def test_cost_bands_are_quantiles_of_model_cost():
    bands = sv.cost_bands(np.array([0.1, 0.2, 0.3, 0.4, 0.5, 10.0]), n_bands=3)
    assert bands.tolist() == [0, 0, 1, 1, 2, 2]
    assert sv.cost_bands(np.array([1.0, np.nan, 3.0]), n_bands=5).tolist() == [1, 0, 2]


def test_band_positives_group_positive_models_by_cost_band():
    agg = sv.aggregate(_obs(), models=["cheap", "big"])
    bp = sv.band_positives(agg, n_bands=2)
    assert [g.tolist() for g in bp[0]] == [[0], [1]]  # one band each, cheapest first
    assert bp[1] == []


def test_caro_pairs_prefer_higher_utility_then_cheaper_among_equals():
    obs = pd.DataFrame(
        [
            ("x", "a", 1.0, 1.0),
            ("x", "b", 1.0, 2.0),
            ("x", "c", 0.0, 0.5),
        ],
        columns=["prompt_key", "model", "quality", "cost"],
    )
    agg = sv.aggregate(obs, models=["a", "b", "c"])
    pairs = sv.caro_pairs(agg, lam=0.0, delta=0.02, rho=0.5)
    got = {
        (int(b), int(w), bool(c), float(wt))
        for b, w, c, wt in zip(pairs.better, pairs.worse, pairs.by_cost, pairs.weight)
    }
    # a, b beat c on utility; a beats b only on cost (equal utility), with weight ρ
    assert got == {(0, 2, False, 1.0), (1, 2, False, 1.0), (0, 1, True, 0.5)}
    # with a large λ the cheap wrong model's utility is not enough to flip the order
    assert len(sv.caro_pairs(agg, lam=10.0, delta=0.02)) == 3


def test_holdout_mask_is_stable_and_near_the_fraction():
    keys = [f"k{i}" for i in range(2000)]
    m1 = sv.holdout_mask(keys, 0.2)
    m2 = sv.holdout_mask(list(reversed(keys)), 0.2)[::-1]
    assert (m1 == m2).all()
    assert 0.17 < m1.mean() < 0.23


def test_to_table_uses_risk_adjusted_quality_and_mean_cost():
    agg = sv.aggregate(_obs(), models=["cheap", "big"])
    t = sv.to_table(agg, {"p1": "text one", "p2": "text two"}, beta=0.2, labels="risk")
    assert isinstance(t, RoutingTable)
    assert t.prompts.tolist() == ["text one", "text two"]
    np.testing.assert_allclose(t.quality[0], [2 / 3 - 0.2 * np.sqrt(2 / 9), 1.0])
    # default labels: both positives of p1 tie at 1 (the cheaper then wins on cost)
    tp = sv.to_table(agg, beta=0.2)
    assert tp.quality[0].tolist() == [1.0, 1.0] and tp.quality[1, 0] == 0.0
    assert tp.prompts.tolist() == ["p1", "p2"]
    np.testing.assert_allclose(t.cost[0], [0.002, 0.010])
    assert np.isnan(t.quality[1, 1]) and (t.split == "train").all()


def test_single_shot_keeps_exactly_one_observation_per_pair():
    one = sv.single_shot(_obs(), seed=3)
    assert len(one) == 3
    assert set(zip(one.prompt_key, one.model)) == {("p1", "cheap"), ("p1", "big"), ("p2", "cheap")}


def _table(n: int, models: tuple[str, ...], tag: str) -> RoutingTable:
    rng = np.random.default_rng(0)
    return RoutingTable(
        name=tag,
        prompt_ids=np.array([f"{tag}{i}" for i in range(n)], dtype=object),
        prompts=np.array([f"prompt {tag} {i}" for i in range(n)], dtype=object),
        models=models,
        quality=rng.integers(0, 2, (n, len(models))).astype(float),
        cost=np.ones((n, len(models))),
        split=np.array(["train"] * n, dtype=object),
    )


@pytest.mark.parametrize("weight", [0.25, 0.5, 0.8])
def test_mix_reaches_the_configured_share_without_dropping_rows(weight):
    base = _table(100, ("a", "b"), "base")
    obs = _table(30, ("b", "c"), "obs")
    mixed = sv.mix(base, obs, weight, seed=1)
    assert mixed.models == ("a", "b", "c")
    from_obs = np.char.startswith(mixed.prompt_ids.astype(str), "obs")
    assert abs(from_obs.mean() - weight) < 0.02
    assert set(mixed.prompt_ids[from_obs]) == set(obs.prompt_ids)
    assert set(mixed.prompt_ids[~from_obs]) == set(base.prompt_ids)
    # observed rows have NaN for the base-only model and vice versa
    assert np.isnan(mixed.quality[from_obs, 0]).all()
    assert np.isnan(mixed.quality[~from_obs, 2]).all()


def test_mix_extremes():
    base = _table(10, ("a",), "base")
    obs = _table(5, ("a",), "obs")
    assert sv.mix(base, obs, 1.0) is obs
    assert len(sv.mix(base, obs, 0.0)) == 10
    assert sv.mix(None, obs, 0.3) is obs
    with pytest.raises(ValueError):
        sv.mix(base, obs, 1.5)


def test_table_observations_round_trip():
    t = _table(6, ("a", "b"), "t")
    obs = sv.table_observations(t)
    assert len(obs) == 12
    agg = sv.aggregate(obs, models=t.models)
    np.testing.assert_allclose(agg.mean_quality, t.quality)


def test_invalid_observations_are_refused():
    with pytest.raises(ValueError):
        sv.aggregate([{"prompt_key": "p", "model": "m", "quality": 1.5, "cost": 0.0}])
    with pytest.raises(ValueError):
        sv.aggregate([{"prompt_key": "p", "model": "m", "quality": 1.0}])
