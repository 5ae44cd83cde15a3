"""The route-level certificate (router_core.promise.route_certificate): on simulated routes
whose true drops are known, the policy it serves keeps the promise over the route's traffic
in at least 1 − α of repeated draws, its saving grows with evidence, the drop is spent where
it saves most, and nothing moves without evidence."""

import numpy as np

from router_core.promise.certify import ALPHA, Evidence, Judge, certify, measure_judge
from router_core.promise.route_certificate import PRIOR, REFERENCE, hull, region_paths

# a route of four regions (traffic shares W), the reference (0) and two cheaper candidates;
# P[g, h]: each backend's chance to be right in region g (the candidate shares the
# reference's answer on 70% of prompts, so its true drop is 0.3 (P[g, 0] − P[g, h]))
W = np.array([0.4, 0.3, 0.2, 0.1])
P = np.array([[0.80, 0.80, 0.70],
              [0.80, 0.75, 0.60],
              [0.70, 0.74, 0.60],
              [0.90, 0.70, 0.50]])  # fmt: skip
COST = np.array([1.0, 0.3, 0.1])
TRUE_D = 0.3 * (P[:, [0]] - P)  # (G, m)


def judged_route(rng, n: int, accuracy: float = 0.8) -> Evidence:
    """n judged prompts drawn from the route's traffic, each with one candidate (by turns),
    graded by a judge right with probability ``accuracy`` (wrong: both grades reversed)."""
    g = rng.choice(len(W), size=n, p=W)
    h = 1 + (np.arange(n) % 2)
    y_r = (rng.random(n) < P[g, 0]).astype(float)
    same = rng.random(n) < 0.7
    y_h = np.where(same, y_r, (rng.random(n) < P[g, h]).astype(float))
    ok = rng.random(n) < accuracy
    ev = Evidence(len(W), 3, 0, seed=int(rng.integers(1 << 31)))
    ev.add(g, h, np.where(ok, y_r, 1 - y_r), np.where(ok, y_h, 1 - y_h),
           keys=[f"p{i}" for i in range(n)])  # fmt: skip
    return ev


def true_drop(mixes, promise: float) -> float:
    """Eq. (5) with the truth: a region left to the prior rule is charged the promise."""
    total = 0.0
    for g, mix in enumerate(mixes):
        if not mix:
            total += W[g] * promise
        total += W[g] * sum(s * TRUE_D[g, h] for (h, _t), s in mix.items())
    return total


def judge(rng) -> Judge:
    truth = (rng.random(1000) < 0.5).astype(float)
    return measure_judge(truth, np.where(rng.random(1000) < 0.8, truth, 1 - truth))


def test_the_served_policy_keeps_the_promise_in_repeated_draws() -> None:
    """Eq. (10): over 150 independent routes the served policy's true drop exceeds the
    promise in at most α of them (5%; the test allows 9% for the draw), while it does move:
    it saves in most of them, so the bound is tested where it binds."""
    promise, misses, moved = 0.02, 0, 0
    for seed in range(150):
        rng = np.random.default_rng(seed)
        ev = judged_route(rng, 6000)
        cert = certify(ev, judge(rng), COST, promise, weights=W,
                       prior_saving=np.zeros(len(W)))  # fmt: skip
        misses += true_drop(cert.mixes, promise) > promise + 1e-12
        moved += sum(cert.savings) > 0
    assert misses <= 0.09 * 150
    assert moved >= 0.8 * 150


def test_saving_grows_with_evidence() -> None:
    def saving(n: int) -> float:
        out = []
        for seed in range(8):
            rng = np.random.default_rng(100 + seed)
            cert = certify(judged_route(rng, n), judge(rng), COST, 0.02, weights=W,
                           prior_saving=np.zeros(len(W)))  # fmt: skip
            out.append(float(np.dot(W, cert.savings)))
        return float(np.mean(out))

    small, mid, large = saving(300), saving(3000), saving(30000)
    # a few hundred pairs move a little traffic: the edges' first steps are fine (EDGE_STEPS)
    assert 0 < small <= mid <= large and large > 0.3


def test_a_region_confidently_better_pays_for_another() -> None:
    """The knapsack: in region 0 the candidate beats the reference (drop −0.05), in region
    1 it drops 0.03. A promise of 0.01 per region would allow a third of region 1; over the
    route, region 0's credit pays for all of it."""
    rng = np.random.default_rng(7)
    n = 40000
    g = rng.integers(0, 2, n)
    p_ref = np.array([0.7, 0.8])
    p_h = np.array([0.75, 0.77])
    y_r = (rng.random(n) < p_ref[g]).astype(float)
    y_h = (rng.random(n) < p_h[g]).astype(float)  # independent answers: true drop p_r − p_h
    ok = rng.random(n) < 0.9
    ev = Evidence(2, 2, 0)
    ev.add(g, np.ones(n, int), np.where(ok, y_r, 1 - y_r), np.where(ok, y_h, 1 - y_h))
    cert = certify(ev, Judge(9000, 10000), np.array([1.0, 0.2]), 0.01,
                   weights=np.array([0.5, 0.5]), prior_saving=np.zeros(2))  # fmt: skip
    assert cert.mixes[0] == {(1, 0): 1.0}
    assert cert.mixes[1].get((1, 0), 0.0) > 0.9
    assert cert.route_upper <= 0.01 and cert.passed == cert.tested - 1 or cert.passed > 0


