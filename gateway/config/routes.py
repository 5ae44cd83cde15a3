"""Routes: the model names clients send that are routed, and their defaults.

Every route keeps a promise unless the operator asks for a λ trade.
A route is a promise against its reference (DESIGN.md, "Routes: a promise against a
reference"): ``max_drop`` of the reference's quality, as cheaply as possible. A config without
``routes:`` (a pasted LiteLLM config: ``model_list`` only) gets the three promising routes
``auto`` (0.01), ``auto-balanced`` (0.03) and ``auto-cheap`` (0.06), each against the strongest
known backend. A route that sets neither ``max_drop`` nor ``cost_weight`` gets its name's drop
from that table, else ``auto``'s (the strictest). A λ route (a = p̂ − λ·c̃, no promise) exists
only where the operator sets ``cost_weight`` without ``max_drop``.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from router_core.promise.rule import PROMISES

STRICTEST = PROMISES["auto"]  # a route of another name promises as `auto` does


class _RouteLike(Protocol):
    max_drop: float | None

    @property
    def model_fields_set(self) -> set[str]: ...


def default_drop(name: str) -> float:
    """The drop a route named ``name`` promises when its config names none."""
    return PROMISES.get(name, STRICTEST)


def is_lambda_route(route: _RouteLike) -> bool:
    """Whether the operator asked for a λ route: ``cost_weight`` set, ``max_drop`` not."""
    return route.max_drop is None and "cost_weight" in route.model_fields_set


def needs_default_promise(route: _RouteLike) -> bool:
    """A route with neither ``max_drop`` nor ``cost_weight``: it promises by default."""
    return route.max_drop is None and not is_lambda_route(route)


class Route(BaseModel):
    """A model name clients send that is routed: its promise (or λ, δ) and the backends it
    may choose. Without ``max_drop`` or ``cost_weight`` it promises by default
    (module docstring)."""

    model_config = ConfigDict(extra="forbid")

    cost_weight: float = Field(default=0.5, ge=0)  # λ in a_h = p̂_h − λ c̃_h
    delta: float | None = Field(default=None, ge=0)  # δ; None = the artifact's
    models: list[str] | None = None  # allowed backends (model_name); None = the whole pool
    # on a λ route only: most of its requests a backend on its cold-start prior may get (per
    # replica); a route with a promise ignores it (a prior backend is served only where the
    # rule finds it within the promise, and learns from shadow calls)
    explore_share: float = Field(default=0.05, ge=0, le=1)
    description: str | None = None
    # a promise against a reference (gateway/pool/promise.py): realized quality within
    # max_drop of the reference backend's, as cheaply as possible; λ is then not used
    max_drop: float | None = Field(default=None, ge=0, le=1)
    reference: str | None = None  # a backend of the route; default: its strongest known
    _default_promise: bool = PrivateAttr(default=False)  # max_drop from default_drop

    @property
    def promise_by_default(self) -> bool:
        return self._default_promise


def default_routes() -> dict[str, Route]:
    """The routes of a config without ``routes:``: auto, auto-balanced, auto-cheap."""
    return {name: Route() for name in ("auto", "auto-balanced", "auto-cheap")}
