"""A judge backend for the replay upstream: verdicts that follow a benchmark's recorded grades,
agreeing with them a set share of the time.

The learning loop's LLM judge (gateway/learning/judges.py) sends its rubric to a backend like
any other; this one answers it. It reads the question and the answer(s) back out of the
rubric, looks up the grade the benchmark recorded for that answer to that question, and says
so, except on a seeded ``1 − agreement`` share of judgements, where it says the opposite.

An error is drawn per judgement, not fixed per (question, answer): the n-th judgement of a
pair is wrong by a seeded hash of the pair and n. That is the judge the product's noisy-judge
link assumes (router_core.promise.refine: each verdict right with probability α, repeated
verdicts on one prompt aggregated as k of c) and the one bench.routing.promise simulates. A
judge wrong on a fixed set of answers carries a bias on each backend that no number of
judgements removes (one draw of which answers it gets wrong: a standard error of
0.4 / (0.6·√n) in quality over n answers, 0.02 at a thousand), and the wrong-prior loop's
"caught" then measured that draw, not the loop.

The question is matched on its last ``KEY_CHARS`` characters: the loop embeds and judges the
last ``encoder_max_chars`` of a prompt (gateway/serving/plan/routing.py ``embed_text``).
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Iterable

KEY_CHARS = 300
SINGLE_MARK, PAIR_MARKS = "\n\n[Answer]\n", ("\n\n[Answer 1]\n", "\n\n[Answer 2]\n")
QUESTION_MARK = "[Question]\n"


def _key(question: str) -> str:
    return question.strip()[-KEY_CHARS:]


class RecordedJudge:
    """Verdicts from recorded grades: ``cells`` are (prompt, answer text, grade in [0, 1])."""

    def __init__(self, cells: Iterable[tuple[str, str, float]], agreement: float = 0.8,
                 seed: int = 0, name: str = "judge") -> None:
        if not 0.0 <= agreement <= 1.0:
            raise ValueError("agreement must be in [0, 1]")
        self.agreement, self.seed, self.name = agreement, seed, name
        grades: dict[tuple[str, str], list[float]] = {}
        for prompt, answer, grade in cells:
            grades.setdefault((_key(prompt), answer.strip()), []).append(float(grade))
        self.grades = {k: sum(v) / len(v) for k, v in grades.items()}
        self.unknown = 0  # answers it could not find (judged 0: an answer nobody recorded)
        self._asked: Counter[tuple[str, str]] = Counter()  # judgements so far, per pair
        self._lock = threading.Lock()  # the replay upstream answers from several threads

    def flipped(self, pair: tuple[str, str], n: int) -> bool:
        """Whether the ``n``-th judgement of (question key, answer) is one the judge gets wrong
        (seeded)."""
        digest = hashlib.sha256(f"{self.seed}\0{pair[0]}\0{pair[1]}\0{n}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 >= self.agreement

    def verdict(self, question: str, answer: str) -> float:
        """1.0 (right) or 0.0 (wrong): the recorded grade, flipped on the judge's errors (this
        judgement's, module docstring)."""
        pair = (_key(question), answer.strip())
        with self._lock:
            grade = self.grades.get(pair)
            if grade is None:
                self.unknown += 1
                grade = 0.0
            n = self._asked[pair]
            self._asked[pair] += 1
        return float((grade >= 0.5) != self.flipped(pair, n))

    @staticmethod
    def is_rubric(text: str) -> bool:
        """Whether ``text`` is a judge's rubric prompt (the single or the side-by-side form):
        how the replay upstream tells a judgement from a question when the judge is one of
        the pool's own backends (the default judge, gateway/pool/exploring.py)."""
        _, mark, rest = text.partition(QUESTION_MARK)
        return bool(mark) and (SINGLE_MARK in rest or PAIR_MARKS[0] in rest)

    def reply(self, rubric: str) -> str:
        """The judge's answer to one rubric prompt (the single or the side-by-side form)."""
        _, _, rest = rubric.partition(QUESTION_MARK)
        if not rest:
            return "Score: 0"
        if PAIR_MARKS[0] in rest:
            question, _, answers = rest.partition(PAIR_MARKS[0])
            first, _, second = answers.partition(PAIR_MARKS[1])
            one, two = self.verdict(question, first), self.verdict(question, second)
            return f"Score 1: {round(10 * one)}\nScore 2: {round(10 * two)}"
        question, _, answer = rest.partition(SINGLE_MARK)
        return f"Score: {round(10 * self.verdict(question, answer))}"
