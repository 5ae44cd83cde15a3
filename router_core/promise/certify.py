"""Certify cheaper backends from judged pairs, with a stated error: the evidence, the judge,
the regions and slices, and the certificate a route serves.

The prior-based rule (router_core.promise.rule) moves only as far as its beliefs do. This
module moves the route where judged evidence supports it, with a family-wise error stated in
advance (Learn-then-Test, [LTT]: risk control as multiple hypothesis testing), bounding the
route's drop over its traffic at once (router_core.promise.route_certificate, eqs. (5)-(10)).

A judged pair on prompt x of region g (its category when known, else its embedding cluster):
the reference r and a candidate h both answer, the judge grades both, ŷ_r, ŷ_h ∈ [0, 1].
The judge is right with probability a per comparison and otherwise reverses it (or flips each
grade independently with a symmetric error): either way

    E[ŷ_r − ŷ_h | x] = (2a − 1)·(y_r − y_h)                                         (J)

With d̂ = ŷ_r − ŷ_h split into its loss d̂⁺ and win d̂⁻ (each in [0, 1]), observed rates
ℓ = E d̂⁺ and w = E d̂⁻ in the region, the true drop of h against r there is

    D_gh = (ℓ − w) / (2a − 1)                                                        (1)

A grade difference strictly between −1 and 1 is rounded at random to a loss (probability
d̂⁺), a win (d̂⁻) or a tie, so the mean is kept and the counts are exactly multinomial. a is
bounded below by a_lo, the Clopper-Pearson lower bound ([ClopperPearson]) of the judge's
measured agreement (``Judge``: verdicts checked against known truth, or repeated judgements
of one comparison, whose agreement is a² + (1 − a)²) at level α_J = JUDGE_ALPHA_SHARE·α.

Slices. A candidate is often as good as the reference on part of a region only. Each
region's prompts are ordered per candidate by a score fixed before any pair is judged (the
beliefs' drop p̂_r − p̂_h), and slice t is the share q_t of them scored closest (q = ¼, ½,
¾, 1; ``slice_thresholds``). The item "h on slice t, the reference elsewhere" drops

    D_ght = E[(y_r − y_h)·1{x ∈ S_ght}]                                              (1')

in region g, estimated as (1) with losses and wins counted only on pairs inside the slice
(n still every pair of (g, h): the indicator is part of the loss).

A region is served the prior-based rule, or a mix of the reference and items the route's
certificate allows; prompts take their item by a hash of their key (uniform, independent of
what the prompt says), so a mix's drop is its shares' weighted drops. Counts are of distinct
prompts (repeated verdicts on one prompt averaged first, [DARS]): the bound is on the
population of prompts, and traffic that repeats a prompt does not narrow it. An item of a
(region, candidate) judged on fewer than MIN_PAIRS distinct prompts is no evidence; a route
without evidence keeps the prior-based rule, so nothing changes at cold start.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from router_core.promise.binomial import cp_lower, cp_upper  # noqa: F401 (re-exported)
from router_core.promise.route_certificate import (
    ORDER_SHARE,
    VARIANCE_ALPHA_SHARE,
    Counts,
    bernstein_width,
    normal_width,
    test_route,
)

ALPHA = 0.05  # family-wise error of every certification of a route
JUDGE_ALPHA_SHARE = 0.2  # of ALPHA spent on the judge's agreement bound
MIN_PAIRS = 20  # a (region, candidate) with fewer judged pairs is not evidence
PRIOR_PAIRS = 2.0  # pseudo-pairs the beliefs are worth when choosing whom to judge next
POOL_PAIRS = 10.0  # pseudo-pairs a candidate's rates over every region are worth in one


@dataclass(frozen=True)
class Judge:
    """The judge's measured agreement a: ``agree`` of ``checks`` verdicts matched the truth
    (``repeats=False``), or of ``checks`` comparisons judged twice, ``agree`` gave the same
    verdict both times (``repeats=True``: agreement a² + (1 − a)², solved for a ≥ ½)."""

    agree: int
    checks: int
    repeats: bool = False

    def _to_a(self, rate: float) -> float:
        if not self.repeats:
            return float(rate)
        return 0.5 + 0.5 * float(np.sqrt(max(2.0 * rate - 1.0, 0.0)))

    def estimate(self) -> float:
        return self._to_a(self.agree / self.checks) if self.checks else 0.5

    def lower(self, alpha: float) -> float:
        """a_lo: P(a < a_lo) ≤ α (Clopper-Pearson on the checks, mapped to a)."""
        if not self.checks:
            return 0.5
        return self._to_a(float(cp_lower(self.agree, self.checks, alpha)))


def measure_judge(truth: np.ndarray, verdicts: np.ndarray) -> Judge:
    """A judge's agreement from verdicts on comparisons whose truth is known (0/1 each)."""
    t, v = np.asarray(truth, float), np.asarray(verdicts, float)
    return Judge(int(np.sum(np.round(t) == np.round(v))), len(t))


