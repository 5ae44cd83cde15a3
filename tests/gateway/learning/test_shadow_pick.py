"""Shadow exploration asks the least known backends first.

A backend known only by a prior (its price, a published figure, a vendor's claim) is what
routing can be wrong about; once the rule stops sending it traffic, shadow calls are the only
outcomes it gets. Picked at random among the pool it got a verdict on candidates / (pool − 1)
of the explored requests, and the live loop's estimate of a wrongly claimed backend drifted
from its truth (bench/routing/wrong_prior_loop.py). The pool here is a real one
(``build_pool`` over the fake router and a backend it does not know); ``_pick`` reads nothing
else, so no gateway runs.
"""

from __future__ import annotations

import random
from dataclasses import replace

from gateway.config import ExplorationSettings, settings_from_dict
from gateway.learning.shadow import Explorer
from gateway.pool import PoolHolder, build_pool
from gateway.pool.known import COLD_START_KEY
from gateway.pricing import Price
from tests.gateway.router_fixture import PRICES, build_router

NEW = ("fake-new", "fake-newer")  # unknown to the router: each joins on a price prior


def _pool(outcomes: dict[str, int] | None = None):
    entries = [{"model_name": n, "litellm_params": {"model": f"openai/{n}"}} for n in PRICES]
    entries += [{"model_name": n, "litellm_params": {"model": f"openai/{n}"}} for n in NEW]
    settings = settings_from_dict({"model_list": entries})
    prices = {n: Price(i * 1e-6, o * 1e-6) for n, (i, o) in PRICES.items()}
    prices.update({n: Price(0.2e-6, 0.4e-6) for n in NEW})
    router = build_router()
    pool = build_pool(settings, prices, router)
    if outcomes is not None:  # as the learning loop publishes a refined cold-start expert
        cfg = {**dict(pool.router.config or {}), COLD_START_KEY: outcomes}
        pool = build_pool(settings, prices, replace(pool.router, config=cfg))
    return pool


def _explorer(pool, candidates: int, seed: int) -> Explorer:
    cfg = ExplorationSettings(enabled=True, candidates=candidates)
    return Explorer(None, PoolHolder(pool), cfg, judge=None, rng=random.Random(seed))  # type: ignore[arg-type]


def test_backends_on_a_prior_are_shadowed_before_trained_ones() -> None:
    pool = _pool()
    assert pool.priors == set(NEW)  # the trained experts are not on a prior
    names = list(pool.backends)
    for seed in range(40):
        ex = _explorer(pool, 2, seed)
        assert set(ex._pick(pool, names, "fake-mid", set())) == set(NEW)
        # served by one of them, the other goes first, then a trained one
        picked = ex._pick(pool, names, NEW[0], set())
        assert picked[0] == NEW[1] and picked[1] in PRICES


def test_fewest_judged_outcomes_first_then_prompts_not_yet_observed() -> None:
    pool = _pool({NEW[0]: 150, NEW[1]: 20})
    names = list(pool.backends)
    for seed in range(40):
        picked = _explorer(pool, 3, seed)._pick(pool, names, "fake-strong", set())
        assert picked[:2] == list(NEW[::-1])
        # among trained experts (none counted), one not yet observed on this prompt first
        trained = [n for n in PRICES if n != "fake-strong"]
        got = _explorer(pool, 3, seed)._pick(pool, trained, "fake-strong", {"fake-mid"})
        assert got == ["fake-cheap", "fake-mid"]


def test_a_prompt_longer_than_max_prompt_chars_is_served_not_explored() -> None:
    """Shadowing re-sends the whole prompt to the reference and a candidate: a prompt past
    ``max_prompt_chars`` is never explored (litellm's handling of an 8 MB prompt held the
    event loop ~60 ms a call; the hostile bench's loop_stall_ms)."""
    cfg = ExplorationSettings(enabled=True, epsilon=1.0, max_prompt_chars=1000)
    explorer = Explorer(None, PoolHolder(_pool()), cfg, judge=object(),  # type: ignore[arg-type]
                        rng=random.Random(0))
    assert explorer.wants("auto", 1000)
    assert not explorer.wants("auto", 1001)
    assert ExplorationSettings().max_prompt_chars == 100_000


