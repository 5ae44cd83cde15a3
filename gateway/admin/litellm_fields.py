"""What LiteLLM's management bodies share: field types, the rule that a LiteLLM field Tollgate
would not enforce is refused when set (never dropped silently), and its error shapes."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.admin.api import MAX_BUDGET_USD, Text
from gateway.errors import GatewayError, invalid

Budget = Annotated[float, Field(ge=0, le=MAX_BUDGET_USD, allow_inf_nan=False)]
Limit = Annotated[int, Field(strict=True, ge=0, le=2**62)]  # 0 blocks, as in LiteLLM
Models = list[Annotated[Text, Field(min_length=1, max_length=200)]]
SHORT = 200
EMPTY = (None, {}, [], "", False)  # the defaults LiteLLM's clients send for unset fields


class LiteLLMBody(BaseModel):
    """A body with LiteLLM's field names; ``TOLERATED`` extra fields are accepted unused."""

    model_config = ConfigDict(extra="allow")
    TOLERATED: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="after")
    def _only_enforced(self) -> LiteLLMBody:
        for name, value in (self.model_extra or {}).items():
            if name not in self.TOLERATED and value not in EMPTY:
                raise ValueError(f"{name!r} is not supported by Tollgate's LiteLLM API "
                                 "(it would not be enforced); leave it unset")
        return self


def iso(when: datetime | None) -> str | None:
    return when.isoformat() if when is not None else None


def not_found(message: str, param: str) -> GatewayError:
    return GatewayError(404, message, code="not_found", param=param)


def required(value: Any, param: str) -> Any:
    """LiteLLM's 400 for a missing identifier."""
    if value in (None, "", []):
        raise invalid(f"Malformed request. No {param} passed in.", param)
    return value
