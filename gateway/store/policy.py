"""A tenant's policy: what it may call, what it may spend per request, how fast.

Stored as a JSON object in ``tenants.policy`` (only the keys that are set). Every write path
(admin API, ``tollgate tenants create --policy``, the store's own functions) goes through
`TenantPolicy.parse`, which refuses a bad value with a message naming the key. Reading from
the database goes through `TenantPolicy.from_stored`, which never raises: a row written
before validation existed keeps its valid keys, and each offending key is treated as unset
(one warning per distinct stored value), so one bad row cannot fail every request.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from gateway.store.money import MAX_AMOUNT_USD

log = logging.getLogger(__name__)


def _no_nul(name: str) -> str:
    if "\x00" in name:  # PostgreSQL's jsonb cannot store it
        raise ValueError("must not contain NUL (\\u0000) characters")
    return name


ModelName = Annotated[str, Field(strict=True, min_length=1), AfterValidator(_no_nul)]
Usd = Annotated[float | None, Field(strict=True, ge=0, le=MAX_AMOUNT_USD, allow_inf_nan=False)]
Weight = Annotated[float | None, Field(strict=True, ge=0, allow_inf_nan=False)]
PerMinute = Annotated[int | None, Field(strict=True, ge=0)]


class InvalidPolicy(ValueError):
    """A policy value refused; ``param`` names it (``policy.max_cost_usd``)."""

    def __init__(self, message: str, param: str = "policy") -> None:
        super().__init__(message)
        self.param = param


class TenantPolicy(BaseModel):
    """The typed policy (all keys optional; None = not set, the gateway's default applies).

    ``allowed_models``: backend/route names the tenant may use; ``max_cost_usd``: a cap on
    one request's predicted cost; ``cost_weight`` (λ) and its bounds ``min_cost_weight``,
    ``max_cost_weight``; ``requests_per_minute``, ``tokens_per_minute``: rate limits;
    ``max_parallel_requests``: requests in flight at once (LiteLLM's team limits: 0 refuses
all); ``outage_allowance_usd``: what it may spend while the database is down."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allowed_models: tuple[ModelName, ...] | None = None
    max_cost_usd: Usd = None
    cost_weight: Weight = None
    min_cost_weight: Weight = None
    max_cost_weight: Weight = None
    requests_per_minute: PerMinute = None
    tokens_per_minute: PerMinute = None
    max_parallel_requests: PerMinute = None
    outage_allowance_usd: Usd = None

    @classmethod
    def parse(cls, obj: TenantPolicy | Mapping[str, Any] | None) -> TenantPolicy:
        """Validate ``obj`` (a mapping as stored or sent; None = empty): raises
        `InvalidPolicy` naming the first bad key (a string for ``allowed_models``, a
        non-number or a negative for a cost, an unknown key)."""
        if obj is None:
            return EMPTY
        if isinstance(obj, TenantPolicy):
            return obj
        if not isinstance(obj, Mapping):
            raise InvalidPolicy(f"policy must be a JSON object, not {type(obj).__name__}")
        try:
            return cls.model_validate(dict(obj))
        except ValidationError as exc:
            raise _invalid(exc) from None

    @classmethod
    def from_stored(cls, raw: Any, where: str = "") -> TenantPolicy:
        """The policy of a database row, never raising (a row stored before validation
        existed must not fail every request). Key by key: a number stored as a string is
        read as the gateway read it before (``float(v)``, ``int(v)``); a key still invalid
        is dropped, except ``allowed_models``, which becomes empty (fail closed: a policy
        meant to restrict never widens), and unknown keys are ignored. One warning per
        distinct stored value."""
        try:
            return cls.parse(raw)
        except InvalidPolicy:
            pass
        kept: dict[str, Any] = {}
        items = raw.items() if isinstance(raw, Mapping) else ()
        for key, value in items:
            if (good := _stored_value(key, value)) is not None:
                kept[key] = good
        dropped = sorted(str(k) for k, v in items if kept.get(k) != v)
        _warn_once(raw, dropped, where)
        return cls.model_validate(kept)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able, only the keys that are set (the stored shape)."""
        out = self.model_dump(exclude_none=True)
        if self.allowed_models is not None:
            out["allowed_models"] = list(self.allowed_models)
        return out


EMPTY = TenantPolicy()
_LEGACY_CASTS = {"requests_per_minute": int, "tokens_per_minute": int,
                 "max_parallel_requests": int}


def _stored_value(key: Any, value: Any) -> Any:
    """``value`` as a valid value of ``key``, or None (not a key, or no valid reading)."""
    if key not in TenantPolicy.model_fields or value is None:
        return None
    candidates = [value]
    if key == "allowed_models":
        candidates.append(())  # fail closed
    elif not isinstance(value, bool):
        with contextlib.suppress(TypeError, ValueError, OverflowError):
            candidates.append(_LEGACY_CASTS.get(key, float)(value))
    for candidate in candidates:
        try:
            TenantPolicy.model_validate({key: candidate})
        except ValidationError:
            continue
        return candidate
    return None
_warned: set[str] = set()


def _invalid(exc: ValidationError) -> InvalidPolicy:
    err = exc.errors()[0]
    loc = [str(x) for x in err["loc"]]
    key = loc[0] if loc else ""
    what = ".".join(loc) or "policy"
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = (f"unknown policy key; known keys: {', '.join(TenantPolicy.model_fields)}")
    elif key == "allowed_models" and len(loc) == 1:
        msg = "must be a list of model names"
    got = err.get("input")
    shown = "" if err["type"] == "extra_forbidden" or _unprintable(got) else f" (got {got!r})"
    return InvalidPolicy(f"policy.{what}: {msg}{shown}", f"policy.{key}" if key else "policy")


def _unprintable(value: Any) -> bool:
    return isinstance(value, (dict, list, tuple)) or (isinstance(value, float)
                                                       and not math.isfinite(value))


def _warn_once(raw: Any, dropped: list[str], where: str) -> None:
    token = repr(raw)
    if token in _warned:
        return
    if len(_warned) < 10_000:
        _warned.add(token)
    log.warning("tenant policy%s: keys that do not validate, read leniently (coerced, emptied or dropped): %s (stored value %.200s)",
                f" of {where}" if where else "", ", ".join(dropped) or "?", token)
