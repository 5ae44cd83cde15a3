"""The outcomes the learning loop observed (paired, judge, shadow, feedback) on the prompts of
a window's requests: what the dashboard's measured quality change rests on (savings.py).

Apart from queries.py because it reads the learning loop's tables, not the request log: by
reflection, so the review side works before and after they exist, and once per summary (a
summary folds its rows a page at a time; reflecting per page cost it seconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Engine

from gateway.store import prompt_keys

OUTCOME_SOURCES = ("paired", "judge", "shadow", "feedback")


class OutcomeTables:
    """The learning tables ``judged_outcomes`` reads, reflected once (a summary folds its
    rows a page at a time; reflecting per page cost it seconds)."""

    def __init__(self, engine: Engine) -> None:
        names = set(sa.inspect(engine).get_table_names())
        md = sa.MetaData()
        self.obs = (sa.Table("observations", md, autoload_with=engine)
                    if "observations" in names else None)
        self.lr = (sa.Table("learning_requests", md, autoload_with=engine)
                   if "learning_requests" in names else None)

    def any_outcome(self, engine: Engine) -> bool:
        """Whether any outcome is observed at all (none: no prompt needs reading)."""
        if self.obs is None:
            return False
        with engine.connect() as conn:
            return conn.execute(sa.select(self.obs.c.id).where(
                self.obs.c.source.in_(OUTCOME_SOURCES)).limit(1)).first() is not None


def judged_outcomes(engine: Engine, rows: Sequence[dict[str, Any]],
                    secret: bytes | None = None, tables: OutcomeTables | None = None
                    ) -> dict[str, dict[str, float]]:
    """request id -> router model -> mean observed quality on that request's prompt.

    A request's prompt is its ``learning_requests.prompt_key``, else the keyed hash of its
    logged ``prompt_text`` (the same key the learning loop gives it, gateway.store.prompt_keys;
    ``secret``: the store's ``prompt_secret``). Every judge, shadow, feedback
    and paired observation on that prompt counts (the reference is often judged on another
    request with the same prompt), and so does any on the request itself; where the judge
    compared the request's answer with the reference's side by side (source ``paired``, on
    two models or more), only that comparison counts. Empty without the learning tables."""
    tables = tables or OutcomeTables(engine)
    obs, lr = tables.obs, tables.lr
    if obs is None or not rows:
        return {}
    ids = [r["id"] for r in rows]
    key_of: dict[str, str] = {r["id"]: prompt_keys.prompt_key(r["prompt_text"], secret)
                              for r in rows if r.get("prompt_text")}
    # rid -> obs id -> (model, quality, paired on this very request)
    found: dict[str, dict[int, tuple[str, float, bool]]] = {}
    with engine.connect() as conn:
        if lr is not None:
            for i in range(0, len(ids), 500):
                q = sa.select(lr.c.request_id, lr.c.prompt_key).where(
                    lr.c.request_id.in_(ids[i:i + 500]))
                key_of.update({rid: key for rid, key in conn.execute(q)})
        rids_of: dict[str, list[str]] = {}
        for rid, key in key_of.items():
            rids_of.setdefault(key, []).append(rid)
        cols = (obs.c.id, obs.c.request_id, obs.c.prompt_key, obs.c.model, obs.c.quality,
                obs.c.source)
        mine = obs.c.source.in_(OUTCOME_SOURCES)
        keys = list(rids_of)
        for i in range(0, len(keys), 500):
            q = sa.select(*cols).where(obs.c.prompt_key.in_(keys[i:i + 500]), mine)
            for oid, orid, key, model, quality, source in conn.execute(q):
                for rid in rids_of[key]:
                    found.setdefault(rid, {})[oid] = (
                        model, float(quality), source == "paired" and orid == rid)
        for i in range(0, len(ids), 500):
            q = sa.select(*cols).where(obs.c.request_id.in_(ids[i:i + 500]), mine)
            for oid, rid, _, model, quality, source in conn.execute(q):
                found.setdefault(rid, {})[oid] = (model, float(quality), source == "paired")
    out: dict[str, dict[str, float]] = {}
    for rid, by_id in found.items():
        paired = [o for o in by_id.values() if o[2]]
        use = paired if len({o[0] for o in paired}) >= 2 else list(by_id.values())
        per: dict[str, list[float]] = {}
        for model, quality, _ in use:
            per.setdefault(model, []).append(quality)
        out[rid] = {m: sum(v) / len(v) for m, v in per.items()}
    return out
