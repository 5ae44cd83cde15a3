"""What the learning loop may know of one finished request: a frozen record, not the outcome.

Learning sits above serving; handing it this record instead of the live outcome keeps it
from reaching into serving's state (and from reading a field before it exists).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Served:
    request_id: str
    tenant_id: str | None
    status: int  # what the client got
    route: str | None  # None: passthrough
    messages: list[dict]  # the request's messages as the client sent them
    phi: Any  # Φ(x) of a routed request, else None
    pool: tuple[str, ...]  # the backends the router ranked (empty: not routed)
    backend: str | None  # the backend that answered, None if none did
    router_model: str | None  # that backend's router model
    cost_usd: float | None  # the settled cost
    answer_text: str  # the text the client received (streamed text included)
    # the backends this request's tenant policy and options allow (None: not restricted);
    # exploration never sends the prompt elsewhere (no reference, no judge outside it)
    allowed: frozenset[str] | None = None

