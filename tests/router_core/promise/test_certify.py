"""The evidence (router_core.promise.certify): the judge's agreement inside the bounds,
distinct prompts, slices, regions, whom to judge next; the certificate's route-level test is
in test_route_certificate."""

import numpy as np

from router_core.promise.certify import (
    MIN_PAIRS,
    Evidence,
    Judge,
    assign_regions,
    certify,
    certify_route,
    cp_lower,
    cp_upper,
    fit_regions,
    measure_judge,
    prompt_share,
    slice_thresholds,
)


def test_clopper_pearson_edges_have_closed_forms() -> None:
    # 0 of n: upper = 1 − δ^(1/n); n of n: lower = δ^(1/n)
    assert np.isclose(cp_upper(0, 20, 0.05), 1 - 0.05 ** (1 / 20))
    assert np.isclose(cp_lower(20, 20, 0.05), 0.05 ** (1 / 20))
    assert cp_upper(0, 0, 0.05) == 1.0 and cp_lower(0, 0, 0.05) == 0.0
    assert cp_lower(30, 100, 0.025) < 0.3 < cp_upper(30, 100, 0.025)


def test_judge_agreement_from_truth_and_from_repeats() -> None:
    rng = np.random.default_rng(0)
    truth = rng.random(2000) < 0.5
    verdicts = np.where(rng.random(2000) < 0.8, truth, ~truth)
    j = measure_judge(truth, verdicts)
    assert abs(j.estimate() - 0.8) < 0.03 and j.lower(0.01) < j.estimate()
    # two judgements of a comparison agree with probability a² + (1 − a)² = 0.68 at a = 0.8
    rep = Judge(agree=680, checks=1000, repeats=True)
    assert abs(rep.estimate() - 0.8) < 1e-9 and rep.lower(0.01) < 0.8


def _pairs(rng, n, p_ref, p_h, accuracy):
    """n comparisons with true 0/1 grades and a judge that reverses a comparison when wrong."""
    y_r = (rng.random(n) < p_ref).astype(float)
    # correlated answers: the candidate mostly shares the reference's grade
    same = rng.random(n) < 0.8
    y_h = np.where(same, y_r, (rng.random(n) < p_h).astype(float))
    ok = rng.random(n) < accuracy
    return np.where(ok, y_r, 1 - y_r), np.where(ok, y_h, 1 - y_h)


def _upper(ev: Evidence, judge: Judge) -> float:
    """The candidate's own bound (``Certificate.upper``) in a one-region route."""
    return float(certify(ev, judge, np.array([1.0, 0.1]), 0.06).upper[0, 1, 0])


def test_noisy_judge_widens_the_bound() -> None:
    rng = np.random.default_rng(1)
    jr, jh = _pairs(rng, 3000, 0.8, 0.8, 0.8)
    ev = Evidence(1, 2, 0)
    ev.add(np.zeros(3000, int), np.ones(3000, int), jr, jh)
    sharp, noisy = _upper(ev, Judge(990, 1000)), _upper(ev, Judge(600, 1000))
    assert np.isfinite(sharp) and noisy > sharp
    coin = _upper(ev, Judge(500, 1000))
    assert coin == np.inf or coin <= 0  # a coin-flip judge: no positive drop is bounded


def test_an_equal_cheap_backend_is_certified_and_a_weak_one_is_not() -> None:
    rng = np.random.default_rng(2)
    ev = Evidence(regions=2, backends=3, ref=0)
    # region 0: backend 1 equals the reference; region 1: it drops 0.2·0.8 = 0.16
    for g, p_h in ((0, 0.8), (1, 0.0)):
        jr, jh = _pairs(rng, 2000, 0.8, p_h, 0.8)
        ev.add(np.full(2000, g), np.ones(2000, int), jr, jh)
    cert = certify(ev, Judge(800, 1000), np.array([1.0, 0.1, 0.05]), promise=0.06)
    assert cert.mixes[0] == {(1, 0): 1.0} and np.isclose(cert.savings[0], 0.9)
    # region 1: backend 1's drop is far above the promise; only a sliver of its traffic
    assert sum(cert.mixes[1].values()) < 0.5
    # at 0.01 the same pairs of an 80% judge bound region 0's drop only to a share of it
    tight = certify(ev, Judge(800, 1000), np.array([1.0, 0.1, 0.05]), promise=0.01)
    assert 0.0 < tight.mixes[0].get((1, 0), 0.0) < 1.0
    assert sum(tight.mixes[1].values()) <= 0.02  # at most the edge's first, finest steps
    # backend 2 was never judged: no evidence, never certified
    assert all(h != 2 for m in cert.mixes for h, _ in m) and not np.isfinite(cert.upper[:, 2]).any()
    assert cert.route_upper <= 0.06 and tight.route_upper <= 0.01


def test_no_evidence_keeps_the_prior_rule() -> None:
    ev = Evidence(regions=3, backends=3, ref=0)
    ev.add([0] * (MIN_PAIRS - 1), [1] * (MIN_PAIRS - 1), [1.0] * (MIN_PAIRS - 1),
           [1.0] * (MIN_PAIRS - 1))  # fmt: skip
    cert = certify(ev, Judge(900, 1000), np.array([1.0, 0.1, 0.01]), promise=0.06)
    assert cert.mixes == ({}, {}, {}) and cert.evidence == (False, False, False)
    fallback = np.array([2, 0, 1])
    assert (cert.choose([0, 1, 2], ["a", "b", "c"], fallback) == fallback).all()


