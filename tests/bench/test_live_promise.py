"""The live promise bench's pure parts: its windows, when a wrong prior counts as caught, and
what it reads out of an explanation (bench/routing/loop_windows.py, live_gateway.py)."""

from __future__ import annotations

import math

import pytest

from bench.routing.live_gateway import candidate_p, local_model_list, reference_of
from bench.routing.loop_windows import Served, caught_after, windows


def _served(backend: str, q: float, q_ref: float, p: float | None = None,
            q_watched: float = 0.6) -> Served:
    return Served(backend, q, q_ref, 0.1, 1.0, p, q_watched)


def test_windows_share_drop_saving_and_estimate() -> None:
    rows = [_served("cheap", 0.0, 1.0, 0.9), _served("ref", 1.0, 1.0, 0.7, 0.4),
            _served("ref", 1.0, 1.0), _served("cheap", 1.0, 1.0, 0.5)]
    w1, w2 = windows(rows, 2, "cheap")
    assert (w1.end, w1.share, w1.drop) == (2, 0.5, 0.5)
    assert w1.saving == pytest.approx(0.9)
    assert w1.estimate == pytest.approx(0.8) and w1.truth == pytest.approx(0.5)
    assert w1.n_estimate == 2
    assert (w2.end, w2.drop, w2.n_estimate, w2.estimate) == (4, 0.0, 1, 0.5)
    assert windows(rows[:3], 2, "cheap")[-1].end == 3  # a short last window is kept


def test_caught_after_needs_the_estimate_close_and_every_later_window_keeping_the_promise() -> None:
    def w(drop: float, p: float | None) -> list[Served]:
        return [_served("x", 1.0 - drop, 1.0, p, 0.6)] * 10

    # estimate right at window 2, but window 3 breaks the promise: caught at window 4
    rows = w(0.2, 0.9) + w(0.0, 0.62) + w(0.1, 0.6) + w(0.0, 0.63) + w(0.05, None)
    ws = windows(rows, 10, "x")
    assert caught_after(ws, max_drop=0.06) == 40
    assert caught_after(ws, max_drop=0.2) == 20
    assert caught_after(windows(w(0.0, 0.9) * 3, 10, "x"), max_drop=0.06) is None


def test_reference_is_read_from_a_record_or_the_reason_line() -> None:
    expl = {"decision": {
        "reason": "promise: within 0.01 of claude-sonnet-4-6 (strongest known: mean p̂ "
                  "0.918); no cheaper backend ...",
        "candidates": [{"backend": "llama", "quality": 0.84, "chosen": True}]}}
    assert reference_of(expl) == "claude-sonnet-4-6"
    assert candidate_p(expl, "llama") == 0.84
    assert candidate_p(expl, "claude-sonnet-4-6") is None
    expl["decision"]["promise"] = {"reference": {"backend": "claude-sonnet-4-6", "p": 0.918}}
    assert reference_of(expl) == "claude-sonnet-4-6"
    assert candidate_p(expl, "claude-sonnet-4-6") == 0.918


def test_local_model_list_keeps_prices_and_the_model_it_was() -> None:
    from gateway.pricing import Price

    raw = {"model_list": [
        {"model_name": "azure-4o", "litellm_params": {"model": "azure/prod", "api_version": "x"},
         "model_info": {"base_model": "azure/gpt-4o", "input_cost_per_million": 9.0}},
        {"model_name": "sonnet", "litellm_params": {"model": "anthropic/claude-sonnet-4-6"}}]}
    prices = {"azure-4o": Price(2.5e-6, 1e-5), "sonnet": Price(3e-6, 1.5e-5)}
    azure, sonnet = local_model_list(raw, prices, "http://127.0.0.1:9/v1")
    assert azure["litellm_params"] == {"model": "openai/azure-4o",
                                       "api_base": "http://127.0.0.1:9/v1",
                                       "api_key": "sk-local-upstream"}
    assert azure["model_info"] == {"base_model": "azure/gpt-4o",
                                   "input_cost_per_token": 2.5e-6,
                                   "output_cost_per_token": 1e-5}
    assert sonnet["model_info"]["base_model"] == "anthropic/claude-sonnet-4-6"
    assert math.isclose(sonnet["model_info"]["output_cost_per_token"], 1.5e-5)


def test_route_drop_is_paired_when_every_explanation_gives_the_reference() -> None:
    from bench.routing.live_routes import RouteFigures

    f = RouteFigures("auto", p_chosen=[0.9, 0.7], p_reference=[0.9, 0.9])
    assert f.drop == pytest.approx(0.1) and f.reference_known == 2
    # the reference's p̂ on one request only: its mean minus the chosen mean over all
    f = RouteFigures("auto", p_chosen=[0.9, 0.6], p_reference=[0.9, None])
    assert f.drop == pytest.approx(0.9 - 0.75) and f.reference_known == 1
    assert math.isnan(RouteFigures("auto", p_chosen=[0.5], p_reference=[None]).drop)


def test_a_window_above_the_promise_by_sampling_noise_still_keeps_it() -> None:
    # 250 prompts, 25% of them a loss of 1 and 17% a gain of 1: drop 0.08, se ≈ 0.04
    noisy = ([_served("x", 0.0, 1.0, 0.6)] * 62 + [_served("x", 1.0, 0.0, 0.6)] * 42
             + [_served("x", 1.0, 1.0, 0.6)] * 146)
    (w,) = windows(noisy, 250, "x")
    assert w.drop == pytest.approx(0.08) and 0.035 < w.se < 0.045
    assert w.keeps(0.06) and caught_after([w], max_drop=0.06) == 250
    # a window that breaks it: 16% losses, no gains (drop 0.16, se ≈ 0.023)
    broken = [_served("x", 0.0, 1.0, 0.6)] * 40 + [_served("x", 1.0, 1.0, 0.6)] * 210
    assert not windows(broken, 250, "x")[0].keeps(0.06)
    assert caught_after(windows(broken + noisy, 250, "x"), max_drop=0.06) == 500
    assert caught_after(windows(noisy + broken, 250, "x"), max_drop=0.06) is None
