"""A table of two models, one trained and one held out on its prior (issue 34, item 7).

``python -m bench.routing.promise --dataset T --hold-out 1`` on such a table crashed with an
IndexError in ``closeness_weights``: the rung below the frontier (where the rule's confidence
is measured) has no trained neighbour to place a prior among. Now a prior with no neighbours
keeps only its level, and with no rung below to measure on, the confidence is ∞: the route
stays on its reference rather than trusting a rule nothing checked.
"""

import numpy as np

from bench.routing.promise import main
from router_core.promise import Case, choose_confidence, prior_from_aggregate, router_weights
from router_core.promise.priors import closeness_weights
from tests.gateway.router_fixture import build_router
from tests.router_core.promise.test_bench_quick import HashEncoder, _table


def test_closeness_weights_of_no_known_value_are_empty() -> None:
    assert closeness_weights(0.7, np.array([])).shape == (0,)
    assert np.allclose(closeness_weights(0.7, np.array([0.6])), [1.0])


def test_a_prior_without_neighbours_holds_its_level() -> None:
    Q = np.random.default_rng(0).normal(size=(50, 8))
    prior = prior_from_aggregate(0.8, np.zeros((0, 8)), np.zeros(0), np.zeros(0), Q, 2.0)
    p, n = prior.estimate(Q)
    assert np.allclose(p, 0.8, atol=1e-3) and np.all(n > 0)


def test_router_weights_of_no_names_is_empty_not_all() -> None:
    router = build_router()
    W, b = router_weights(router, ())
    assert W.shape == (0, len(router.experts[0].descriptor)) and b.shape == (0,)
    assert router_weights(router)[0].shape[0] == len(router.experts)


def test_no_rung_below_means_the_reference_only() -> None:
    one = Case(P=np.full((5, 1), 0.8), N=np.full((5, 1), 10.0), Y=np.ones((5, 1)),
               cost=np.array([1.0]), ref=0)
    two = Case(P=np.tile([0.8, 0.795], (5, 1)), N=np.full((5, 2), 1e4), Y=np.ones((5, 2)),
               cost=np.array([1.0, 0.1]), ref=0)
    assert choose_confidence([[one]], [two], 0.01) == np.inf
    assert np.isfinite(choose_confidence([[two]], [two], 0.01))


def test_the_bench_runs_on_a_table_of_two_models(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("TOLLGATE_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "two.csv"
    _table(path, models=2)
    main(["--quick", "--dataset", str(path), "--hold-out", "1"], encoder=HashEncoder())
    last = capsys.readouterr().out.strip().splitlines()[-1]
    values = {kv.split("=")[0]: float(kv.split("=")[1]) for kv in last.split()}
    assert all(np.isfinite(v) for v in values.values())
    # nothing measured the rule below the frontier: every route stays on its reference
    assert values["auto_drop"] == 0.0 and values["cheap_drop"] == 0.0
