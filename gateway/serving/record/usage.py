"""A provider's reported token counts as the gateway believes them: read (``reported_tokens``)
and held to the bound that was reserved for them (``clamped``).

A count past its bound is clamped to it before anything is written, and the rest, at most
``ABSURD_FACTOR`` × the bound (gateway/serving/budget/bound_factors.py), is the operator's
overrun: no count reaches the log row or the ledger past the bound, whatever its size. Chat's
usage (gateway/serving/record/outcome.py ``take_usage``) and an embeddings reply's
(gateway/serving/embeddings/embeddings_handler.py) are clamped here alike, and the report
teaches the backend's bound factor (``learned``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.serving.budget.bound_factors import ABSURD_FACTOR, report_ratio

if TYPE_CHECKING:
    from gateway.serving.record.outcome import Outcome


def reported_tokens(value: Any) -> int | None:
    """A reported token count, or None when it is not one (missing, negative, not a number)."""
    if isinstance(value, bool):
        return None
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return n if n >= 0 else None


def clamped(count: int, bound: int) -> tuple[int, int]:
    """(the count kept, the excess): ``count`` at most ``bound``; what lies past it, at most
    ``ABSURD_FACTOR`` × the bound, is the excess (the operator's overrun)."""
    if count <= bound:
        return count, 0
    return bound, min(count, int(ABSURD_FACTOR * max(bound, 1))) - bound


def learned(out: Outcome) -> bool:
    """The answering backend's report against its bound, taught to its factor
    (gateway/serving/budget/bound_factors.py): its factor widened, or held out when absurd
    (returned)."""
    b = out.answered
    bound = out.bounds.get(b.model_name) if b is not None else None
    factors = out.ctx.bound_factors
    if b is None or bound is None or factors is None:
        return False
    return factors.reported(b.model_name, report_ratio(out.reported, bound),
                            out.tenant.principal) in ("absurd", "held out")


def tokens_used(out: Outcome) -> int:
    """What the request counts against TPM: the answer's tokens; unanswered, its whole
    reservation if an attempt timed out after it was sent (the provider worked on it), else
    none."""
    if out.answered is not None:
        return (out.prompt_tokens or 0) + (out.completion_tokens or 0)
    if out.timeout_charges and out.tpm_grant is not None:
        return out.tpm_grant.tokens
    return 0
