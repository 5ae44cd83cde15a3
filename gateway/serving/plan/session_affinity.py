"""A conversation stays on the backend that holds its prompt cache (issue 47, item 9).

Providers cache a prompt's prefix per backend: Anthropic bills a cache read at 0.1x the input
price (litellm's map: ``cache_read_input_token_cost`` 3e-07 against 3e-06 for Claude Sonnet
4.5), OpenAI at 0.1-0.5x. A turn that hops to another backend pays its whole context afresh,
so on long agent contexts hopping costs more than the router's choice saves.

- A conversation is named by its session id (gateway/serving/record/attribution.py) or, with
  none, by its prefix: the system turns and the first user turn, which every later turn of
  the same conversation repeats (``conversation_key``); per tenant, hashed.
- ``SessionAffinity`` remembers which backend answered a conversation last (this process's,
  bounded, for ``TTL_S``: the longest cache lifetime providers offer, Anthropic's 1 h).
- Ranking counts the cache discount on that backend: the earlier turns' share of the prompt
  at its cache-read price (``cached_cost``), the rest at the input price.
- The turn then stays on that backend whenever the route's rule keeps it in its eligible set
  (the promise rule's backends within the promise, the λ rule's δ-equivalent set E): it
  leaves only when the promise requires, the backend fails (the fallback that answers holds
  the conversation from then on), or the tenant's policy no longer allows it (it is then not
  among the candidates at all).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import replace

from gateway.config import Backend
from gateway.config.model_map import map_entry
from gateway.serving.plan.routing import Routed, message_text

TTL_S = 3600.0  # Anthropic's 1-hour cache TTL, the longest (docs.anthropic.com prompt caching)
MAX_CONVERSATIONS = 100_000
CACHE_READ = "cache_read_input_token_cost"


PREFIX_CHARS = 65_536  # of each turn's text that names a conversation


def conversation_key(tenant_id: str, session_id: str | None, messages: list[dict]
                     ) -> str | None:
    """The conversation's name: its session id, else its system turns and first user turn
    (None when it has no user turn), each by its role, its text's length and its first
    ``PREFIX_CHARS`` characters: two conversations alike in all three share a name, which
    only keeps them on one backend."""
    h = hashlib.sha256(tenant_id.encode() + b"\0")
    if session_id:
        h.update(b"session\0" + session_id.encode())
        return h.hexdigest()
    h.update(b"prefix\0")
    for m in messages:
        if not isinstance(m, dict):
            continue
        text = message_text(m.get("content"))  # each turn's length and its first characters:
        h.update(f"{m.get('role')}\0{len(text)}\0".encode())  # bounded work on the event
        h.update(text[:PREFIX_CHARS].encode("utf-8", "replace") + b"\0")  # loop (8 MB: 0.1 s)
        if m.get("role") == "user":
            return h.hexdigest()
    return None


class SessionAffinity:
    """Conversation → the backend that answered it last; at most ``max_size`` conversations,
    each forgotten ``ttl_s`` after its last turn (one per process)."""

    def __init__(self, ttl_s: float = TTL_S, max_size: int = MAX_CONVERSATIONS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s, self.max_size, self._clock = ttl_s, max_size, clock
        self._held: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def held(self, key: str | None) -> str | None:
        if key is None or (entry := self._held.get(key)) is None:
            return None
        backend, until = entry
        if until < self._clock():
            del self._held[key]
            return None
        return backend

    def hold(self, key: str | None, backend: str) -> None:
        if key is None:
            return
        self._held[key] = (backend, self._clock() + self.ttl_s)
        self._held.move_to_end(key)
        while len(self._held) > self.max_size:
            self._held.popitem(last=False)


def cache_read_ratio(backend: Backend) -> float:
    """A cached input token's price over a fresh one's: the config's pair, else litellm's
    map's; 1 (no discount) where neither gives a cache-read price."""
    own, own_in = backend.model_info.model_extra or {}, backend.input_cost_per_token
    mapped = map_entry(backend.model_info, backend.litellm_params)
    for table, p_in in ((own, own_in), (mapped, mapped.get("input_cost_per_token"))):
        price = table.get(CACHE_READ)
        if isinstance(price, (int, float)) and price >= 0 and isinstance(
                p_in, (int, float)) and p_in > 0:
            return min(1.0, float(price) / float(p_in))
    return 1.0


def earlier_share(messages: list[dict]) -> float:
    """The share of the prompt's text the earlier turns hold (all but the last message): what
    the backend holding the conversation has cached."""
    sizes = [len(message_text(m.get("content"))) if isinstance(m, dict) else 0
             for m in messages]
    total = sum(sizes)
    return 0.0 if total == 0 or len(sizes) < 2 else (total - sizes[-1]) / total


def cached_cost(cost: float, fresh_input_cost: float, share: float, ratio: float) -> float:
    """Expected cost with the cached prefix read at ``ratio`` of the input price:
    c − share·c_in·(1 − ratio), where c_in is the prompt's cost at the fresh input price."""
    return cost - share * fresh_input_cost * (1.0 - ratio)


def kept(routed: Routed, backend: str) -> Routed:
    """``routed`` with ``backend`` first when the rule's eligible set holds it (unchanged
    otherwise): the conversation stays where its cache is."""
    by_backend = {b: m for m, b in routed.by_router_model.items()}
    expert = by_backend.get(backend)
    d = routed.decision
    if expert is None or expert == d.chosen or expert not in d.equivalent:
        return routed
    why = f"; kept on {backend}, which holds this conversation's prompt cache"
    order = (expert, *[m for m in d.ranked if m != expert])
    cands = {c.model: c for c in d.candidates}
    decision = replace(d, chosen=expert, ranked=order, reason=d.reason + why,
                       candidates=tuple(cands[m] for m in order if m in cands))
    promise = routed.promise
    if promise is not None:
        promise = {**promise, "chosen": backend, "why": str(promise.get("why", "")) + why}
    return replace(routed, decision=decision, promise=promise,
                   backends=tuple(routed.by_router_model[m] for m in order))


def discounted(costs: Mapping[str, float], held: str | None, fresh_input_cost: float,
               share: float, ratio: float) -> dict[str, float]:
    """``costs`` with the holding backend's at its cached price."""
    out = dict(costs)
    if held is not None and held in out and share > 0 and ratio < 1:
        out[held] = cached_cost(out[held], fresh_input_cost, share, ratio)
    return out

