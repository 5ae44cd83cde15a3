"""The promise rule on hand-made beliefs: reference when uncertain, cheap when confident."""

import numpy as np

from router_core.promise import drop_bounds, explain, promise_choice

COST = np.array([10.0, 1.0, 0.1])  # reference, mid, cheap


def test_uncertain_reference_keeps_the_reference():
    # the cheap ones look as good as the reference, but the reference is barely known
    P = np.array([[0.8, 0.8, 0.8]])
    N = np.array([[2.0, 1000.0, 1000.0]])
    assert promise_choice(P, N, COST, ref=0, max_drop=0.01, z=1.0)[0] == 0


def test_uncertain_candidate_is_not_chosen():
    P = np.array([[0.65, 0.7, 0.7]])
    N = np.array([[1000.0, 1.0, 1.0]])
    assert promise_choice(P, N, COST, ref=0, max_drop=0.01, z=1.0)[0] == 0


def test_confidently_within_picks_the_cheapest():
    P = np.array([[0.70, 0.80, 0.78]])
    N = np.array([[500.0, 500.0, 500.0]])
    assert promise_choice(P, N, COST, ref=0, max_drop=0.01, z=1.0)[0] == 2


def test_never_confidently_outside():
    rng = np.random.default_rng(0)
    P = rng.uniform(0.05, 0.95, size=(2000, 3))
    N = rng.uniform(1, 300, size=(2000, 3))
    z, drop = 1.5, 0.03
    h = promise_choice(P, N, COST, ref=0, max_drop=drop, z=z)
    D = drop_bounds(P, N, 0, z)
    assert np.all(D[np.arange(len(h)), h] <= drop)
    # and a cheaper backend within the promise was never passed over
    ok = D <= drop
    for i in range(len(h)):
        assert COST[h[i]] == COST[ok[i]].min()


def test_infinite_confidence_is_always_the_reference():
    P = np.array([[0.1, 0.99, 0.99]])
    N = np.full((1, 3), 1e6)
    assert promise_choice(P, N, COST, ref=0, max_drop=0.06, z=np.inf)[0] == 0


def test_explain_record_names_reference_bounds_and_choice():
    rec = explain(["ref", "mid", "cheap"], [0.70, 0.80, 0.78], [500, 500, 500], COST,
                  ref=0, max_drop=0.01, z=1.0, how=["prior:aggregate", "trained", "trained"])
    assert rec["chosen"] == "cheap"
    assert rec["reference"]["backend"] == "ref" and rec["reference"]["upper"] > 0.70
    by = {c["backend"]: c for c in rec["candidates"]}
    assert by["cheap"]["within"] and by["cheap"]["drop_bound"] <= 0.01
    assert by["cheap"]["known"] == "trained"


def test_tolerance_keeps_the_average_bound_within_the_promise():
    from router_core.promise import tolerance_for

    rng = np.random.default_rng(1)
    P = rng.uniform(0.3, 0.99, size=(500, 3))
    N = rng.uniform(5, 300, size=(500, 3))
    for drop in (0.01, 0.03, 0.06):
        tau = tolerance_for(P, N, COST, 0, drop, z=1.0)
        h = promise_choice(P, N, COST, 0, tau, z=1.0)
        D = drop_bounds(P, N, 0, 1.0)
        assert tau >= drop and D[np.arange(500), h].mean() <= drop


def test_evidence_narrows_the_rule_never_widens_it() -> None:
    """Careful (router_core.promise.rule): with ``before``, a backend is within τ only where
    its prior view said so too; a refit that moved its p̂ up sends it nothing more, a refit
    that moved it down sends it less."""
    from router_core.promise.rule import drop_bounds, explain, promise_choice

    cost = np.array([1.0, 0.1])
    N = np.full((3, 2), 200.0)
    prior = np.array([[0.90, 0.89], [0.90, 0.70], [0.90, 0.89]])
    up = np.array([[0.90, 0.90], [0.90, 0.90], [0.90, 0.90]])  # refined: as good everywhere
    down = np.array([[0.90, 0.89], [0.90, 0.70], [0.90, 0.60]])  # refined: worse on prompt 2
    assert promise_choice(prior, N, cost, 0, 0.1, 1.0).tolist() == [1, 0, 1]
    assert promise_choice(up, N, cost, 0, 0.1, 1.0).tolist() == [1, 1, 1]
    assert promise_choice(up, N, cost, 0, 0.1, 1.0, before=(prior, N)).tolist() == [1, 0, 1]
    assert promise_choice(down, N, cost, 0, 0.1, 1.0, before=(prior, N)).tolist() == [1, 0, 0]
    D = drop_bounds(up, N, 0, 1.0, before=(prior, N))
    assert np.all(D >= drop_bounds(up, N, 0, 1.0)) and np.all(D >= drop_bounds(prior, N, 0, 1.0))
    record = explain(["ref", "cheap"], up[1], N[1], cost, 0, 0.1, 1.0, before=(prior[1], N[1]))
    assert record["chosen"] == "ref" and record["candidates"][0]["within"] is False