def test_prompt_share_is_uniform_and_stable() -> None:
    u = np.array([prompt_share(f"p{i}") for i in range(5000)])
    assert prompt_share("p1") == prompt_share("p1")
    assert abs(u.mean() - 0.5) < 0.02 and 0.0 <= u.min() and u.max() < 1.0


def test_partner_goes_where_the_saving_is() -> None:
    ev = Evidence(regions=1, backends=3, ref=0)
    rng = np.random.default_rng(0)
    savings = np.array([0.0, 0.5, 0.9])

    def picks():
        return np.array([ev.partner(0, savings, 0.03, 0.8, rng) for _ in range(300)])

    first = picks()  # nothing known: both cheaper backends are judged, never the reference
    assert 0 not in first and (first == 1).any() and (first == 2).any()
    # 100 pairs where backend 2 lost 30% of comparisons, backend 1 none: backend 1 is judged
    ev.add([0] * 200, [1] * 100 + [2] * 100, [1.0] * 200, [1.0] * 100 + [1.0] * 30 + [0.0] * 70)
    assert np.mean(picks() == 1) > 0.9


def test_regions_from_embeddings() -> None:
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(0, 0.1, (50, 4)) + c for c in np.eye(4)[:3] * 3])
    C = fit_regions(X, 3)
    r = assign_regions(X, C)
    assert len(set(r[:50])) == 1 and len(set(r)) == 3


def test_certify_route_from_rows() -> None:
    rng = np.random.default_rng(3)
    jr, jh = _pairs(rng, 3000, 0.8, 0.8, 0.8)
    rows = [{"region": 0, "backend": "cheap", "reference_grade": a, "grade": b}
            for a, b in zip(jr, jh, strict=True)]
    rows.append({"region": 1, "backend": "unknown-name", "reference_grade": 1.0, "grade": 0.0})
    cert = certify_route(rows, ["ref", "cheap"], "ref", 2, np.array([1.0, 0.2]), 0.06,
                         Judge(800, 1000))  # fmt: skip
    assert cert.mixes[0] == {(1, 0): 1.0} and cert.mixes[1] == {}


def test_a_slice_where_the_candidate_is_believed_close_is_certified_first() -> None:
    """Slices (module docstring): a candidate equal to the reference on the half of the
    region its a-priori score puts closest, and 0.4 worse on the other half. The whole
    region is not within 0.03; its closer half is, and the bound there counts the drop
    only on that half (E[d·1{slice}]), so the mix sends that half to it."""
    rng = np.random.default_rng(4)
    n = 4000
    score = rng.random(n)  # fixed before any pair; low = believed close
    near = score < 0.5
    y_r = (rng.random(n) < 0.8).astype(float)
    y_h = np.where(near, y_r, y_r * (rng.random(n) < 0.5))
    ok = rng.random(n) < 0.8
    jr, jh = np.where(ok, y_r, 1 - y_r), np.where(ok, y_h, 1 - y_h)
    S = np.stack([np.zeros(n), score], axis=1)
    thr = slice_thresholds(S, np.zeros(n, int), 1, (0.5, 1.0))
    ev = Evidence(1, 2, 0, slices=2)
    ev.add(np.zeros(n, int), np.ones(n, int), jr, jh, inside=S[:, [1]] <= thr[0, 1][None, :])
    cert = certify(ev, Judge(800, 1000), np.array([1.0, 0.1]), 0.03, thresholds=thr,
                   shares=(0.5, 1.0))  # fmt: skip
    # the closer half always; what is left of the promise buys a share of the whole region
    assert cert.mixes[0][(1, 0)] > 0.8 and sum(cert.mixes[0].values()) <= 1.0 + 1e-9
    assert cert.savings[0] >= 0.9 * 0.5
    keys = [f"k{i}" for i in range(n)]
    h = cert.choose(np.zeros(n, int), keys, np.zeros(n, int), scores=S)
    assert (h[near] == 1).all() and 0.0 < np.mean(h[~near] == 1) < 0.2


def test_a_prompt_judged_again_counts_once() -> None:
    """Traffic that repeats a prompt does not narrow the bound: 40 prompts judged 50 times
    each are 40 draws of the prompt population (their verdicts averaged), not 2000."""
    keys = [f"p{i % 40}" for i in range(2000)]
    y = np.ones(2000)
    many, once = Evidence(1, 2, 0), Evidence(1, 2, 0)
    many.add(np.zeros(2000, int), np.ones(2000, int), y, y, keys=keys)
    once.add(np.zeros(2000, int), np.ones(2000, int), y, y)
    assert many.distinct()[0][0, 1] == 40 and once.distinct()[0][0, 1] == 2000
    assert _upper(many, Judge(900, 1000)) > 2 * _upper(once, Judge(900, 1000))
    # split for the route's test (route_certificate): the parts add up to the whole
    n2, l2, w2 = many.distinct(0.3)
    assert n2.shape == (2, 1, 2) and n2.sum(0)[0, 1] == 40 and 0 < n2[0, 0, 1] < 40
    assert l2.sum() == w2.sum() == 0  # equal grades: ties only
