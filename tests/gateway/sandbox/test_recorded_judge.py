"""The judge backend of the wrong-prior loop: verdicts from recorded grades, right 80% of the
time, stable per (question, answer), answered over HTTP by the replay upstream to the learning
loop's own rubrics (gateway/learning/judges.py), read back by the loop's own parsers."""

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
    verdicts = [judge.verdict(q, a) for q, a, _ in cells]
    assert verdicts == [again.verdict(q, a) for q, a, _ in cells]
    assert verdicts != [other.verdict(q, a) for q, a, _ in cells]
    assert all(RecordedJudge(cells, 1.0).verdict(q, a) == g for q, a, g in cells[:50])


def test_both_orders_of_a_comparison_agree_and_parse_as_the_loop_reads_them() -> None:
    cells = _cells(200)
    (q, a, _), b = cells[0], "a second answer"
    judge = RecordedJudge([*cells, (q, b, 1.0)], agreement=0.8, seed=0)
    one = parse_pair(judge.reply(PAIR_RUBRIC.format(prompt=q, first=a, second=b)))
    two = parse_pair(judge.reply(PAIR_RUBRIC.format(prompt=q, first=b, second=a)))
    assert one == (two[1], two[0])
    assert one == (judge.verdict(q, a), judge.verdict(q, b))
    assert parse_score(judge.reply(DEFAULT_RUBRIC.format(prompt=q, answer=a))) == \
        judge.verdict(q, a)


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
