"""Perplexity fingerprints for black-box models (CSCR Eq. 3-5).

A model h answers the artifact's N probe prompts greedily; the fixed scorer LM p_S scores
each answer ŷ_h(x_i) as a mean NLL per token,

    ℓ̃_h(x_i) = −(1/|ŷ_h(x_i)|) Σ_j log p_S(ŷ_{h,j} | ŷ_{h,<j})                     (Eq. 5)

and the N values are mean-centred, scaled to unit variance and ℓ2-normalised

    d_PPL(h) = normalise([ℓ̃_h(x_i)]_{i=1..N}) ∈ S^{N-1}                            (Eq. 4)

Eq. 5 conditions the scorer on the answer's own prefix only, not on the probe prompt; that
is the default here. ``condition_on_prompt=True`` scores log p_S(ŷ_j | x_i, ŷ_<j) instead
(the prompt is context, not scored), which measures how *expected* the answer is for that
question rather than how fluent it is. The choice is recorded in the artifact.

The answers come from an ``AnswerSource``: recorded responses (a ``RoutingTable`` with
``responses``, e.g. RouterBench), a plain mapping ``model -> [answer per probe]``, or live
greedy calls (``router_core.fingerprints.answers.LiveAnswers``). A missing or empty answer
has no NLL; its coordinate takes the model's mean before normalisation (``unit_rows``).

Example::

    kind = PerplexityFingerprint(Scorer())
    E = kind.describe(table, probes, ["gpt-4-1106-preview", "claude-v2"])   # (2, N)
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from router_core.descriptors.base import DescriptorKind, ProbeSet
from router_core.fingerprints.scorer import Scorer


@runtime_checkable
class AnswerSource(Protocol):
    """Gives a model's greedy answers to prompts (None where there is no answer)."""

    def answers(self, model: str, probes: ProbeSet) -> list[str | None]: ...


def answer_text(value: Any) -> str | None:
    """A recorded response as plain text; RouterBench stores some as a Python-list string
    (``"['C']"``), which is unwrapped so the scorer reads the answer, not the brackets."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        try:
            parts = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
        if isinstance(parts, list) and all(isinstance(p, str) for p in parts):
            text = "\n".join(parts).strip()
    return text or None


def recorded_answers(table: Any, probes: ProbeSet, model: str) -> list[str | None]:
    """A model's recorded response to each probe, from a ``RoutingTable``'s ``responses``
    (the first row of each probe prompt id)."""
    if model not in table.responses:
        raise KeyError(f"the table has no recorded responses of {model!r}")
    ids = np.asarray(table.prompt_ids, dtype=str)
    first: dict[str, int] = {}
    for row, pid in enumerate(ids):
        first.setdefault(pid, row)
    col = table.responses[model]
    out: list[str | None] = []
    for pid in probes.ids:
        row = first.get(pid)
        out.append(None if row is None else answer_text(col[row]))
    return out


def answers_from(source: Any, probes: ProbeSet, model: str) -> list[str | None]:
    """Dispatch over the supported answer sources."""
    if isinstance(source, AnswerSource):
        out = list(source.answers(model, probes))
    elif hasattr(source, "responses") and hasattr(source, "prompt_ids"):
        out = recorded_answers(source, probes, model)
    elif isinstance(source, Mapping):
        out = [answer_text(a) for a in source[model]]
    else:
        raise TypeError(f"no answers for {model!r} in a {type(source).__name__}")
    if len(out) != len(probes):
        raise ValueError(f"{model}: {len(out)} answers for {len(probes)} probes")
    return out


class PerplexityFingerprint(DescriptorKind):
    """e_h = normalise([ℓ̃_h(x_i)]_i) with ℓ̃ the scorer's mean NLL of h's answers."""

    name: ClassVar[str] = "perplexity"

    def __init__(
        self,
        scorer: Scorer | None = None,
        *,
        condition_on_prompt: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self._scorer = scorer
        self.condition_on_prompt = condition_on_prompt
        self.progress = progress

    @property
    def scorer(self) -> Scorer:
        if self._scorer is None:  # loaded lazily: get_kind(...)() must be cheap
            self._scorer = Scorer()
        return self._scorer

    def nll(self, answers: Sequence[str | None], probes: ProbeSet) -> np.ndarray:
        """(N,) Eq. 5 for one model's answers; NaN where an answer is missing."""
        have = [i for i, a in enumerate(answers) if a]
        out = np.full(len(answers), np.nan)
        if have:
            texts = [str(answers[i]) for i in have]
            ctx = [probes.prompts[i] for i in have] if self.condition_on_prompt else None
            out[have] = self.scorer.mean_nll(texts, ctx, progress=self.progress)
        if self.progress is not None and len(have) < len(answers):
            self.progress(len(answers) - len(have))
        return out

    def raw(self, source: Any, probes: ProbeSet, models: Sequence[str]) -> np.ndarray:
        """(m, N) per-probe mean NLLs (Eq. 5); ``normalise`` applies Eq. 4."""
        return np.stack([self.nll(answers_from(source, probes, m), probes) for m in models])

    def level(self, source: Any, probes: ProbeSet, models: Sequence[str]) -> np.ndarray | None:
        """Each model's mean quality on the probes when the source also holds outcomes (a
        ``RoutingTable``): the same probe information the baselines get; else None."""
        if not (hasattr(source, "quality") and hasattr(source, "prompt_ids")):
            return None
        from router_core.descriptors.probe_outcome import ProbeOutcome

        return ProbeOutcome().level(source, probes, models)

    def config(self) -> dict:
        return {
            "name": self.name,
            "scorer": self.scorer.config(),
            "condition_on_prompt": self.condition_on_prompt,
        }

    @classmethod
    def from_config(cls, cfg: Mapping, **kwargs: Any) -> PerplexityFingerprint:
        """The kind exactly as an artifact recorded it (same scorer, same conditioning)."""
        scorer = Scorer.from_config(dict(cfg.get("scorer", {})))
        return cls(scorer, condition_on_prompt=bool(cfg.get("condition_on_prompt")), **kwargs)
