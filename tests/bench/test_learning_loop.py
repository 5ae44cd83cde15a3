"""The learning loop bench's pure parts (bench/routing/learning_loop.py): a window's excess
over its promise, when the wrong prior counts as caught, the exploration spend read from
/metrics, the last line over seeds; and the replay upstream's judge answering a rubric sent
to any backend (the default judge is one of the pool's own)."""

from __future__ import annotations

import json
import urllib.request

import numpy as np
import pytest

from bench.routing.learning_loop import (
    LearnRun,
    LearnSetup,
    RouteWindow,
    _caught,
    _explored,
    print_run,
    summary,
)


def _w(route: str, drop: float, se: float = 0.0, saving: float = 0.0, n: int = 250,
       explored: float = 0.0, charged: float = 1.0) -> RouteWindow:
    return RouteWindow(route, n, drop, se, saving, charged, explored,
                       0.01 if route == "auto" else 0.03)


def _run(seed: int, drops: list[tuple[float, float]], errors: list[float | None],
         saving: tuple[float, float] = (0.0, 0.0)) -> LearnRun:
    r = LearnRun(seed)
    for a, b in drops:
        r.windows.append({"auto": _w("auto", a, saving=saving[0], explored=0.01),
                          "auto-balanced": _w("auto-balanced", b, saving=saving[1],
                                              explored=0.02)})
    r.watched_error = errors
    r.explored_usd = sum(w.explored_usd for ws in r.windows for w in ws.values())
    r.charged_usd = sum(w.charged for ws in r.windows for w in ws.values())
    r.caught = _caught(r, 500)
    return r


def test_a_window_breaks_its_promise_only_beyond_two_standard_errors() -> None:
    assert _w("auto", 0.05, se=0.02).excess == pytest.approx(0.0)
    assert _w("auto", 0.05, se=0.01).excess == pytest.approx(0.02)
    assert _w("auto-balanced", 0.0).excess == pytest.approx(-0.03)


def test_caught_needs_the_estimate_close_and_every_later_window_kept() -> None:
    # estimate close at window 2, but auto breaks its promise in window 3: caught at window 4
    r = _run(0, [(0.2, 0.0), (0.0, 0.0), (0.05, 0.0), (0.0, 0.0)], [0.2, 0.01, 0.02, 0.03])
    assert r.caught == 2000
    assert _run(1, [(0.0, 0.0)] * 2, [0.1, None]).caught is None


def test_the_last_line_over_seeds() -> None:
    runs = [_run(0, [(0.0, 0.0), (0.0, 0.01)], [0.2, 0.01], saving=(0.02, 0.10)),
            _run(1, [(0.0, 0.05), (0.0, 0.0)], [0.01, 0.01], saving=(0.04, 0.20)),
            _run(2, [(0.0, 0.0)] * 2, [0.2, 0.2])]
    out = summary(runs)
    assert out["learn_drop_excess_max"] == "0.0200"  # seed 1's balanced window: 0.05 − 0.03
    assert out["auto_learned_saving"] == "0.0200"  # mean of 0.02, 0.04, 0.0
    assert out["balanced_learned_saving"] == "0.1000"
    assert out["exploration_share"] == "0.0150"  # (0.01 + 0.02) per window of 2 USD charged
    assert (out["caught_after_median"], out["caught_after_worst"]) == ("1000", "never")


def test_a_packaged_run_says_nothing_of_a_wrong_prior(capsys: pytest.CaptureFixture) -> None:
    r = _run(0, [(0.0, 0.0)], [None])
    r.facts.update(alias={}, held=(), known_first={}, wrong="w", strongest="s", judge="j",
                   judged={"paired": 8, "judge": 3})
    print_run(r, LearnSetup(window=500, packaged=True))
    last = capsys.readouterr().out.splitlines()[-1]
    assert "caught" not in last
    assert last.endswith("judged: 4 pairs, 3 served answers alone, 0 shadow answers alone")
    print_run(r, LearnSetup(window=500))
    assert "caught after: never requests; judged: 4 pairs" in capsys.readouterr().out


def test_the_judged_answers_are_counted_by_source_from_the_loops_database(tmp_path) -> None:
    from bench.routing.learning_loop import judged_by_source
    from gateway.learning import tables as ldb
    from gateway.store import make_engine
    from gateway.store.migrate import upgrade_engine

    url = f"sqlite:///{tmp_path / 'learn.db'}"
    engine = make_engine(url)
    upgrade_engine(engine)
    for source, n in (("paired", 4), ("judge", 1), ("shadow", 2)):
        for i in range(n):
            ldb.add_observation(engine, key=f"k{i}", model=f"m-{source}", quality=1.0,
                                cost_usd=0.0, source=source)
    engine.dispose()
    assert judged_by_source(url) == {"paired": 4, "judge": 1, "shadow": 2}
    assert judged_by_source(url, "m-shadow") == {"shadow": 2}


def test_a_level_read_through_a_noisy_judge_is_known_to_its_standard_error() -> None:
    """level_se against the spread of simulated levels: n verdicts of an 80% judge on a
    backend right 60% of the time, read back as (P̂ − 0.2) / 0.6."""
    from bench.routing.learning_loop import level_se

    rng = np.random.default_rng(0)
    n, p, a = 300, 0.6, 0.8
    truth = rng.random((4000, n)) < p
    verdicts = np.where(rng.random((4000, n)) < a, truth, ~truth)
    levels = (verdicts.mean(axis=1) - (1 - a)) / (2 * a - 1)
    assert level_se(p, a, n) == pytest.approx(levels.std(), rel=0.05)
    assert level_se(p, 1.0, n) == pytest.approx(np.sqrt(p * (1 - p) / n))


def test_the_exploration_spend_is_read_per_route_from_metrics() -> None:
    text = ('# HELP x\ntollgate_exploration_spent_usd{route="auto"} 0.25\n'
            'tollgate_exploration_spent_usd{route="auto-balanced"} 1e-05\n'
            'tollgate_exploration_allowance_usd{route="auto"} 3.0\n')
    assert _explored(text) == {"auto": 0.25, "auto-balanced": 1e-05}


def test_the_replay_judge_answers_a_rubric_sent_to_any_backend() -> None:
    from gateway.learning.judges import PAIR_RUBRIC
    from gateway.sandbox.recorded_judge import RecordedJudge
    from gateway.sandbox.replay import replay_upstream

    class NoAnswers:  # the replay's one method the upstream calls; never reached here
        def answer(self, prompt: str, model: str, max_tokens: int | None) -> dict:
            raise KeyError(prompt)

    judge = RecordedJudge([("What is 2+2?", "4", 1.0), ("What is 2+2?", "5", 0.0)], 1.0)
    rubric = PAIR_RUBRIC.format(prompt="What is 2+2?", first="4", second="5")
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": rubric}]})
    with replay_upstream(NoAnswers(), judge, any_model=True) as url:  # type: ignore[arg-type]
        req = urllib.request.Request(f"{url}/chat/completions", data=body.encode(),
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            reply = json.loads(resp.read())
    assert reply["model"] == "m"
    assert reply["choices"][0]["message"]["content"] == "Score 1: 10\nScore 2: 0"
    assert not RecordedJudge.is_rubric("What is 2+2?")
