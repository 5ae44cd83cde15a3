"""A route's certificate: its drop over all of its traffic bounded once, and tested along one
family of policies ordered in advance (Learn-then-Test's fixed-sequence testing, [LTT]),
so the drop is spent where it saves most and no Bonferroni split over regions is paid.

The promise is about the route: its realized drop over its traffic ≤ promise. Bounding every
region at the promise, each at a Bonferroni share of α, asks far more than that. Notation of
router_core.promise.certify: regions g, candidates h, slices t (nested: S_ght ⊂ S_ght' for
t < t'), the judge's agreement a, the true drops D_gi of items i = (h, t), eq. (1').

Policies. Per region g, either the prior-based rule F (the certificate's mix is empty), or a
mix of items with shares π_gi, the reference taking the rest. With w_g the region's share of
the route's traffic (known: every request counts, judged or not), the route's drop is

    R(π) = Σ_{g ∈ F(π)} w_g·promise + Σ_{g ∉ F(π)} w_g Σ_i π_gi D_gi                      (5)

The prior-based rule is charged its own promise: assumption (A), it keeps the promise in the
regions it serves (the per-region certificate assumed the same of the regions it left).

The bound. By (J), Σ_i π_gi D_gi = μ_g(π) / (2a − 1), μ_g(π) = Σ_h E[d̂·φ_gh(x)] with
φ_gh(x) = Σ_t π_ght 1{x ∈ S_ght} ∈ [0, Φ_gh], Φ_gh = Σ_t π_ght, and d̂ the judged difference
rounded at random to {−1, 0, 1} once per distinct prompt (``Evidence.distinct``). On the n_gh
test prompts of (g, h), N(π) = Σ_{g ∉ F} w_g μ_g(π) is estimated by
N̂(π) = Σ_{g ∉ F, h} (w_g / n_gh) Σ_j d̂_j φ_gh(x_j): independent terms, each at most
b_gh = 2 w_g Φ_gh / n_gh below its mean. Bernstein's inequality:

    P(N − N̂ ≥ τ) ≤ exp(−τ² / (2 (V + b τ / 3))),   b = max b_gh                          (6)
    V = Σ_{g ∉ F, h} (w_g² / n_gh) Σ_{t, t'} π_ght π_ght' ν_gh,min(t,t')                    (7)

ν_ght ≥ E[|d̂|·1{x ∈ S_ght}] bounds the second moments (|d̂|φ² ≤ Σ_{t,t'} π_t π_t' |d̂| 1{S_t ∩
S_t'}): Clopper-Pearson upper bounds of the non-tie counts on every distinct prompt, at
α_V / K_V each for the K_V items that may enter a policy (fixed by the counts), all holding
with probability ≥ 1 − α_V. Solving (6) at α_T:

    τ(π) = bL/3 + √((bL/3)² + 2VL),   L = log(1/α_T)                                         (8)
    R⁺(π) = Σ_{g ∈ F(π)} w_g·promise + N⁺/(2a_lo − 1) if N⁺ = N̂ + τ > 0, else N⁺           (9)

a_lo is the judge's lower bound at α_J; for N⁺ ≤ 0, R ≤ N⁺ since 2a − 1 ≤ 1.

The test. Policies π¹, π², … are fixed before the test prompts are read; H_j: R(π^j) >
promise is rejected while R⁺(π^j) ≤ promise, stopping at the first that is not. A false
rejection needs the first true H_j of the order rejected, at level α_T, so

    P(some rejected π^j has R(π^j) > promise) ≤ α_J + α_V + α_T = α                         (10)

and the route may serve any rejected policy: of those and the cold start (F everywhere, R =
promise by (A)) the one whose saving by prices is largest. The error is stated given the test
prompts' counts n_gh (each judged prompt's partner is picked from earlier verdicts, never its
own), the shares w_g, and (A).

The order. Distinct prompts are split by their key's hash (``prompt_share``): a share
ORDER_SHARE orders, the rest tests. On the ordering part each item's drop is taken
pessimistically, by κ = ORDER_PENALTY standard errors of its own estimate and by the width
(8) its test count alone would add (an item measured on few prompts comes late):

    D̃_gi = (μ̂_gi + κ √(ν̂_gi / n_gh) + √(2L ν̂_gi / n'_gh)) / (2â − 1)                      (11)

(μ̂, n on the ordering part, ν̂ = (its non-ties + 1) / (n + 2) there; n' the test
count; â the judge's estimate), its saving s_gi = q_t (c_r − c_h) per unit of traffic, F's
the prior rule's (when the caller knows it; else a region the family leaves to the
reference alone is left to F). Each region moves along the knapsack's Lagrangian path,
max_π Σ_g w_g (s_g − λ d_g) as λ falls from ∞ to 0: the upper concave hull of its options (F
at (promise, s_F), the reference at (0, 0), the items at (D̃, s)), from the reference (R = 0,
or F's promise) through an item no worse by (11) first, then its hull edges, each in
steps of EDGE_STEPS, fine at first so that a little evidence can move a little traffic (one
step where F is an end: F and a mix cannot share a region).

The regions' paths are interleaved greedily by the bound itself (``ordered_path``): next is
the region whose step adds the most saving per unit of the predicted R⁺, (9) computed from
the ordering part (its means μ̂ and moments ν̂, the test part's counts), plus κ standard
errors of that estimate; a step that does not raise it comes first. The widths of (8) add in
quadrature across regions, so ordering by each region's own pessimistic drop (which adds
them) spends the promise early on items the test then stops at: on simulated routes the
greedy order saves 30-60% more at the same error (tests/router_core/promise).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from router_core.promise.binomial import cp_upper

ORDER_SHARE = 0.3  # of the distinct judged prompts, by hash: ordering the family; rest tests
VARIANCE_ALPHA_SHARE = 0.1  # of α spent on the second-moment bounds ν of (7)
# the share of a hull edge each of its policies has moved: the family is free to be fine (a
# fixed sequence costs no error per policy), finest where a few judged pairs can reach
EDGE_STEPS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
ORDER_PENALTY = 1.0  # κ: an item measured on few prompts is ordered later
PRIOR = "prior"  # a region left to the prior-based rule (F)
REFERENCE = "reference"


@dataclass(frozen=True)
class Counts:
    """Distinct judged prompts of one part: n (G, m) per (region, candidate), and non-tie
    losses and wins (G, m, T) of the candidate counted on the prompts inside each slice."""

    n: np.ndarray
    loss: np.ndarray
    win: np.ndarray

    def mean(self) -> np.ndarray:
        """(G, m, T) μ̂: the mean rounded difference d̂·1{slice} (0 where n = 0)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.nan_to_num((self.loss - self.win) / self.n[..., None])