def test_nothing_moves_without_evidence() -> None:
    ev = Evidence(3, 3, 0)
    for prior_saving in (None, np.array([0.1, 0.0, 0.2])):
        cert = certify(ev, Judge(900, 1000), np.array([1.0, 0.1, 0.01]), 0.06,
                       prior_saving=prior_saving)  # fmt: skip
        assert cert.mixes == ({}, {}, {}) and cert.evidence == (False, False, False)


def test_without_the_prior_rules_saving_a_region_is_never_forced_to_the_reference() -> None:
    """The gateway does not know the prior rule's saving per region: a region the family
    would leave to the reference alone keeps the prior rule (an empty mix), never
    {(ref, 0): 1}, so a route with some evidence does not lose what its priors save."""
    rng = np.random.default_rng(3)
    ev = judged_route(rng, 3000)
    cert = certify(ev, judge(rng), COST, 0.02, weights=W)
    assert all((0, 0) not in mix for mix in cert.mixes)
    assert true_drop(cert.mixes, 0.02) <= 0.02 + 1e-9


def test_hull_is_the_lagrangian_path_of_one_region() -> None:
    pts = [(0.0, 0.0, REFERENCE), (0.02, 0.55, "a"), (0.03, 0.56, "dominated"),
           (0.05, 0.9, "b"), (0.04, 0.2, "below"), (-0.01, 0.1, "better")]  # fmt: skip
    assert [p[2] for p in hull(pts)] == ["better", "a", "b"]


def test_the_family_starts_at_the_reference_and_frees_better_items_first() -> None:
    d = np.array([[[0.0], [-0.02], [0.05]]])  # one region: candidate 1 better, 2 worse
    s = np.array([[[0.0], [0.3], [0.9]]])
    ok = np.array([[[False], [True], [True]]])
    start, paths = region_paths(d, s, ok, 0, 0.03, np.array([0.1]))
    steps = [state for _, _, state in paths[0]]
    assert start == [REFERENCE]
    assert steps[0] == {(1, 0): 0.01} and steps[12] == {(1, 0): 1.0}
    assert any(state == PRIOR for state in steps) or steps[-1] == {(2, 0): 1.0}
    assert ALPHA == 0.05


def test_ordering_by_the_bound_itself_saves_more_than_by_slopes(monkeypatch) -> None:
    """The family interleaves the regions by the route's predicted bound, whose widths add in
    quadrature (``ordered_path``); merged by each region's hull slopes, which add them, the
    same evidence certifies less. Both keep the promise in every draw here."""
    import router_core.promise.route_certificate as rc

    def by_slopes(start, paths, _cost):
        steps = [(g, sl, tie, st) for g, path in enumerate(paths) for sl, tie, st in path]
        steps.sort(key=lambda e: (-e[1], -e[2]))
        return [(g, st) for g, _, _, st in steps]

    def savings() -> tuple[float, int]:
        out, misses = [], 0
        for seed in range(30):
            rng = np.random.default_rng(500 + seed)
            cert = certify(judged_route(rng, 3000), judge(rng), COST, 0.02, weights=W,
                           prior_saving=np.zeros(len(W)))  # fmt: skip
            out.append(float(np.dot(W, cert.savings)))
            misses += true_drop(cert.mixes, 0.02) > 0.02 + 1e-12
        return float(np.mean(out)), misses

    greedy, greedy_misses = savings()
    monkeypatch.setattr(rc, "ordered_path", by_slopes)
    slopes, slope_misses = savings()
    assert greedy > 1.15 * slopes > 0
    assert greedy_misses <= 3 and slope_misses <= 3


def test_a_step_that_does_not_raise_the_bound_comes_first() -> None:
    from router_core.promise.route_certificate import ordered_path

    # region 0's step raises the bound by 0.02 for a saving of 0.5; region 1's lowers it
    def cost(states):
        b = {"a": 0.02, "b": -0.01}
        s = {"a": 0.5, "b": 0.1}
        return (sum(b.get(x, 0.0) for x in states), sum(s.get(x, 0.0) for x in states))

    steps = ordered_path([REFERENCE, REFERENCE], [[(1.0, 0.0, "a")], [(0.1, 0.0, "b")]], cost)
    assert steps == [(1, "b"), (0, "a")]


def test_the_yardstick_is_never_stricter_than_the_certificate() -> None:
    """``certify(..., yardstick=True)`` (the normal approximation at the whole α, the judge and
    the moments at their estimates) is a ceiling for what evidence could support: each of its
    widths is narrower than the certificate's, so on the same evidence it serves at least as
    much (its family is ordered by its own bound, so this is measured, not implied), and on
    these routes about twice as much. Its error is α only as n → ∞: never served."""
    served, yard_served = [], []
    for seed in range(40):
        rng = np.random.default_rng(500 + seed)
        ev, jd = judged_route(rng, 2000), judge(rng)
        cert = certify(ev, jd, COST, 0.02, weights=W, prior_saving=np.zeros(len(W)))
        yard = certify(ev, jd, COST, 0.02, weights=W, prior_saving=np.zeros(len(W)),
                       yardstick=True)
        served.append(float(np.dot(W, cert.savings)))
        yard_served.append(float(np.dot(W, yard.savings)))
        assert yard_served[-1] >= served[-1] - 1e-12
    assert np.mean(yard_served) > 1.5 * np.mean(served) > 0  # the finite-sample width's cost
