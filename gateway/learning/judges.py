"""Judges: what grades an answer for the learning loop, and what its grades cost.

``LLMJudge`` asks a configured backend (``retraining.exploration.judge``) with a rubric for
one answer's score, 0-10 (``parse_score``); ``compare`` asks it to grade two answers side by
side, once in each order, and averages each answer's two grades, so a judge's preference for a
position cancels out (the reference beside the served answer, gateway/learning/shadow.py).
The judge names its backend and never keeps it: each judgement is given the pool of its
exploration and takes the backend and its price from that pool, so no hot swap leaves the
judge on a pool that is gone.
``ReferenceJudge`` is a free checker (exact match, unit tests, a recorded grade). Every paid
call's worst case is known before it is made, so the exploration ledger can book it first.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.config import Backend, ExplorationSettings
from gateway.pool import Pool
from gateway.pool.exploring import default_judge
from gateway.pricing import Price
from gateway.prompt_tokens import count_prompt_tokens
from gateway.provider.litellm_transport import LitellmTransport
from gateway.provider.transport import TokenUsage, Transport
from gateway.serving.forwarding.deployments import chat_completion

DEFAULT_RUBRIC = (
    "You grade an AI assistant's answer. Judge correctness first, then completeness and "
    "clarity. Reply with one line 'Score: N' where N is an integer from 0 (wrong or useless) "
    "to 10 (fully correct and complete).\n\n[Question]\n{prompt}\n\n[Answer]\n{answer}"
)


PAIR_RUBRIC = (
    "You compare two AI assistants' answers to one question. Judge correctness first, then "
    "completeness and clarity. Reply with two lines, 'Score 1: N' and 'Score 2: N', N an "
    "integer from 0 (wrong or useless) to 10 (fully correct and complete).\n\n[Question]\n"
    "{prompt}\n\n[Answer 1]\n{first}\n\n[Answer 2]\n{second}"
)




class Judge(Protocol):
    """Scores one answer in [0, 1] (None = cannot judge); ``cost_usd`` is its own spend.
    ``pool``: the pool of the exploration the judgement belongs to."""

    name: str

    async def score(self, pool: Pool, prompt: str, model: str, answer: str
                    ) -> tuple[float | None, float]: ...

    def worst_case_usd(self, pool: Pool, prompt: str, answer: str) -> float: ...


@dataclass
class ReferenceJudge:
    """A reference checker: ``check(prompt, model, answer)`` → quality or None, free.

    For datasets with answers: exact match against a gold answer, unit tests, or (for the
    RouterBench replay) the recorded grade of that very answer.
    """

    check: Callable[[str, str, str], float | None]
    name: str = "reference"

    async def score(self, pool: Pool, prompt: str, model: str, answer: str
                    ) -> tuple[float | None, float]:
        return self.check(prompt, model, answer), 0.0

    def worst_case_usd(self, pool: Pool, prompt: str, answer: str) -> float:
        return 0.0


@dataclass(frozen=True)
class LLMJudge:
    """A backend grading with a rubric prompt; its calls count against the budget. ``model``
    names the backend; each judgement takes it and its price from the pool it is given."""

    model: str
    rubric: str = DEFAULT_RUBRIC
    max_tokens: int = 16
    name: str = "llm"
    chosen: str = "named in config"  # why this backend judges (the startup block says)
    transport: Transport = field(default_factory=LitellmTransport, compare=False)  # its calls

    def on(self, pool: Pool) -> tuple[Backend, Price]:
        """The judge's backend in ``pool`` and its price."""
        backend, price = pool.backend(self.model), pool.prices.get(self.model)
        if backend is None or price is None:
            raise LookupError(f"exploration judge {self.model!r}: not a priced backend of "
                              f"the pool {pool.version}")
        return backend, price

    def _messages(self, prompt: str, answer: str) -> list[dict]:
        return [{"role": "user", "content": self.rubric.format(prompt=prompt, answer=answer)}]

    def worst_case_usd(self, pool: Pool, prompt: str, answer: str) -> float:
        backend, price = self.on(pool)
        n = count_prompt_tokens(backend, self._messages(prompt, answer))
        return price.cost(n, self.max_tokens)

    async def score(self, pool: Pool, prompt: str, model: str, answer: str
                    ) -> tuple[float | None, float]:
        backend, price = self.on(pool)
        reply = await chat_completion(
            self.transport,
            backend,
            self._messages(prompt, answer),
            {"max_tokens": self.max_tokens, "temperature": 0},
        )
        usage = reply.usage or TokenUsage()
        cost = price.cost(usage.input_tokens or 0, usage.output_tokens or 0)
        body: Any = reply.body  # a chat completion
        return parse_score(body.choices[0].message.content or ""), cost


