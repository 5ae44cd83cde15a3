"""The judge backend of the wrong-prior loop: verdicts from recorded grades, right 80% of the
time, an error drawn per judgement (seeded), answered over HTTP by the replay upstream to the
learning loop's own rubrics (gateway/learning/judges.py), read back by the loop's own parsers."""

from __future__ import annotations

import numpy as np
import openai

from gateway.learning.judges import DEFAULT_RUBRIC, PAIR_RUBRIC, parse_pair, parse_score
from gateway.sandbox.recorded_judge import RecordedJudge
from gateway.sandbox.replay import Replay, replay_upstream
from router_core.data.table import RoutingTable


def _cells(n: int) -> list[tuple[str, str, float]]:
    return [(f"question {i}: which is heavier?", f"answer {i}", float(i % 2)) for i in range(n)]


def test_verdicts_agree_with_the_grades_at_the_set_rate_and_are_seeded() -> None:
    cells = _cells(4000)
    judge = RecordedJudge(cells, agreement=0.8, seed=3)
    agree = np.mean([judge.verdict(q, a) == g for q, a, g in cells])
    assert 0.77 < agree < 0.83
    again = RecordedJudge(cells, agreement=0.8, seed=3)
    other = RecordedJudge(cells, agreement=0.8, seed=4)
    fresh = RecordedJudge(cells, agreement=0.8, seed=3)
    verdicts = [fresh.verdict(q, a) for q, a, _ in cells]
    assert verdicts == [again.verdict(q, a) for q, a, _ in cells]
    assert verdicts != [other.verdict(q, a) for q, a, _ in cells]
    assert all(RecordedJudge(cells, 1.0).verdict(q, a) == g for q, a, g in cells[:50])


def test_an_error_is_drawn_per_judgement_so_repeats_average_it_out() -> None:
    # the product's noisy-judge link takes repeated verdicts on one prompt as independent
    # (router_core.promise.refine): asked 400 times, one answer is misjudged ~20% of the
    # time, and the mean verdict over a set of answers tends to 0.2 + 0.6·(share right),
    # whichever answers the first judgement got wrong (fixed errors kept the first's mean)
    cells = _cells(300)
    judge = RecordedJudge(cells, agreement=0.8, seed=0)
    q, a, g = cells[0]
    again = [judge.verdict(q, a) for _ in range(400)]
    assert 0.74 < np.mean([v == g for v in again]) < 0.86
    means = [np.mean([judge.verdict(q, a) for q, a, _ in cells]) for _ in range(40)]
    assert abs(np.mean(means) - (0.2 + 0.6 * 0.5)) < 0.01


def test_a_comparison_parses_as_the_loop_reads_it() -> None:
    cells = _cells(200)
    (q, a, g), b = cells[0], "a second answer"
    judge = RecordedJudge([*cells, (q, b, 1.0)], agreement=1.0, seed=0)
    assert parse_pair(judge.reply(PAIR_RUBRIC.format(prompt=q, first=a, second=b))) == (g, 1.0)
    assert parse_pair(judge.reply(PAIR_RUBRIC.format(prompt=q, first=b, second=a))) == (1.0, g)
    assert parse_score(judge.reply(DEFAULT_RUBRIC.format(prompt=q, answer=a))) == g
    noisy = RecordedJudge([*cells, (q, b, 1.0)], agreement=0.8, seed=0)
    replies = [parse_pair(noisy.reply(PAIR_RUBRIC.format(prompt=q, first=a, second=b)))
               for _ in range(300)]
    assert 0.72 < np.mean([one == g for one, _ in replies]) < 0.88
    assert 0.72 < np.mean([two == 1.0 for _, two in replies]) < 0.88


def test_a_question_cut_to_its_end_is_still_found() -> None:
    long_q = "context " * 1000 + "so which is heavier?"
    judge = RecordedJudge([(long_q, "the iron", 1.0)], agreement=1.0)
    assert judge.verdict(long_q[-4000:], "the iron") == 1.0
    assert judge.unknown == 0
    assert judge.verdict(long_q, "an answer nobody recorded") == 0.0
    assert judge.unknown == 1


def test_the_replay_upstream_answers_as_the_judge_over_http() -> None:
    prompts = np.array(["2+2?", "capital of France?"], dtype=object)
    table = RoutingTable(
        name="t", prompt_ids=np.array(["a", "b"]), prompts=prompts, models=("m1", "m2"),
        quality=np.array([[1.0, 0.0], [0.0, 1.0]]), cost=np.full((2, 2), 1e-4),
        split=np.array(["test", "test"]),
        responses={"m1": np.array(["4", "Lyon"], dtype=object),
                   "m2": np.array(["5", "Paris"], dtype=object)})
    replay = Replay(table)
    judge = RecordedJudge(replay.judge_cells(), agreement=1.0, name="judge")
    with replay_upstream(replay, judge) as url:
        client = openai.OpenAI(base_url=url, api_key="sk-replay", max_retries=0)
        text = PAIR_RUBRIC.format(prompt="capital of France?", first="Lyon", second="Paris")
        got = client.chat.completions.create(
            model="judge", messages=[{"role": "user", "content": text}])
        assert parse_pair(got.choices[0].message.content) == (0.0, 1.0)
        answer = client.chat.completions.create(
            model="m2", messages=[{"role": "user", "content": "capital of France?"}])
        assert answer.choices[0].message.content == "Paris"


def test_a_config_backend_answers_as_the_benchmark_model_it_stands_for() -> None:
    """``Replay(aliases=...)``: the packaged config's backends replaced by recorded answers
    (bench/routing/learning_loop.py --packaged): a served name answers with its benchmark
    model's recorded answer and completion tokens, under its own name."""
    prompts = np.array(["2 + 2?", "capital of France?"], dtype=object)
    table = RoutingTable(
        name="t", prompt_ids=np.array(["a", "b"]), prompts=prompts, models=("m1", "m2"),
        quality=np.array([[1.0, 0.0], [0.0, 1.0]]), cost=np.array([[1e-4, 3e-4]] * 2),
        split=np.array(["test", "test"]),
        responses={"m1": np.array(["4", "Lyon"], dtype=object),
                   "m2": np.array(["5", "Paris"], dtype=object)})
    replay = Replay(table, aliases={"claude-sonnet-4-6": "m2"})
    with replay_upstream(replay) as url:
        client = openai.OpenAI(base_url=url, api_key="sk-replay", max_retries=0)
        got = client.chat.completions.create(
            model="claude-sonnet-4-6",
            messages=[{"role": "user", "content": "capital of France?"}])
        direct = client.chat.completions.create(
            model="m2", messages=[{"role": "user", "content": "capital of France?"}])
    assert got.choices[0].message.content == "Paris" and got.model == "claude-sonnet-4-6"
    assert got.usage.completion_tokens == direct.usage.completion_tokens == 1000
