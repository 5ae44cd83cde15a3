"""The wrong-prior loop's figures from its requests, per window of requests (pure).

Each served request is a ``Served`` record: who answered, the recorded grade of that answer
and of the reference's answer to the same prompt, what the gateway charged and what the
reference's recorded answer cost, and the watched backend's p̂ on the prompt (when the
explanation lists it) beside its recorded grade. A window's realized drop is
mean(q_reference − q_served), its saving 1 − charged / reference cost. The wrong prior counts
as caught at the end of the first window where the watched backend's mean p̂ is within
``tolerance`` of its mean recorded grade on the same prompts, and every window from there on
keeps the route's promise.

A window keeps the promise unless its drop is above ``max_drop`` by more than sampling noise
explains: drop ≤ max_drop + NOISE_SE · se, se = sd_x(q_ref − q_served) / √n the standard error
of the window's mean (a one-sided test at ≈ 2.3% per window). A route whose true drop is
exactly its promise measures above it in half its windows, so "every later window ≤ max_drop"
without the noise would fail a route that keeps its promise; one that breaks it (the wrong
prior's 0.28-0.32 window, se ≈ 0.03) is still caught. ``loop_drop_max`` stays the raw worst
window's drop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

NOISE_SE = 2.0  # standard errors of a window's drop above max_drop still read as noise


@dataclass(frozen=True)
class Served:
    backend: str
    q_served: float
    q_reference: float
    charged_usd: float
    reference_usd: float
    p_watched: float | None  # the watched backend's p̂ on this prompt, if the explanation has it
    q_watched: float  # its recorded grade on this prompt


@dataclass(frozen=True)
class Window:
    end: int  # requests sent by the end of the window
    share: float  # of the window's requests the watched backend answered
    drop: float
    saving: float
    estimate: float | None  # mean p̂ of the watched backend where listed
    truth: float | None  # its mean recorded grade on those same prompts
    n_estimate: int
    se: float = 0.0  # standard error of ``drop`` (sd of the per-prompt drops / √n)

    def keeps(self, max_drop: float) -> bool:
        """Whether the window keeps a promise of ``max_drop`` (module docstring)."""
        return self.drop <= max_drop + NOISE_SE * self.se

    @property
    def error(self) -> float | None:
        return None if self.estimate is None else abs(self.estimate - float(self.truth))


def windows(served: Sequence[Served], size: int, watched: str) -> list[Window]:
    """The figures of each run of ``size`` consecutive requests (a last shorter one kept)."""
    out = []
    for start in range(0, len(served), size):
        w = served[start:start + size]
        listed = [s for s in w if s.p_watched is not None]
        ref_usd = sum(s.reference_usd for s in w)
        d = np.array([s.q_reference - s.q_served for s in w])
        out.append(Window(
            end=start + len(w),
            share=sum(s.backend == watched for s in w) / len(w),
            drop=float(d.mean()),
            saving=1.0 - sum(s.charged_usd for s in w) / ref_usd if ref_usd > 0 else 0.0,
            estimate=float(np.mean([s.p_watched for s in listed])) if listed else None,
            truth=float(np.mean([s.q_watched for s in listed])) if listed else None,
            n_estimate=len(listed),
            se=float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0,
        ))
    return out


def caught_after(ws: Sequence[Window], max_drop: float, tolerance: float = 0.05) -> int | None:
    """Requests after which the wrong prior was corrected (module docstring), or None."""
    for i, w in enumerate(ws):
        if w.error is not None and w.error <= tolerance and all(
                later.keeps(max_drop) for later in ws[i:]):
            return w.end
    return None
