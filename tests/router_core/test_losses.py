"""Eq. 8 and CARO: reductions, band temperatures, and one gradient step on a toy case."""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from router_core.losses import CaroRanking, CostSpectrumInfoNCE, cost_bands


def _toy(seed: int = 0, b: int = 16, m: int = 6, d: int = 8):
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(b, d, generator=g), dim=1)
    e = F.normalize(torch.randn(m, d, generator=g), dim=1)
    pos = torch.rand(b, m, generator=g) > 0.5
    cost = torch.linspace(0.05, 1.0, m)
    return q, e, pos, cost


def test_one_band_gamma_zero_is_infonce():
    """Eq. 8 with K_b = 1 and γ = 0 equals Eq. 6 at τ = τ_min + α·mean(c̃)."""
    q, e, pos, cost = _toy()
    sim = q @ e.T
    loss = CostSpectrumInfoNCE(n_bands=1, tau_min=0.05, alpha=0.25, gamma=0.0)(sim, pos, cost)
    tau = 0.05 + 0.25 * cost.mean()
    logits = sim / tau
    num = torch.logsumexp(logits.masked_fill(~pos, float("-inf")), dim=1)
    den = torch.logsumexp(logits, dim=1)
    has = pos.any(dim=1)
    expected = (den - num)[has].mean()
    torch.testing.assert_close(loss, expected)


def test_bands_are_equal_count_cost_percentiles_and_taus_grow_with_cost():
    cost = np.array([0.9, 0.1, 0.5, 0.3, 0.7, 1.0, 0.2, 0.05, 0.6, 0.4])
    bands = cost_bands(cost, 5)
    assert np.bincount(bands).tolist() == [2, 2, 2, 2, 2]
    order = np.argsort(cost)
    assert (np.diff(bands[order]) >= 0).all()  # cheaper expert → lower or same band
    fn = CostSpectrumInfoNCE(n_bands=5, tau_min=0.05, alpha=0.25)
    taus = fn.temperatures(torch.as_tensor(cost), torch.as_tensor(bands))
    assert torch.all(taus[1:] > taus[:-1])
    assert abs(float(taus[0]) - (0.05 + 0.25 * np.mean(np.sort(cost)[:2]))) < 1e-9


def test_gamma_penalises_costly_negatives():
    """A larger γ lowers the denominator mass of costly experts, so the loss falls."""
    q, e, pos, cost = _toy(1)
    sim = q @ e.T
    low = CostSpectrumInfoNCE(gamma=0.0)(sim, pos, cost)
    high = CostSpectrumInfoNCE(gamma=0.5)(sim, pos, cost)
    assert high < low


def test_queries_without_positives_are_ignored():
    q, e, pos, cost = _toy(2)
    sim = q @ e.T
    pos2 = pos.clone()
    pos2[0] = False
    fn = CostSpectrumInfoNCE()
    full = fn(sim[1:], pos2[1:], cost)
    assert torch.isclose(fn(sim, pos2, cost), full)


def test_caro_pairs_prefer_better_then_cheaper():
    u = torch.tensor([[1.0, 1.0, 0.0]])  # experts 0 and 1 both right; 1 is cheaper
    cost = torch.tensor([0.9, 0.1, 0.5])
    caro = CaroRanking(delta=0.0, rho=1.0, scale=1.0)
    right = torch.tensor([[0.5, 1.0, -1.0]])  # cheap-correct > costly-correct > wrong
    wrong = torch.tensor([[1.0, -1.0, 0.5]])
    assert caro(right, u, cost) < caro(wrong, u, cost)
    # the pairs: (0,2), (1,2) by utility with w = 1; (1,0) by cost with w = ρ
    s = right[0]
    expected = (
        F.softplus(-(s[0] - s[2])) + F.softplus(-(s[1] - s[2])) + F.softplus(-(s[1] - s[0]))
    ) / 3
    torch.testing.assert_close(caro(right, u, cost), expected)


def test_caro_ignores_missing_utilities():
    u = torch.tensor([[float("nan"), 1.0, 0.0]])
    s = torch.tensor([[3.0, 0.2, 0.1]])
    caro = CaroRanking(scale=1.0)
    torch.testing.assert_close(
        caro(s, u, torch.tensor([0.1, 0.5, 0.9])), F.softplus(-(s[0, 1] - s[0, 2]))
    )


def test_gradient_step_moves_cheap_correct_above_expensive_wrong():
    """Toy case: the query starts nearer an expensive wrong expert; one step of Eq. 8 (+CARO)
    moves it so that the cheap correct expert is the more similar."""
    e = F.normalize(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]), dim=1)
    cost = torch.tensor([0.05, 1.0, 0.5])  # expert 0 cheap & correct, 1 expensive & wrong
    pos = torch.tensor([[True, False, False]])
    u = torch.tensor([[1.0, 0.0, 0.0]])
    raw = torch.tensor([[0.45, 0.55, 0.1]], requires_grad=True)
    opt = torch.optim.SGD([raw], lr=0.1)
    before = F.normalize(raw, dim=1) @ e.T
    assert before[0, 1] > before[0, 0]
    loss = CostSpectrumInfoNCE()(F.normalize(raw, dim=1) @ e.T, pos, cost)
    loss = loss + CaroRanking()(F.normalize(raw, dim=1) @ e.T, u, cost)
    opt.zero_grad()
    loss.backward()
    opt.step()
    after = F.normalize(raw, dim=1) @ e.T
    assert after[0, 0] > after[0, 1]


def test_an_unobserved_expert_is_no_negative():
    """With ``available``, an expert not observed on a query leaves its denominator: its
    similarity does not change that query's loss (another dataset's model is not wrong)."""
    q, e, pos, cost = _toy(3)
    sim = (q @ e.T).clone()
    avail = torch.ones_like(pos)
    avail[:, -1] = False
    pos = pos & avail
    fn = CostSpectrumInfoNCE(n_bands=3)
    base = fn(sim, pos, cost, avail)
    moved = sim.clone()
    moved[:, -1] = 1.0  # the unobserved expert looks perfect for every query
    assert torch.allclose(fn(moved, pos, cost, avail), base)
    assert fn(moved, pos, cost) > base  # without the mask it would be pushed away


def test_caro_by_pattern_ranks_each_dataset_among_its_own_experts():
    """Rows observed on different expert sets (two datasets in one table): CARO per set of
    columns, averaged by rows, equals CARO on each block; one set is plain CARO."""
    from router_core.training.objective import caro_by_pattern

    g = torch.Generator().manual_seed(4)
    z = torch.randn(12, 5, generator=g)
    u = (torch.rand(12, 5, generator=g) > 0.5).float()
    c = torch.rand(12, 5, generator=g)
    caro = CaroRanking(delta=0.0, rho=0.1, scale=1.0)
    full = torch.ones(12, 5, dtype=torch.bool)
    torch.testing.assert_close(caro_by_pattern(caro, z, u, c, full), caro(z, u, c))
    avail = full.clone()
    avail[:6, 3:] = False  # rows 0-5 saw experts 0-2, rows 6-11 experts 2-4
    avail[6:, :2] = False
    u_obs = u.masked_fill(~avail, float("nan"))
    got = caro_by_pattern(caro, z, u_obs, c, avail)
    a = caro(z[:6, :3], u[:6, :3], c[:6, :3])
    b = caro(z[6:, 2:], u[6:, 2:], c[6:, 2:])
    torch.testing.assert_close(got, 0.5 * a + 0.5 * b)
