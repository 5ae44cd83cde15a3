"""The pool: everything a request is routed over, as one immutable value.

A ``Pool`` holds the backends and routes (a ``Settings``: the config's, plus any backends
adopted from a router artifact), their prices, the router (with a cold-start prior expert for
each priced backend it did not know), how the router knows each backend, and, per route, which
expert routes to which backend. All of it is derived once, when the pool is built; a request
takes ``holder.current`` once and reads only that value to the end, and the learning loop
builds a new pool and swaps it whole (``PoolHolder.swap``), so nothing on the request path
re-derives the pool and no request ever sees half of a change.

Example::

    holder = PoolHolder(build_pool(settings, resolve_prices(settings, strict=False), router))
    pool = holder.current
    pool.deployable("auto", ["gpt-4o-mini", "llama-3.1-8b"])  # expert -> backend
    holder.swap(pool.with_router(new_router))                  # a hot swap
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import numpy as np

from gateway.config import Backend, Route, Settings
from gateway.pool.adopt import adopted_pool
from gateway.pool.certificates import RouteCertificate, route_certificates
from gateway.pool.known import PRIOR_KIND, Known, know_backends
from gateway.pool.modes import CHAT, backend_mode
from gateway.pool.priors import with_priors
from gateway.pool.promise import (
    Quality,
    RoutePromise,
    backend_qualities,
    belief_before_outcomes,
    reference_queries,
    route_promises,
)
from gateway.pricing import Price, dearest, deployment_prices
from router_core.promise.belief_stack import BeliefStack
from router_core.runtime.router import Router

WILDCARD_STATUS = "wildcard: passthrough only, each model priced from litellm's map"
MAX_CONCRETE = 1024  # wildcard-matched models whose pool is kept, per pool
MAX_STACKS = 64  # expert sets whose stacked beliefs are kept (a cost cap or allow list varies them)


@dataclass(frozen=True)
class Pool:
    """What the gateway routes over; build it with ``build_pool``."""

    settings: Settings  # the backends (model_list) and routes
    prices: Mapping[str, Price]  # backend -> price; unpriced backends are absent
    router: Router  # with a prior expert for every priced backend it did not know
    known: Mapping[str, Known]  # backend -> how the router knows it (model_list order)
    # route -> (expert, backend) in model_list order, over the route's priced known backends
    route_experts: Mapping[str, tuple[tuple[str, str], ...]]
    priors: frozenset[str]  # experts still on their cold-start prior
    backends: Mapping[str, Backend] = field(repr=False, default_factory=dict)
    qualities: Mapping[str, Quality] = field(repr=False, default_factory=dict)  # per expert
    promises: Mapping[str, RoutePromise] = field(default_factory=dict)  # per promising route
    phi_ref: np.ndarray | None = field(repr=False, default=None)  # Φ of reference prompts
    modes: Mapping[str, str] = field(default_factory=dict)  # backend -> chat, embedding, ...
    # a group whose deployments' prices differ -> each deployment's (deployment_params order);
    # ``prices`` holds the dearest, what its reservation takes
    deployment_prices: Mapping[str, tuple[Price, ...]] = field(repr=False, default_factory=dict)
    wildcards: tuple[str, ...] = ()  # wildcard backends (``openai/*``), model_list order
    # per promising route: its certificate from judged pairs (gateway/pool/certificates.py)
    certificates: Mapping[str, RouteCertificate] = field(repr=False, default_factory=dict)
    # Caches of this one value, made empty by every construction (``init=False``: a copy
    # made with ``replace`` has its own, never the original's entries).
    # model -> the pool with that wildcard-matched model in it (``concrete``)
    _concrete: dict[str, Pool] = field(
        init=False, repr=False, compare=False, default_factory=dict)
    # expert set -> their beliefs stacked (``belief_stack``)
    _stacks: dict[tuple[str, ...], BeliefStack] = field(
        init=False, repr=False, compare=False, default_factory=dict)
    # expert set -> their beliefs before any outcome, stacked (``before_stack``; None: none
    # of them refined)
    _before: dict[tuple[str, ...], BeliefStack | None] = field(
        init=False, repr=False, compare=False, default_factory=dict)

    @property
    def version(self) -> str:
        return self.router.version

    @property
    def routes(self) -> Mapping[str, Route]:
        return self.settings.routes

    def backend(self, name: str) -> Backend | None:
        return self.backends.get(name)

    def deployable(self, route: str, allowed: Collection[str] | None = None) -> dict[str, str]:
        """expert -> backend over ``route``'s priced backends the router knows (those in
        ``allowed`` when given); where two backends route as one expert, the first in
        model_list wins (the other stays reachable by passthrough)."""
        out: dict[str, str] = {}
        for expert, name in self.route_experts[route]:
            if allowed is None or name in allowed:
                out.setdefault(expert, name)
        return out

    def answer_price(self, backend: str, deployment: int | None) -> Price:
        """The price an answer of ``backend``'s ``deployment`` is settled at (the dearest
        deployment's when it is not known which answered)."""
        each = self.deployment_prices.get(backend)
        if each is not None and deployment is not None and 0 <= deployment < len(each):
            return each[deployment]
        return self.prices[backend]

    def concrete(self, model: str) -> Pool | None:
        """The pool a request for ``model`` is served over when a wildcard backend
        (``openai/*``) matches it and no backend is named so: this pool with the concrete
        backend added (named ``model``, calling the matched model), priced from its
        model_info else litellm's map for that model (absent from ``prices`` when unpriced:
        the request is then refused); never routed. None when no wildcard matches."""
        if model in self.backends or not self.wildcards:
            return None
        cached = self._concrete.get(model)
        if cached is not None:
            return cached
        b = self.settings.wildcard_for(model)
        if b is None:
            return None
        each = deployment_prices(b)
        prices = dict(self.prices)
        if all(p is not None for p in each):
            prices[model] = dearest([p for p in each if p is not None])
        settings = self.settings.model_copy(
            update={"model_list": [*self.settings.model_list, b]})
        pool = replace(
            self, settings=settings, prices=MappingProxyType(prices),
            backends=MappingProxyType({**self.backends, model: b}),
            known=MappingProxyType({**self.known, model: Known(model, None, WILDCARD_STATUS)}),
            modes=MappingProxyType({**self.modes, model: backend_mode(b)}))
        if len(self._concrete) < MAX_CONCRETE:
            self._concrete[model] = pool
        return pool

    def belief_stack(self, experts: tuple[str, ...]) -> BeliefStack:
        """The beliefs of ``experts`` stacked for one-pass estimates (router_core/promise/
        belief_stack.py), built on a set's first request on this pool value."""
        cached = self._stacks.get(experts)
        if cached is not None:
            return cached
        stack = BeliefStack(tuple(self.qualities[e].belief for e in experts))
        if len(self._stacks) >= MAX_STACKS:
            self._stacks.clear()
        self._stacks[experts] = stack
        return stack

    def before_stack(self, experts: tuple[str, ...]) -> BeliefStack | None:
        """The beliefs of ``experts`` before any outcome (``belief_before_outcomes``), stacked;
        None when outcomes refined none of them: the promise rule's careful view
        (router_core.promise.rule: evidence narrows the rule, never widens it)."""
        if experts in self._before:
            return self._before[experts]
        before = [belief_before_outcomes(self.qualities[e]) for e in experts]
        refined = any(b is not self.qualities[e].belief for b, e in zip(before, experts))
        stack = BeliefStack(tuple(before)) if refined else None
        if len(self._before) >= MAX_STACKS:
            self._before.clear()
        self._before[experts] = stack
        return stack

    def warmed(self) -> Pool:
        """This pool with each promise route's belief stacks built for its whole expert set
        (what a request with no allowed-list or cost cap ranks): built where the pool is (at
        startup, in a hot swap's worker thread), not on the event loop by the first request
        after a swap, which held the loop 280-400 ms on a loaded machine."""
        for route in self.promises:
            experts = tuple(e for e in self.deployable(route) if e in self.qualities)
            if experts:
                self.belief_stack(experts)
                self.before_stack(experts)
        return self

    def expert_of(self, backend: str) -> str | None:
        k = self.known.get(backend)
        return k.expert if k is not None else None

    def with_router(self, router: Router) -> Pool:
        """The pool a hot swap to ``router`` makes: the backends its artifact carries join
        (gateway/pool/adopt.py), then every priced backend it does not know gets its prior."""
        settings, prices = adopted_pool(self.settings, self.prices, router)
        return build_pool(settings, prices, router, self.phi_ref)

    def how_known(self, backend: str) -> str | None:
        """How the pool knows ``backend``'s quality (gateway/pool/promise.py), if routable."""
        q = self.qualities.get(self.expert_of(backend) or "")
        return q.how if q is not None else None


