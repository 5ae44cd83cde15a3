"""Certify cheaper backends per prompt region from judged pairs, with a stated error.

The prior-based rule (router_core.promise.rule) moves only as far as its beliefs do. This
module moves the route where judged evidence supports it, with a family-wise error stated in
advance (Learn-then-Test: risk control as multiple hypothesis testing, Angelopoulos, Bates,
Candès, Jordan, Lei, arXiv 2110.01052, Ann. Appl. Stat. 19(2) 2025).

A judged pair on prompt x of region g (its category when known, else its embedding cluster):
the reference r and a candidate h both answer, the judge grades both, ŷ_r, ŷ_h ∈ [0, 1].
The judge is right with probability a per comparison and otherwise reverses it (or flips each
grade independently with a symmetric error): either way

    E[ŷ_r − ŷ_h | x] = (2a − 1)·(y_r − y_h)                                         (J)

With d̂ = ŷ_r − ŷ_h split into its loss d̂⁺ and win d̂⁻ (each in [0, 1]), observed rates
ℓ = E d̂⁺ and w = E d̂⁻ in the region, the true drop of h against r there is

    D_gh = (ℓ − w) / (2a − 1)                                                        (1)

Each count of n pairs is binomial (a grade strictly between 0 and 1 is first rounded at
random with its own probability: the mean is kept, so the count is exactly binomial), and
with Clopper-Pearson bounds at δ/2 each and a the judge's agreement bounded below by a_lo:

    num = CP_up(k_ℓ, n; δ/2) − CP_lo(k_w, n; δ/2)
    U_gh = num / (2 a_lo − 1)  if num > 0,  else num        ≥ D_gh with prob. ≥ 1 − δ      (2)

The hypothesis H_gh "D_gh > promise" is rejected when U_gh ≤ promise (its binomial p-value is
below δ). a_lo is the Clopper-Pearson lower bound of the judge's measured agreement (``Judge``:
verdicts checked against known truth, or repeated judgements of one comparison, whose
agreement is a² + (1 − a)²) at level α_J. Bonferroni over the family of K = G·(candidates)
hypotheses fixed before any pair is seen:

    δ = (α − α_J) / K   ⇒   P(some U_gh < D_gh) ≤ α                                 (3)

A region is served a mix of the reference and at most two candidates, π maximising the
saving subject to the bounds (a linear programme with two constraints, so two non-zero
weights suffice):

    max_π Σ_h π_h s_h   s.t.  Σ_h π_h U_gh⁺ ≤ promise,  Σ_h π_h = 1,  π ≥ 0         (4)

s_h = 1 − c_h / c_r. Prompts take their share by a hash of their key (uniform, independent of
what the prompt says), so the mix's drop is Σ π_h D_gh ≤ promise whenever (3) holds: a
certified region keeps the promise with probability ≥ 1 − α, whatever the beliefs say. A
region with no candidate holding MIN_PAIRS pairs has no evidence and keeps the prior-based
rule, so nothing changes at cold start.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import beta as beta_dist

ALPHA = 0.05  # family-wise error of every certification of a route
JUDGE_ALPHA_SHARE = 0.2  # of ALPHA spent on the judge's agreement bound
MIN_PAIRS = 20  # a (region, candidate) with fewer judged pairs is not evidence
PRIOR_PAIRS = 2.0  # pseudo-pairs the beliefs are worth when choosing whom to judge next


def cp_upper(k: np.ndarray, n: np.ndarray, delta: float) -> np.ndarray:
    """Clopper-Pearson upper bound of a binomial rate at one-sided level δ (1 where n = 0)."""
    k, n = np.asarray(k, float), np.asarray(n, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        up = beta_dist.ppf(1.0 - delta, k + 1.0, np.maximum(n - k, 0.0))
    return np.where(k >= n, 1.0, np.nan_to_num(up, nan=1.0))


def cp_lower(k: np.ndarray, n: np.ndarray, delta: float) -> np.ndarray:
    """Clopper-Pearson lower bound of a binomial rate at one-sided level δ (0 where k = 0)."""
    k, n = np.asarray(k, float), np.asarray(n, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = beta_dist.ppf(delta, np.maximum(k, 1e-12), n - k + 1.0)
    return np.where(k <= 0, 0.0, np.nan_to_num(lo, nan=0.0))


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
    """Judged pairs of one route, counted per (region, backend): n pairs, k_ℓ observed
    losses and k_w observed wins of the backend against the reference (module docstring)."""

    regions: int
    backends: int
    ref: int
    seed: int = 0
    n: np.ndarray = field(init=False)
    loss: np.ndarray = field(init=False)
    win: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        shape = (self.regions, self.backends)
        self.n, self.loss, self.win = np.zeros(shape), np.zeros(shape), np.zeros(shape)
        self._rng = np.random.default_rng(self.seed)  # the random rounding of grades

    def add(self, region: Sequence[int], backend: Sequence[int], y_ref: Sequence[float],
            y_backend: Sequence[float]) -> None:
        """Count judged pairs: region, candidate and both grades per pair (grades in [0, 1];
        a pair of the reference with itself, or with a missing grade, is skipped)."""
        g, h = np.asarray(region, int), np.asarray(backend, int)
        d = np.asarray(y_ref, float) - np.asarray(y_backend, float)
        ok = np.isfinite(d) & (h != self.ref)
        g, h, d = g[ok], h[ok], d[ok]
        u = self._rng.random(len(d))
        np.add.at(self.n, (g, h), 1.0)
        np.add.at(self.loss, (g, h), (u < np.clip(d, 0, 1)).astype(float))
        np.add.at(self.win, (g, h), (u < np.clip(-d, 0, 1)).astype(float))

    def upper_drops(self, judge: Judge, candidates: np.ndarray, alpha: float = ALPHA
                    ) -> np.ndarray:  # fmt: skip
        """(G, m) U_gh of eq. (2) at the Bonferroni level of eq. (3) over the ``candidates``
        (bool (m,), fixed before any pair: e.g. every backend cheaper than the reference);
        0 for the reference, +∞ where h is no candidate or has fewer than MIN_PAIRS pairs."""
        cand = np.asarray(candidates, bool).copy()
        cand[self.ref] = False
        K = max(int(cand.sum()) * self.regions, 1)
        alpha_j = alpha * JUDGE_ALPHA_SHARE
        delta = (alpha - alpha_j) / K
        a_lo = judge.lower(alpha_j)
        num = (cp_upper(self.loss, self.n, delta / 2.0)
               - cp_lower(self.win, self.n, delta / 2.0))  # fmt: skip
        scale = 2.0 * a_lo - 1.0
        with np.errstate(divide="ignore", invalid="ignore"):
            U = np.where(num > 0, num / scale if scale > 0 else np.inf, num)
        U = np.where(cand[None, :] & (self.n >= MIN_PAIRS), U, np.inf)
        U[:, self.ref] = 0.0
        return U

    def partner(self, region: int, savings: np.ndarray, promise: float, accuracy: float,
                rng: np.random.Generator, prior_drop: np.ndarray | None = None) -> int:
        """Whom to judge beside the reference on a prompt of ``region`` (Thompson sampling):
        each candidate's drop drawn from Beta posteriors of its observed rates (its belief's
        drop ``prior_drop`` worth PRIOR_PAIRS pseudo-pairs), corrected by (1); the one whose
        mix (4) alone would save most is judged. Candidates: ``savings`` > 0."""
        g = int(region)
        n, kl, kw = self.n[g], self.loss[g], self.win[g]
        scale = max(2.0 * accuracy - 1.0, 1e-3)
        pd = np.zeros(self.backends) if prior_drop is None else np.asarray(prior_drop, float)
        # observed rates the belief implies: a loss share ½(|D|+D)·scale around a base 0.1
        base = 0.1
        l0 = np.clip(base + np.maximum(pd, 0) * scale, 1e-3, 1 - 1e-3)
        w0 = np.clip(base + np.maximum(-pd, 0) * scale, 1e-3, 1 - 1e-3)
        lp = rng.beta(1.0 + kl + PRIOR_PAIRS * l0, 1.0 + n - kl + PRIOR_PAIRS * (1 - l0))
        wp = rng.beta(1.0 + kw + PRIOR_PAIRS * w0, 1.0 + n - kw + PRIOR_PAIRS * (1 - w0))
        d = (lp - wp) / scale
        share = np.where(d <= promise, 1.0, promise / np.maximum(d, 1e-9))
        value = np.where(np.asarray(savings) > 0, np.asarray(savings) * share, -np.inf)
        value[self.ref] = -np.inf
        if not np.isfinite(value).any():
            return self.ref
        return int(np.argmax(value + 1e-12 * rng.random(self.backends)))


def best_mix(U: np.ndarray, savings: np.ndarray, ref: int, promise: float
             ) -> tuple[dict[int, float], float]:  # fmt: skip
    """Eq. (4) for one region: ({backend: share}, its saving), the reference taking the rest.
    Vertices of the programme: one candidate with U ≤ promise alone, or two candidates
    (i with U_i ≤ promise, j with U_j > promise) at the share that spends the promise."""
    U, s = np.asarray(U, float), np.asarray(savings, float)
    ok = np.isfinite(U) & (s > 0)
    ok[ref] = False
    Up = np.maximum(U, 0.0)
    best: tuple[dict[int, float], float] = ({}, 0.0)
    lows = [ref] + [int(h) for h in np.flatnonzero(ok & (Up <= promise))]
    highs = [int(h) for h in np.flatnonzero(ok & (Up > promise))]
    for i in lows:
        si = 0.0 if i == ref else s[i]
        if si > best[1]:
            best = ({i: 1.0}, float(si))
        ui = 0.0 if i == ref else Up[i]
        for j in highs:
            pj = (promise - ui) / (Up[j] - ui)
            val = (1.0 - pj) * si + pj * s[j]
            if val > best[1] + 1e-12:
                mix = {j: float(pj)} if i == ref else {i: float(1.0 - pj), j: float(pj)}
                best = (mix, float(val))
    return best


@dataclass(frozen=True)
class Certificate:
    """Per region: the mix (4) ({backend: share}, empty = none certified) and its saving."""

    mixes: tuple[dict[int, float], ...]
    savings: tuple[float, ...]
    evidence: tuple[bool, ...]  # whether the region had any candidate with MIN_PAIRS pairs
    upper: np.ndarray  # (G, m) U_gh

    def choose(self, region: np.ndarray, keys: Sequence[str], fallback: np.ndarray,
               fallback_saving: np.ndarray | None = None, ref: int = 0) -> np.ndarray:
        """(n,) backend per prompt: the region's mix where it has one and saves more than the
        prior-based rule there (``fallback_saving[g]``, from prices alone; None: the mix
        wherever it has one), else the prior-based choice ``fallback``."""
        out = np.asarray(fallback, int).copy()
        for i, (g, key) in enumerate(zip(np.asarray(region, int), keys, strict=True)):
            mix = self.mixes[g]
            if not mix:
                continue
            if fallback_saving is not None and self.savings[g] <= fallback_saving[g]:
                continue
            u, acc, pick = prompt_share(key), 0.0, ref
            for h, share in mix.items():
                acc += share
                if u < acc:
                    pick = h
                    break
            out[i] = pick
        return out


def certify(evidence: Evidence, judge: Judge, cost: np.ndarray, promise: float,
            alpha: float = ALPHA) -> Certificate:
    """The route's certificate from its judged pairs (module docstring).

    Args:
        evidence: the route's judged pairs per (region, backend).
        judge: its measured agreement. cost: (m,) or (G, m) price of each backend (per region
            when known). promise: the route's max_drop. alpha: family-wise error (3).
    """
    G, m, ref = evidence.regions, evidence.backends, evidence.ref
    C = np.broadcast_to(np.asarray(cost, float), (G, m))
    cand = (C < C[:, [ref]]).any(axis=0)  # cheaper than the reference somewhere: fixed a priori
    U = evidence.upper_drops(judge, cand, alpha)
    mixes, savings, has = [], [], []
    for g in range(G):
        s = 1.0 - C[g] / C[g, ref] if C[g, ref] > 0 else np.zeros(m)
        mix, val = best_mix(U[g], s, ref, promise)
        mixes.append(mix)
        savings.append(val)
        has.append(bool((np.isfinite(U[g]) & (np.arange(m) != ref)).any()))
    return Certificate(tuple(mixes), tuple(savings), tuple(has), U)


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