@dataclass(frozen=True)
class RouteTest:
    """The policy the route serves: per region a mix {(h, t): share} ({} the prior rule,
    {(ref, 0): 1} the reference alone); its bound R⁺ (9), saving by prices per unit of
    traffic, and how far the fixed sequence went."""

    mixes: tuple[dict, ...]
    upper: float
    saving: float
    passed: int
    tested: int
    cell_upper: np.ndarray  # (G, m, T) each item's own bound (explanations; not family-wise)


def bernstein_width(V: np.ndarray | float, b: np.ndarray | float, alpha: float) -> np.ndarray:
    """τ of eq. (8): P(N − N̂ ≥ τ) ≤ α for a sum with variance ≤ V and terms ≤ b below."""
    L = np.log(1.0 / alpha)
    c = np.asarray(b, float) * L / 3.0
    return c + np.sqrt(c * c + 2.0 * np.asarray(V, float) * L)


def normal_width(V: np.ndarray | float, b: np.ndarray | float, alpha: float) -> np.ndarray:
    """z_α·√V: the one-sided normal approximation's width, a yardstick and never a bound the
    gateway serves (``certify(..., yardstick=True)``). Its error is α only as n → ∞, and
    ``b`` is ignored: what the judged outcomes could support at best, so a bench can tell the
    data's limit from the finite-sample bound's (8)."""
    from scipy.stats import norm

    return float(norm.ppf(1.0 - alpha)) * np.sqrt(np.asarray(V, float))


def scaled(N_up: np.ndarray | float, a_lo: float) -> np.ndarray:
    """Eq. (9)'s judge correction: a bound on Σ w π D from one on its judged counterpart."""
    N_up = np.asarray(N_up, float)
    scale = 2.0 * a_lo - 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        pos = N_up / scale if scale > 0 else np.full_like(N_up, np.inf)
    return np.where(N_up > 0, pos, N_up)


def hull(points: list[tuple[float, float, object]]) -> list[tuple[float, float, object]]:
    """The upper concave hull of (drop, saving, option) points from the least-drop one (the
    most saving among ties) to the most saving: the Lagrangian path of one region."""
    pts = sorted(points, key=lambda p: (p[0], -p[1]))
    cur, out = pts[0], [pts[0]]
    while True:
        best, slope = None, -np.inf
        for p in pts:
            if p[1] > cur[1] + 1e-15 and p[0] > cur[0]:
                sl = (p[1] - cur[1]) / (p[0] - cur[0])
                tie = best is not None and abs(sl - slope) <= 1e-12 * abs(slope)
                if best is None or (sl > slope and not tie) or (tie and p[0] > best[0]):
                    best, slope = p, sl
        if best is None:
            return out
        out.append(best)
        cur = best