def _promised(tmp_path, outcomes: dict[str, int]):
    """The pool above with a promise route against fake-strong, and a SQLite database."""
    from gateway.store.engine import make_engine
    from gateway.store.migrate import upgrade_engine

    entries = [{"model_name": n, "litellm_params": {"model": f"openai/{n}"}} for n in PRICES]
    entries += [{"model_name": n, "litellm_params": {"model": f"openai/{n}"}} for n in NEW]
    settings = settings_from_dict({"model_list": entries, "routes": {
        "auto": {"max_drop": 0.05, "reference": "fake-strong"}}})
    prices = {n: Price(i * 1e-6, o * 1e-6) for n, (i, o) in PRICES.items()}
    prices.update({n: Price(0.2e-6, 0.4e-6) for n in NEW})
    pool = build_pool(settings, prices, build_router())  # the new backends join on priors
    cfg = {**dict(pool.router.config or {}), COLD_START_KEY: outcomes}
    pool = build_pool(settings, prices, replace(pool.router, config=cfg))
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    upgrade_engine(engine)
    return pool, engine


def test_on_a_promise_route_priors_first_then_the_partner_its_pairs_favour(tmp_path) -> None:
    """Past JUDGED_FIRST verdicts (MIN_OUTCOMES outcomes' worth through an 80% judge) a
    backend is known enough; a promise route's shadow call then
    goes to the partner its certificate would save most with (gateway/learning/partners.py),
    a trained backend included: before, trained backends counted as known and were never
    judged beside the reference, so none could be certified (bench/routing/learning_loop.py:
    only the two backends on priors ever had a pair)."""
    from gateway.learning.refine_priors import MIN_OUTCOMES
    from gateway.learning.shadow import JUDGED_FIRST

    pool, engine = _promised(tmp_path, {NEW[0]: 5, NEW[1]: JUDGED_FIRST})
    names = list(pool.backends)
    ex = Explorer(engine, PoolHolder(pool), ExplorationSettings(enabled=True, candidates=1),
                  judge=None, rng=random.Random(0))  # type: ignore[arg-type]
    assert ex.partners.evidence(pool, "auto") is not None  # read from the (empty) database
    # a backend still on its prior goes first, as on any route
    assert ex._pick(pool, names, "fake-strong", set(), "auto") == [NEW[0]]
    # and its served answer is judged alone when its pair does not fit (Explorer.explore);
    # a trained backend's, or one past JUDGED_FIRST verdicts, is not
    assert ex._judged_first(pool, NEW[0]) and not ex._judged_first(pool, NEW[1])
    assert not ex._judged_first(pool, "fake-cheap")
    # and still at MIN_OUTCOMES verdicts: through an 80% judge they are worth 36 outcomes
    (tmp_path / "mid").mkdir()
    mid, _ = _promised(tmp_path / "mid", {NEW[0]: MIN_OUTCOMES, NEW[1]: JUDGED_FIRST})
    ex.partners.evidence(mid, "auto")
    assert ex._pick(mid, names, "fake-strong", set(), "auto") == [NEW[0]]
    (tmp_path / "later").mkdir()
    later, _ = _promised(tmp_path / "later", {NEW[0]: JUDGED_FIRST, NEW[1]: JUDGED_FIRST})
    ex.partners.evidence(later, "auto")
    # judged pairs: fake-cheap grades as the reference, everyone else far below it
    for i in range(300):
        ex.partners.add(later, "auto", f"k{i}", 1.0,
                        {"fake-cheap": 1.0, "fake-mid": 0.0, NEW[0]: 0.0, NEW[1]: 0.0})
    picks = [ex._pick(later, names, "fake-strong", set(), "auto") for _ in range(200)]
    assert all(len(p) == 1 for p in picks)
    assert sum(p == ["fake-cheap"] for p in picks) >= 190
