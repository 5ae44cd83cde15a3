"""A new model described on a router's probes, for ``tollgate models add``.

perplexity: the model's answers to the probes, scored by the artifact's scorer LM; with a
judge, the judge's grades of those answers refine the fingerprint (its probe readout with
a·e as the prior mean). logit: the model's own weights on the probes. probe-outcome: the
answers graded by the judge, then the model's probe readout (router_core.cold_start.readout) in the
router's space.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click
import numpy as np


@dataclass(frozen=True)
class Description:
    descriptor: np.ndarray
    readout: Any = None  # a probe readout: brings the model's own calibration (a, b)
    judge: Any = None  # the judge's LiveAnswers, whose spend is reported
    outcomes: np.ndarray | None = None  # the judge's grades in [0, 1] (NaN: none)


def describe(name: str, fingerprint: str, kind: Any, router: Any, probes: Any, live: Any,
             make_judge: Callable[[], Any] | None, weights: str) -> Description:
    """``name`` described with ``kind``; ``live`` asks the model, ``make_judge()`` builds the
    judge (None: no judge), ``weights`` is what a logit footprint loads."""
    if fingerprint == "logit":
        return Description(kind.describe({name: weights}, probes, [name])[0])
    if fingerprint == "perplexity":
        return _perplexity(name, kind, router, probes, live, make_judge)
    assert make_judge is not None  # probe-outcome: add_command insists on a judge
    answers = live.answers(name, probes)
    judge = make_judge()  # after the answers: it gets what they left of the spend cap
    outcomes = graded(probes, answers, live, judge)
    readout = probe_readout(router, probes, outcomes)
    if readout is None:
        raise click.ClickException(
            f"the judge graded all {int(np.isfinite(outcomes).sum())} answers alike: "
            f"no signal to place {name} by"
        )
    return Description(readout.descriptor, readout, judge, outcomes)


def _perplexity(name: str, kind: Any, router: Any, probes: Any, live: Any,
                make_judge: Callable[[], Any] | None) -> Description:
    answers = live.answers(name, probes)
    missing = sum(a is None for a in answers)
    if missing > len(probes) // 4:
        raise click.ClickException(
            f"{missing} of {len(probes)} probes got no answer: " + "; ".join(live.spend.errors[-3:])
        )
    e = kind.describe({name: answers}, probes, [name])[0]
    if make_judge is None:
        return Description(e)
    judge = make_judge()  # the graded answers refine the fingerprint (its readout prior)
    outcomes = graded(probes, answers, live, judge)
    readout = probe_readout(router, probes, outcomes, prior=router.calibration.a0 * e)
    if readout is None:  # nothing to refine by: say so rather than pass it off as refined
        click.echo(
            f"the judge graded all {int(np.isfinite(outcomes).sum())} answers "
            f"alike: {name} keeps its bare fingerprint and the pooled calibration",
            err=True,
        )
        return Description(e, None, judge, outcomes)
    return Description(readout.descriptor, readout, judge, outcomes)


def graded(probes: Any, answers: list[str | None], live: Any, judge: Any) -> np.ndarray:
    """The judge's grades of the probe answers; an error unless ≥ 3/4 of the probes were
    answered and graded (as for perplexity)."""
    outcomes = judge_outcomes(probes, answers, judge)
    judged = int(np.isfinite(outcomes).sum())
    if len(probes) - judged > len(probes) // 4:
        errors = (live.spend.errors + judge.spend.errors)[-3:]
        raise click.ClickException(
            f"only {judged} of {len(probes)} probes answered and graded: " + "; ".join(errors)
        )
    return outcomes


def judge_outcomes(probes: Any, answers: list[str | None], judge: Any) -> np.ndarray:
    """Each probe answer graded by ``judge`` (a LiveAnswers) with the shadow rubric, in
    [0, 1]; NaN where there was no answer or no parsable grade."""
    from gateway.learning.judges import DEFAULT_RUBRIC, parse_score

    asked = [i for i, a in enumerate(answers) if a]
    grades = judge.complete(
        [DEFAULT_RUBRIC.format(prompt=probes.prompts[i], answer=answers[i]) for i in asked]
    )
    if judge.progress is not None:  # unanswered probes were not sent: count them done
        judge.progress(len(answers) - len(asked))
    out = np.full(len(answers), np.nan)
    for i, text in zip(asked, grades):
        score = parse_score(text) if text else None
        if score is not None:
            out[i] = score
    return out


def probe_readout(
    router: Any, probes: Any, outcomes: np.ndarray, prior: np.ndarray | None = None
) -> Any:
    """The model's readout in ``router``'s space from its probe outcomes (or None);
    ``prior``: the readout's prior mean (a fingerprinted model's a·e)."""
    from router_core.cold_start.readout import fit_readout
    from router_core.encoders.minilm import Encoder

    encoder = Encoder.for_router(router.config)
    Q = router.project(encoder.encode(list(probes.prompts)))
    return fit_readout(Q, outcomes, prior=prior)