def _mix(option: object, share: float, ref: int) -> dict:
    if option == REFERENCE or share <= 0:
        return {}
    return {option: share}


def region_paths(d_order: np.ndarray, saving: np.ndarray, eligible: np.ndarray, ref: int,
                 promise: float, prior_saving: np.ndarray | None) -> tuple[list, list[list]]:
    """(start, paths): every region's first state, and per region its steps along its hull,
    each (slope, tie-break, state) in the hull's order (module docstring, the order). A state
    is PRIOR, REFERENCE or a mix {(h, t): share}."""
    G, m, T = d_order.shape
    start, paths = [], []
    for g in range(G):
        items = [(float(d_order[g, h, t]), float(saving[g, h, t]), (h, t))
                 for h in range(m) for t in range(T) if eligible[g, h, t]]  # fmt: skip
        paths.append([])
        if not items and prior_saving is None:
            start.append(PRIOR)  # no evidence: the prior rule, nothing to order
            continue
        pts = [(0.0, 0.0, REFERENCE), *items]
        if prior_saving is not None:
            pts.append((float(promise), float(prior_saving[g]), PRIOR))
        vs = hull(pts)
        start.append(REFERENCE)  # risk 0: the family starts where it surely holds
        edges = []
        if vs[0][2] != REFERENCE:  # an item no worse by its estimate: first, the surest first
            edges.append((np.inf, -vs[0][0], REFERENCE, vs[0][2]))
        for (d0, s0, a), (d1, s1, b) in pairwise(vs):
            edges.append(((s1 - s0) / (d1 - d0), 0.0, a, b))
        for slope, tie, a, b in edges:
            if PRIOR in (a, b):
                paths[g].append((slope, tie, b if b in (PRIOR, REFERENCE) else {b: 1.0}))
                continue
            for th in EDGE_STEPS:
                mix = {**_mix(a, 1.0 - th, ref)}
                for key, sh in _mix(b, th, ref).items():
                    mix[key] = mix.get(key, 0.0) + sh
                paths[g].append((slope, tie, mix if mix else REFERENCE))
    return start, paths


def ordered_path(start: list, paths: list[list], step_cost: Callable[[list], tuple]
                 ) -> list[tuple[int, object]]:  # fmt: skip
    """The family's steps, greedily: each region moves along its own path, and next is the
    region whose step adds the most saving per unit of the route's predicted bound
    (``step_cost(states) -> (bound, saving)``, from the ordering part), a step that does not
    raise the bound first. The bound's widths add in quadrature across regions, so this spends
    the promise where it saves most far better than the hulls' slopes, which add them."""
    state, pos, steps = list(start), [0] * len(paths), []
    bound, total = step_cost(state)
    while True:
        best = None
        for g, path in enumerate(paths):
            if pos[g] >= len(path):
                continue
            trial = list(state)
            trial[g] = path[pos[g]][2]
            b, s = step_cost(trial)
            ds, db = s - total, b - bound
            key = (1, ds, -db) if db <= 1e-15 else (0, ds / db, 0.0)
            if best is None or key > best[0]:
                best = (key, g, b, s)
        if best is None:
            return steps
        _, g, bound, total = best
        state[g] = paths[g][pos[g]][2]
        pos[g] += 1
        steps.append((g, state[g]))