def prompt_share(key: str) -> float:
    """A prompt's place in [0, 1) from its key: uniform, and blind to what the prompt says."""
    h = hashlib.blake2b(str(key).encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2.0**64


@dataclass
class Evidence:
    """Judged pairs of one route, counted per (region, backend): n pairs, and per slice t
    k_ℓ observed losses and k_w observed wins of the backend against the reference counted
    only on pairs whose prompt lies in the slice (module docstring, slices). One slice, the
    whole region, by default."""

    regions: int
    backends: int
    ref: int
    seed: int = 0
    slices: int = 1
    n: np.ndarray = field(init=False)
    loss: np.ndarray = field(init=False)
    win: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        shape = (self.regions, self.backends)
        self.n = np.zeros(shape)
        self.loss, self.win = np.zeros((*shape, self.slices)), np.zeros((*shape, self.slices))
        self._rng = np.random.default_rng(self.seed)  # the random rounding of grades
        self._by_prompt: dict[tuple[int, int, str], list] = {}
        self._pairs = 0

    def add(self, region: Sequence[int], backend: Sequence[int], y_ref: Sequence[float],
            y_backend: Sequence[float], inside: np.ndarray | None = None,
            keys: Sequence[str] | None = None) -> None:
        """Count judged pairs: region, candidate and both grades per pair (grades in [0, 1];
        a pair of the reference with itself, or with a missing grade, is skipped);
        ``inside`` (pairs, slices) bool: whether the pair's prompt lies in each slice of its
        candidate (default: every slice); ``keys``: each pair's prompt key (default: every
        pair a prompt of its own), so a prompt judged twice counts once (``distinct``)."""
        g, h = np.asarray(region, int), np.asarray(backend, int)
        d = np.asarray(y_ref, float) - np.asarray(y_backend, float)
        ins = (np.ones((len(d), self.slices), bool) if inside is None
               else np.asarray(inside, bool).reshape(len(d), self.slices))  # fmt: skip
        ok = np.isfinite(d) & (h != self.ref)
        if keys is None:
            keys = [f"#{self._pairs + i}" for i in range(len(d))]
        self._pairs += len(d)
        keys = [k for k, o in zip(keys, ok, strict=True) if o]
        g, h, d, ins = g[ok], h[ok], d[ok], ins[ok]
        for i, key in enumerate(keys):  # per (region, backend, prompt): Σ d, count, slices
            acc = self._by_prompt.setdefault((int(g[i]), int(h[i]), str(key)), [0.0, 0, ins[i]])
            acc[0] += float(d[i])
            acc[1] += 1
        # pair counts (exploration's view: every verdict)
        u = self._rng.random(len(d))
        np.add.at(self.n, (g, h), 1.0)
        np.add.at(self.loss, (g, h), (u < np.clip(d, 0, 1))[:, None] & ins)
        np.add.at(self.win, (g, h), (u < np.clip(-d, 0, 1))[:, None] & ins)

    def distinct(self, order_share: float | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        """(n, k_ℓ, k_w) counted per distinct prompt: a prompt's repeated verdicts averaged
        (DARS), its mean d̄ rounded at random to a loss (prob. d̄⁺) or a win (prob. d̄⁻). The
        bound is on the prompt population: a prompt judged five times is one draw of it.
        ``order_share``: each array gains a first axis of two parts, the prompts whose key's
        ``prompt_share`` is below it, and the rest (route_certificate, the order)."""
        parts = 1 if order_share is None else 2
        shape = (parts, self.regions, self.backends)
        n = np.zeros(shape)
        loss, win = np.zeros((*shape, self.slices)), np.zeros((*shape, self.slices))
        rng = np.random.default_rng(self.seed + 1)
        for (g, h, key), (total, count, ins) in self._by_prompt.items():
            mean, u = total / count, rng.random()
            p = 0 if order_share is None else int(prompt_share(key) >= order_share)
            n[p, g, h] += 1
            loss[p, g, h] += (u < max(mean, 0.0)) & ins
            win[p, g, h] += (u < max(-mean, 0.0)) & ins
        return (n[0], loss[0], win[0]) if order_share is None else (n, loss, win)

    def region_shares(self) -> np.ndarray:
        """(G,) each region's share of the distinct judged prompts (of any partner): the
        route's traffic shares w_g when judged prompts are a uniform sample of its traffic."""
        seen = {(g, key) for g, _, key in self._by_prompt}
        w = np.bincount([g for g, _ in seen], minlength=self.regions).astype(float)
        return w / w.sum() if w.sum() > 0 else np.full(self.regions, 1.0 / self.regions)

    def partner(self, region: int, savings: np.ndarray, promise: float, accuracy: float,
                rng: np.random.Generator, prior_drop: np.ndarray | None = None) -> int:
        """Whom to judge beside the reference on a prompt of ``region`` (Thompson sampling):
        each candidate's drop drawn from Beta posteriors of its observed rates in the region
        around its rates over every region (worth POOL_PAIRS pseudo-pairs; there its belief's
        drop ``prior_drop`` is worth PRIOR_PAIRS), corrected by (1); the one whose mix with
        the reference within the promise would save most is judged. Candidates: ``savings``
        > 0."""
        g = int(region)
        n, kl, kw = self.n[g], self.loss[g, :, -1], self.win[g, :, -1]  # the whole region
        scale = max(2.0 * accuracy - 1.0, 1e-3)
        pd = np.zeros(self.backends) if prior_drop is None else np.asarray(prior_drop, float)
        # observed rates the belief implies: a loss share ½(|D|+D)·scale around a base 0.1
        base = 0.1
        l0 = np.clip(base + np.maximum(pd, 0) * scale, 1e-3, 1 - 1e-3)
        w0 = np.clip(base + np.maximum(-pd, 0) * scale, 1e-3, 1 - 1e-3)
        # hierarchical: a candidate worse than the reference everywhere is not explored
        # region by region
        N, KL, KW = self.n.sum(0), self.loss[:, :, -1].sum(0), self.win[:, :, -1].sum(0)
        lg = (KL + PRIOR_PAIRS * l0) / (N + PRIOR_PAIRS)
        wg = (KW + PRIOR_PAIRS * w0) / (N + PRIOR_PAIRS)
        P = POOL_PAIRS
        lp = rng.beta(1.0 + kl + P * lg, 1.0 + n - kl + P * (1 - lg))
        wp = rng.beta(1.0 + kw + P * wg, 1.0 + n - kw + P * (1 - wg))
        d = (lp - wp) / scale
        share = np.where(d <= promise, 1.0, promise / np.maximum(d, 1e-9))
        value = np.where(np.asarray(savings) > 0, np.asarray(savings) * share, -np.inf)
        value[self.ref] = -np.inf
        if not np.isfinite(value).any():
            return self.ref
        return int(np.argmax(value + 1e-12 * rng.random(self.backends)))


@dataclass(frozen=True)
class Certificate:
    """Per region: the mix served ({(backend, slice): share}, the reference the rest; empty:
    the prior-based rule; {(ref, 0): 1}: the reference alone) and its saving; each item's own
    bound (explanations, not family-wise); the slices' thresholds; the route's bound R⁺ on
    the policy served (route_certificate eq. (9)) and how many of the ordered policies the
    fixed sequence tested and passed."""

    mixes: tuple[dict[tuple[int, int], float], ...]
    savings: tuple[float, ...]
    evidence: tuple[bool, ...]  # whether the region had any candidate with MIN_PAIRS pairs
    upper: np.ndarray  # (G, m, slices) each item's own bound on its drop
    thresholds: np.ndarray | None = None  # (G, m, slices); None: one slice, the region
    route_upper: float = float("nan")
    passed: int = 0
    tested: int = 0

    def choose(self, region: np.ndarray, keys: Sequence[str], fallback: np.ndarray,
               ref: int = 0, scores: np.ndarray | None = None) -> np.ndarray:
        """(n,) backend per prompt: the region's mix where it has one, else the prior-based
        choice ``fallback``. The prompt's key picks one (backend, slice) of the mix; the
        backend serves it if the prompt lies in the slice (its a-priori ``scores`` (n, m) at
        most the slice's threshold), else the reference."""
        out = np.asarray(fallback, int).copy()
        for i, (g, key) in enumerate(zip(np.asarray(region, int), keys, strict=True)):
            mix = self.mixes[g]
            if not mix:
                continue
            u, acc, pick = prompt_share(key), 0.0, ref
            for (h, t), share in mix.items():
                acc += share
                if u < acc:
                    inside = (h == ref or self.thresholds is None or scores is None
                              or scores[i, h] <= self.thresholds[g, h, t])  # fmt: skip
                    pick = h if inside else ref
                    break
            out[i] = pick
        return out


SLICES = (0.25, 0.5, 0.75, 1.0)  # shares of a region's prompts, by the a-priori score


def slice_thresholds(scores: np.ndarray, region: np.ndarray, regions: int,
                     shares: Sequence[float] = SLICES) -> np.ndarray:
    """(G, m, slices) per region and backend the score at or below which a prompt lies in
    each slice: the ``shares`` quantiles of the region's prompts (the last slice, share 1,
    the whole region). ``scores`` (n, m): an estimate fixed before any judged pair (e.g. the
    beliefs' drop p̂_r − p̂_h), lower meaning closer to the reference."""
    S = np.asarray(scores, float)
    out = np.full((regions, S.shape[1], len(shares)), np.inf)
    for g in range(regions):
        r = np.asarray(region) == g
        if not r.any():
            continue
        for t, q in enumerate(shares):
            if q < 1.0:
                out[g, :, t] = np.quantile(S[r], q, axis=0)
    return out


def certify(evidence: Evidence, judge: Judge, cost: np.ndarray, promise: float,
            alpha: float = ALPHA, thresholds: np.ndarray | None = None,
            shares: Sequence[float] = SLICES, *, prior_saving: np.ndarray | None = None,
            weights: np.ndarray | None = None, yardstick: bool = False) -> Certificate:
    """The route's certificate from its judged pairs (route_certificate, eqs. (5)-(10)).

    Args:
        evidence: the route's judged pairs per (region, backend, slice).
        judge: its measured agreement. cost: (m,) or (G, m) price of each backend (per region
            when known). promise: the route's max_drop. alpha: family-wise error (10).
        thresholds, shares: the slices (``slice_thresholds``) when the evidence has more
            than one; a slice's saving counts its share of the region.
        prior_saving: (G,) the prior-based rule's saving per region (1 − cost / reference
            cost, from prices), when known; None: a region is left to it wherever the
            certificate would serve the reference alone.
        weights: (G,) the route's traffic share per region (default: the judged prompts').
        yardstick: not a certificate: the same family tested by the normal approximation
            (``normal_width``) at the whole α with the judge's measured agreement and the
            moments ν at their estimates, no share of α on either; what the evidence could
            support at best (bench/routing/promise.py ``--yardstick``). Never served.
    """
    G, m, ref = evidence.regions, evidence.backends, evidence.ref
    T = evidence.slices
    share = np.ones(T) if T == 1 else np.asarray(shares, float)
    C = np.broadcast_to(np.asarray(cost, float), (G, m))
    alpha_j, alpha_v = alpha * JUDGE_ALPHA_SHARE, alpha * VARIANCE_ALPHA_SHARE
    n2, loss2, win2 = evidence.distinct(ORDER_SHARE)
    order, test = Counts(n2[0], loss2[0], win2[0]), Counts(n2[1], loss2[1], win2[1])
    whole = Counts(n2.sum(0), loss2.sum(0), win2.sum(0))
    cheaper = C < C[:, [ref]]
    has = cheaper & (whole.n >= MIN_PAIRS) & (order.n > 0) & (test.n > 0)
    eligible = np.broadcast_to(has[..., None], (G, m, T)).copy()
    eligible[:, ref] = False
    saving = (C[:, [ref]] - C)[..., None] * share  # per unit of traffic, in cost
    w = evidence.region_shares() if weights is None else np.asarray(weights, float)
    ps = None if prior_saving is None else np.asarray(prior_saving, float) * C[:, ref]
    a_lo, alpha_t, width = judge.lower(alpha_j), alpha - alpha_j - alpha_v, bernstein_width
    if yardstick:  # the whole α on the test; ν at its Clopper-Pearson median
        a_lo, alpha_v, alpha_t, width = (judge.estimate(), 0.5 * max(int(eligible.sum()), 1),
                                         alpha, normal_width)
    res = test_route(order, test, whole, ref, a_lo, judge.estimate(), saving, eligible,
                     w / w.sum(), promise, alpha_v, alpha_t, ps, width)
    rel = np.where(C[:, [ref]] > 0, 1.0 - C / np.where(C[:, [ref]] > 0, C[:, [ref]], 1.0), 0.0)
    savings = tuple(float(sum(p * rel[g, h] * share[t] for (h, t), p in mix.items()))
                    for g, mix in enumerate(res.mixes))  # fmt: skip
    return Certificate(res.mixes, savings, tuple(bool(x) for x in has.any(1)), res.cell_upper,
                       None if T == 1 else thresholds, res.upper, res.passed, res.tested)


def fit_regions(X: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """(k, d) centroids of k-means on embeddings X: the regions where no category is known."""
    from sklearn.cluster import KMeans

    X = np.asarray(X, float)
    k = max(1, min(int(k), len(X)))
    return KMeans(n_clusters=k, n_init=4, random_state=seed).fit(X).cluster_centers_


def assign_regions(X: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """(n,) the nearest centroid of each embedding."""
    X, C = np.asarray(X, float), np.asarray(centroids, float)
    d = (X**2).sum(1)[:, None] - 2.0 * X @ C.T + (C**2).sum(1)[None, :]
    return np.argmin(d, axis=1)


def certify_route(pairs: Sequence[dict], backends: Sequence[str], reference: str,
                  regions: int, cost: np.ndarray, promise: float, judge: Judge,
                  alpha: float = ALPHA, seed: int = 0) -> Certificate:
    """The interface for a route's learning loop: its judged pairs as rows ``{region,
    backend, reference_grade, grade}`` (region an int in [0, regions), the grades the judge
    gave the reference's and the backend's answers to one prompt) → its certificate
    (``Certificate.mixes[g]``: backend index → share of region g's prompts)."""
    names = list(backends)
    ev = Evidence(regions, len(names), names.index(reference), seed=seed)
    rows = [p for p in pairs if p["backend"] in names]
    if rows:
        ev.add([int(p["region"]) for p in rows], [names.index(p["backend"]) for p in rows],
               [float(p["reference_grade"]) for p in rows], [float(p["grade"]) for p in rows])
    return certify(ev, judge, cost, promise, alpha)