def build_pool(settings: Settings, prices: Mapping[str, Price], router: Router,
               phi_ref: np.ndarray | None = None) -> Pool:
    """The pool of ``settings`` priced by ``prices`` on ``router`` (priors added); ``phi_ref``:
    Φ(x) of the prompts estimates are levelled on (gateway/pool/promise.py)."""
    judge = settings.retraining.exploration.judge_backend
    modes = {b.model_name: backend_mode(b) for b in settings.model_list}
    not_routed = {name for name, mode in modes.items() if mode != CHAT} | ({judge} - {None})
    router = with_priors(router, settings, prices, exclude=not_routed)
    known = {k.backend: k for k in know_backends(settings, router, prices)}
    for name, mode in modes.items():  # another mode is reached by name, never routed
        if mode != CHAT:
            known[name] = Known(name, None, f"{mode} (reached by name)")
    wildcards = tuple(b.model_name for b in settings.model_list if b.is_wildcard)
    for name in wildcards:  # passthrough only, each model it matches priced on its own
        known[name] = Known(name, None, WILDCARD_STATUS)
    routed = {
        name: tuple((known[b.model_name].expert, b.model_name)
                    for b in settings.route_backends(name)
                    if known[b.model_name].expert is not None)
        for name in settings.routes
    }
    Q_ref = reference_queries(router, phi_ref)
    qualities = backend_qualities(router, known, settings, prices, Q_ref)
    return Pool(
        settings=settings,
        prices=MappingProxyType(dict(prices)),
        router=router,
        known=MappingProxyType(known),
        route_experts=MappingProxyType(routed),
        priors=frozenset(e.name for e in router.experts if e.kind == PRIOR_KIND),
        backends=MappingProxyType({b.model_name: b for b in settings.model_list}),
        qualities=MappingProxyType(qualities),
        promises=MappingProxyType(route_promises(
            settings, known, qualities, prices, router.config or {},
            Q_ref if phi_ref is not None and len(phi_ref) else None)),
        phi_ref=phi_ref,
        modes=MappingProxyType(modes),
        deployment_prices=MappingProxyType(_deployment_prices(settings, prices)),
        wildcards=wildcards,
        certificates=MappingProxyType(route_certificates(router.config or {})),
    ).warmed()


def _deployment_prices(settings: Settings, prices: Mapping[str, Price]
                       ) -> dict[str, tuple[Price, ...]]:
    """Each priced group whose deployments' prices differ -> their prices."""
    out: dict[str, tuple[Price, ...]] = {}
    for b in settings.model_list:
        if len(b.deployment_params()) > 1 and b.model_name in prices:
            each = deployment_prices(b)
            if all(p is not None for p in each) and len(set(each)) > 1:
                out[b.model_name] = tuple(p for p in each if p is not None)
    return out


class PoolHolder:
    """The current pool; replacing it is one reference assignment (requests in flight keep
    the pool they started with). The learning loop swaps new pools in through it."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    @property
    def current(self) -> Pool:
        return self._pool

    def swap(self, pool: Pool) -> Pool:
        old, self._pool = self._pool, pool
        return old