def test_route(order: Counts, test: Counts, whole: Counts, ref: int, a_lo: float,
               a_hat: float, saving: np.ndarray, eligible: np.ndarray, weights: np.ndarray,
               promise: float, alpha_v: float, alpha_t: float,
               prior_saving: np.ndarray | None = None,
               width: Callable = bernstein_width) -> RouteTest:
    """Order the family on ``order``, test it on ``test`` (module docstring, eqs. (5)-(10)).
    ``saving`` (G, m, T) per unit of traffic; ``eligible`` items may enter a policy;
    ``prior_saving`` (G,) the prior rule's saving (None: unknown, a region the path leaves
    to the reference is left to the prior rule instead); ``width`` τ of (8) (``normal_width``
    only for a yardstick)."""
    G, m, T = saving.shape
    w = np.asarray(weights, float)
    nz_whole = whole.loss + whole.win
    nu = cp_upper(nz_whole, np.broadcast_to(whole.n[..., None], nz_whole.shape),
                  alpha_v / max(int(eligible.sum()), 1))  # fmt: skip
    # ordering estimates (11): pessimistic by κ standard errors of the ordering part and by
    # the width the test part's count would add alone, judged scale removed
    n_o = np.maximum(order.n, 1.0)[..., None]
    n_t = np.maximum(test.n, 1.0)
    nu_o = (order.loss + order.win + 1.0) / (n_o + 2.0)
    j = max(2.0 * a_hat - 1.0, 1e-3)
    spread = ORDER_PENALTY * np.sqrt(nu_o / n_o) + np.sqrt(2.0 * np.log(1.0 / alpha_t) * nu_o
                                                          / n_t[..., None])  # fmt: skip
    d_order = np.where(eligible, (order.mean() + spread) / j, np.inf)
    mu = test.mean()
    tmin = np.minimum.outer(np.arange(T), np.arange(T))
    M = nu[:, :, tmin]  # (G, m, T, T): ν_gh,min(t,t')
    cell_upper = np.where(eligible, scaled(mu + width(nu / n_t[..., None],
                                                                2.0 / n_t[..., None],
                                                                alpha_t), a_lo), np.inf)
    cell_upper[:, ref] = 0.0
    if not eligible.any():
        return RouteTest(tuple({} for _ in range(G)), promise, 0.0, 0, 0, cell_upper)
    ps = None if prior_saving is None else np.asarray(prior_saving, float)
    n_ord = np.maximum(order.n, 1.0)

    def terms(g: int, state, mean: np.ndarray, moments: np.ndarray, n: np.ndarray
              ) -> tuple[float, float, float, float, float]:  # fmt: skip
        """Region g's (N̂ term, V term, b term, charged drop, saving by prices) from the
        per-item ``mean`` d̂, second ``moments`` (7) and distinct-prompt counts ``n``."""
        if state == PRIOR:
            return 0.0, 0.0, 0.0, w[g] * promise, 0.0 if ps is None else w[g] * ps[g]
        if state == REFERENCE:
            if ps is None:  # the prior rule serves where nothing is certified
                return 0.0, 0.0, 0.0, w[g] * promise, 0.0
            return 0.0, 0.0, 0.0, 0.0, 0.0
        pi = np.zeros((m, T))
        for (h, t), s in state.items():
            pi[h, t] += s
        phi = pi.sum(1)
        var = np.einsum("ht,hts,hs->h", pi, moments[g], pi) / n[g]
        b = float(np.max(np.where(phi > 0, 2.0 * w[g] * phi / n[g], 0.0)))
        return (float(w[g] * (pi * mean[g]).sum()), float(w[g] ** 2 * var.sum()), b, 0.0,
                float(w[g] * (pi * saving[g]).sum()))

    def bound(parts: np.ndarray, spread: float = 0.0) -> float:
        """R⁺ (9) of the regions' summed terms, ``spread`` added to N̂ before the width."""
        N, V, b, charged = parts[:, 0].sum() + spread, parts[:, 1].sum(), parts[:, 2].max(), \
            parts[:, 3].sum()  # fmt: skip
        if V > 0 or b > 0:
            return charged + float(scaled(N + width(V, b, alpha_t), a_lo))
        return charged + float(scaled(N, a_lo))

    # the order: the test's own bound predicted from the ordering part (its means and
    # moments, the test part's counts), pessimistic by κ standard errors of its estimate
    mu_o, M_o = order.mean(), nu_o[:, :, tmin]
    memo: dict = {}

    def predicted(states: list) -> tuple[float, float]:
        rows = []
        for g, st in enumerate(states):
            key = (g, st if isinstance(st, str) else tuple(sorted(st.items())))
            if key not in memo:
                memo[key] = (terms(g, st, mu_o, M_o, n_t), terms(g, st, mu_o, M_o, n_ord)[1])
            rows.append(memo[key])
        parts = np.array([r[0] for r in rows])
        se = ORDER_PENALTY * float(np.sqrt(sum(r[1] for r in rows)))
        return bound(parts, se), float(parts[:, 4].sum())

    start, paths = region_paths(d_order, saving, eligible, ref, promise, ps)
    steps = ordered_path(start, paths, predicted)
    state = list(start)
    parts = np.array([terms(g, s, mu, M, n_t) for g, s in enumerate(state)])  # (G, 5)
    cold = float(sum(terms(g, PRIOR, mu, M, n_t)[4] for g in range(G)))
    best = (cold, [PRIOR for _ in range(G)], promise)
    passed = tested = 0
    for g, new in [(None, None), *steps]:
        if g is not None:
            state[g] = new
            parts[g] = terms(g, new, mu, M, n_t)
        tested += 1
        up = bound(parts)
        if up > promise + 1e-12:
            break
        passed += 1
        sv = float(parts[:, 4].sum())
        if sv > best[0] + 1e-12:
            best = (sv, list(state), up)
    sv, chosen, up = best
    mixes = []
    for s in chosen:
        if s == PRIOR or (s == REFERENCE and ps is None):
            mixes.append({})
        elif s == REFERENCE:
            mixes.append({(ref, 0): 1.0})
        else:
            mixes.append(dict(s))
    return RouteTest(tuple(mixes), up, sv, passed, tested, cell_upper)