def parse_score(text: str) -> float | None:
    """'Score: 7' (0-10) → 0.7; None when no score is found."""
    m = re.search(r"score\s*[:=]?\s*(\d+(?:\.\d+)?)", text, re.IGNORECASE) or re.search(
        r"\b(\d+(?:\.\d+)?)\b", text
    )
    if m is None:
        return None
    return min(max(float(m.group(1)) / 10.0, 0.0), 1.0)


def build_judge(pool: Pool, cfg: ExplorationSettings,
                transport: Transport | None = None) -> LLMJudge | None:
    """The LLM judge: ``judge.model`` (a priced backend of model_list, checked on ``pool``, the
    one at startup) or, named nowhere, the pool's default judge (gateway/pool/exploring.py);
    None for ``kind: reference`` (the code supplies that judge) or when none qualifies.
    ``transport``: what its calls go through (default litellm's)."""
    more = {} if transport is None else {"transport": transport}
    j = cfg.judge
    if j.kind != "llm":
        return None
    rubric = j.rubric or DEFAULT_RUBRIC
    if j.model is None:
        picked = default_judge(pool)
        if picked is None:
            return None
        return LLMJudge(picked[0], rubric=rubric, chosen=f"by default: {picked[1]}", **more)
    if pool.backend(j.model) is None:
        raise ValueError(f"exploration judge: {j.model!r} is not a backend in model_list")
    if j.model not in pool.prices:
        raise ValueError(f"exploration judge: {j.model!r} has no price (model_info or "
                         "litellm's cost map): its calls could not be booked")
    return LLMJudge(j.model, rubric=rubric, **more)


async def compare(judge: LLMJudge, pool: Pool, prompt: str, a: str, b: str
                  ) -> tuple[float | None, float | None, float]:
    """Answers ``a`` and ``b`` graded side by side, once in each order, averaged, so the
    judge's preference for a position cancels: (q_a, q_b, judge USD)."""
    backend, price = judge.on(pool)
    scores: list[tuple[float | None, float | None]] = []
    spent = 0.0
    for first, second in ((a, b), (b, a)):
        text = PAIR_RUBRIC.format(prompt=prompt, first=first, second=second)
        reply = await chat_completion(
            judge.transport, backend, [{"role": "user", "content": text}],
            {"max_tokens": 2 * judge.max_tokens, "temperature": 0})
        usage = reply.usage or TokenUsage()
        spent += price.cost(usage.input_tokens or 0, usage.output_tokens or 0)
        body: Any = reply.body  # a chat completion
        one, two = parse_pair(body.choices[0].message.content or "")
        scores.append((one, two) if first is a else (two, one))
    qa = [s[0] for s in scores if s[0] is not None]
    qb = [s[1] for s in scores if s[1] is not None]
    return (sum(qa) / len(qa) if qa else None, sum(qb) / len(qb) if qb else None, spent)


def compare_worst_usd(judge: LLMJudge, pool: Pool, prompt: str, a: str, b: str) -> float:
    """The worst case of ``compare``: two calls on the longer order's prompt."""
    backend, price = judge.on(pool)
    text = PAIR_RUBRIC.format(prompt=prompt, first=a, second=b)
    n = count_prompt_tokens(backend, [{"role": "user", "content": text}])
    return 2 * price.cost(n, 2 * judge.max_tokens)


def compare_unseen_worst_usd(judge: LLMJudge, pool: Pool, prompt: str, a: str,
                             max_tokens: int) -> float:
    """The worst case of ``compare`` of ``a`` with an answer not given yet, at most
    ``max_tokens`` long (a shadow call's cap): ``compare_worst_usd`` with an empty second
    answer, plus that answer's tokens read twice."""
    _, price = judge.on(pool)
    return (compare_worst_usd(judge, pool, prompt, a, "")
            + 2 * price.cost(max_tokens + 1, 0))


def parse_pair(text: str) -> tuple[float | None, float | None]:
    """'Score 1: 7 / Score 2: 4' → (0.7, 0.4); a score not found is None."""
    found = {int(k): float(v) for k, v in re.findall(
        r"score\s*([12])\s*[:=]?\s*(\d+(?:\.\d+)?)", text, re.IGNORECASE)}
    return tuple(None if k not in found else min(max(found[k] / 10.0, 0.0), 1.0)
                 for k in (1, 2))  # type: ignore[return-value]
