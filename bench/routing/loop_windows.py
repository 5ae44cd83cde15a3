"""The wrong-prior loop's figures from its requests, per window of requests (pure).

Each served request is a ``Served`` record: who answered, the recorded grade of that answer
and of the reference's answer to the same prompt, what the gateway charged and what the
reference's recorded answer cost, and the watched backend's p̂ on the prompt (when the
explanation lists it) beside its recorded grade. A window's realized drop is
mean(q_reference − q_served), its saving 1 − charged / reference cost. The wrong prior counts
as caught at the end of the first window where the watched backend's mean p̂ is within
``tolerance`` of its mean recorded grade on the same prompts, and every window from there on
keeps the route's promise (drop ≤ max_drop).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


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
        out.append(Window(
            end=start + len(w),
            share=sum(s.backend == watched for s in w) / len(w),
            drop=float(np.mean([s.q_reference - s.q_served for s in w])),
            saving=1.0 - sum(s.charged_usd for s in w) / ref_usd if ref_usd > 0 else 0.0,
            estimate=float(np.mean([s.p_watched for s in listed])) if listed else None,
            truth=float(np.mean([s.q_watched for s in listed])) if listed else None,
            n_estimate=len(listed),
        ))
    return out


def caught_after(ws: Sequence[Window], max_drop: float, tolerance: float = 0.05) -> int | None:
    """Requests after which the wrong prior was corrected (module docstring), or None."""
    for i, w in enumerate(ws):
        if w.error is not None and w.error <= tolerance and all(
                later.drop <= max_drop for later in ws[i:]):
            return w.end
    return None
