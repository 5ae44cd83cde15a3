"""Certify cheaper backends per prompt region from judged pairs, with a stated error.

The prior-based rule (router_core.promise.rule) moves only as far as its beliefs do. This
module moves the route where judged evidence supports it, with a family-wise error stated in
advance (Learn-then-Test, [LTT]: risk control as multiple hypothesis testing; the binomial
bounds are [ClopperPearson]'s; both in docs/references.md).

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

Slices. A candidate is often as good as the reference on part of a region only. Each
region's prompts are ordered per candidate by a score fixed before any pair is judged (the
beliefs' drop p̂_r − p̂_h), and slice t is the share q_t of them scored closest (q = ¼, ½,
¾, 1; ``slice_thresholds``). The policy "h on slice t, the reference elsewhere" drops

    D_ght = E[(y_r − y_h)·1{x ∈ S_ght}]                                              (1')

in region g: the same bound (2) with losses and wins counted only on pairs inside the slice
(n still every pair of (g, h): the indicator is part of the loss), and the family (3) counts
every slice, K = G·(candidates)·(slices).

A region is served a mix of the reference and at most two policies i = (h, t), π maximising
the saving subject to the bounds (a linear programme with two constraints, so two non-zero
weights suffice):

    max_π Σ_i π_i s_i   s.t.  Σ_i π_i U_i⁺ ≤ promise,  Σ_i π_i = 1,  π ≥ 0             (4)

s_i = q_t·(1 − c_h / c_r). Prompts take their policy by a hash of their key (uniform,
independent of what the prompt says), so the mix's drop is Σ π_i D_i ≤ promise whenever (3)
holds: a certified region keeps the promise with probability ≥ 1 − α, whatever the beliefs
say. Counts are of distinct prompts (repeated verdicts on one prompt averaged first): the
bound is on the population of prompts, and traffic that repeats a prompt does not narrow it.
A region with no candidate judged on MIN_PAIRS prompts has no evidence and keeps the
prior-based rule, so nothing changes at cold start.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

ALPHA = 0.05  # family-wise error of every certification of a route
JUDGE_ALPHA_SHARE = 0.2  # of ALPHA spent on the judge's agreement bound
MIN_PAIRS = 20  # a (region, candidate) with fewer judged pairs is not evidence
PRIOR_PAIRS = 2.0  # pseudo-pairs the beliefs are worth when choosing whom to judge next


def cp_upper(k: np.ndarray, n: np.ndarray, delta: float) -> np.ndarray:
    """Clopper-Pearson upper bound of a binomial rate at one-sided level δ (1 where n = 0)."""
    from scipy.stats import beta as beta_dist  # here: serving a certificate never imports scipy

    k, n = np.asarray(k, float), np.asarray(n, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        up = beta_dist.ppf(1.0 - delta, k + 1.0, np.maximum(n - k, 0.0))
    return np.where(k >= n, 1.0, np.nan_to_num(up, nan=1.0))


def cp_lower(k: np.ndarray, n: np.ndarray, delta: float) -> np.ndarray:
    """Clopper-Pearson lower bound of a binomial rate at one-sided level δ (0 where k = 0)."""
    from scipy.stats import beta as beta_dist

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

    def distinct(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(n, k_ℓ, k_w) counted per distinct prompt: a prompt's repeated verdicts averaged
        (DARS), its mean d̄ rounded at random to a loss (prob. d̄⁺) or a win (prob. d̄⁻). The
        bound is on the prompt population: a prompt judged five times is one draw of it."""
        shape = (self.regions, self.backends)
        n = np.zeros(shape)
        loss, win = np.zeros((*shape, self.slices)), np.zeros((*shape, self.slices))
        rng = np.random.default_rng(self.seed + 1)
        for (g, h, _), (total, count, ins) in self._by_prompt.items():
            mean, u = total / count, rng.random()
            n[g, h] += 1
            loss[g, h] += (u < max(mean, 0.0)) & ins
            win[g, h] += (u < max(-mean, 0.0)) & ins
        return n, loss, win

    def upper_drops(self, judge: Judge, candidates: np.ndarray, alpha: float = ALPHA
                    ) -> np.ndarray:  # fmt: skip
        """(G, m, slices) U_ght of eq. (2) at the Bonferroni level of eq. (3) over the
        ``candidates`` (bool (m,), fixed before any pair: e.g. every backend cheaper than the
        reference) and slices; 0 for the reference, +∞ where h is no candidate or has fewer
        than MIN_PAIRS distinct prompts (``distinct``)."""
        cand = np.asarray(candidates, bool).copy()
        cand[self.ref] = False
        K = max(int(cand.sum()) * self.regions * self.slices, 1)
        alpha_j = alpha * JUDGE_ALPHA_SHARE
        delta = (alpha - alpha_j) / K
        a_lo = judge.lower(alpha_j)
        n_prompts, loss, win = self.distinct()
        n = n_prompts[..., None]
        num = cp_upper(loss, n, delta / 2.0) - cp_lower(win, n, delta / 2.0)
        scale = 2.0 * a_lo - 1.0
        with np.errstate(divide="ignore", invalid="ignore"):
            U = np.where(num > 0, num / scale if scale > 0 else np.inf, num)
        U = np.where((cand[None, :] & (n_prompts >= MIN_PAIRS))[..., None], U, np.inf)
        U[:, self.ref] = 0.0
        return U

    def partner(self, region: int, savings: np.ndarray, promise: float, accuracy: float,
                rng: np.random.Generator, prior_drop: np.ndarray | None = None) -> int:
        """Whom to judge beside the reference on a prompt of ``region`` (Thompson sampling):
        each candidate's drop drawn from Beta posteriors of its observed rates (its belief's
        drop ``prior_drop`` worth PRIOR_PAIRS pseudo-pairs), corrected by (1); the one whose
        mix (4) alone would save most is judged. Candidates: ``savings`` > 0."""
        g = int(region)
        n, kl, kw = self.n[g], self.loss[g, :, -1], self.win[g, :, -1]  # the whole region
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
    """Per region: the mix (4) ({(backend, slice): share}, empty = none certified) and its
    saving; the slices' thresholds on the a-priori score (``slice_thresholds``)."""

    mixes: tuple[dict[tuple[int, int], float], ...]
    savings: tuple[float, ...]
    evidence: tuple[bool, ...]  # whether the region had any candidate with MIN_PAIRS pairs
    upper: np.ndarray  # (G, m, slices) U_ght
    thresholds: np.ndarray | None = None  # (G, m, slices); None: one slice, the region

    def choose(self, region: np.ndarray, keys: Sequence[str], fallback: np.ndarray,
               fallback_saving: np.ndarray | None = None, ref: int = 0,
               scores: np.ndarray | None = None) -> np.ndarray:
        """(n,) backend per prompt: the region's mix where it has one and saves more than the
        prior-based rule there (``fallback_saving[g]``, from prices alone; None: the mix
        wherever it has one), else the prior-based choice ``fallback``. The prompt's key
        picks one (backend, slice) of the mix; the backend serves it if the prompt lies in
        the slice (its a-priori ``scores`` (n, m) at most the slice's threshold), else the
        reference."""
        out = np.asarray(fallback, int).copy()
        for i, (g, key) in enumerate(zip(np.asarray(region, int), keys, strict=True)):
            mix = self.mixes[g]
            if not mix:
                continue
            if fallback_saving is not None and self.savings[g] <= fallback_saving[g]:
                continue
            u, acc, pick = prompt_share(key), 0.0, ref
            for (h, t), share in mix.items():
                acc += share
                if u < acc:
                    inside = (self.thresholds is None or scores is None
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
            shares: Sequence[float] = SLICES) -> Certificate:
    """The route's certificate from its judged pairs (module docstring).

    Args:
        evidence: the route's judged pairs per (region, backend, slice).
        judge: its measured agreement. cost: (m,) or (G, m) price of each backend (per region
            when known). promise: the route's max_drop. alpha: family-wise error (3).
        thresholds, shares: the slices (``slice_thresholds``) when the evidence has more
            than one; a slice's saving counts its share of the region.
    """
    G, m, ref = evidence.regions, evidence.backends, evidence.ref
    T = evidence.slices
    share = np.ones(T) if T == 1 else np.asarray(shares, float)
    C = np.broadcast_to(np.asarray(cost, float), (G, m))
    cand = (C < C[:, [ref]]).any(axis=0)  # cheaper than the reference somewhere: fixed a priori
    U = evidence.upper_drops(judge, cand, alpha)
    mixes, savings, has = [], [], []
    items = [(h, t) for h in range(m) if h != ref for t in range(T)]
    for g in range(G):
        s = 1.0 - C[g] / C[g, ref] if C[g, ref] > 0 else np.zeros(m)
        # item 0: the reference; then every (candidate, slice), its saving × its share
        Ui = np.array([0.0] + [U[g, h, t] for h, t in items])
        si = np.array([0.0] + [s[h] * share[t] for h, t in items])
        mix, val = best_mix(Ui, si, 0, promise)
        mixes.append({items[i - 1]: p for i, p in mix.items()})
        savings.append(val)
        has.append(bool(np.isfinite(Ui[1:]).any()))
    return Certificate(tuple(mixes), tuple(savings), tuple(has), U,
                       None if T == 1 else thresholds)


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
