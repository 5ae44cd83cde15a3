"""What a pool learns from traffic, as the operator reads it: whether exploration is on, who
judges, what it may spend and what a judged pair is expected to cost (the startup block,
``/v1/models`` and the dashboard say the same thing from here).

The judge, when the config names none, is ``default_judge``: the strongest chat backend of the
pool by what is known (the rule a route's default reference follows, gateway/pool/promise.py),
among backends priced above $0, so every judge call is booked at what it costs and counted in
the exploration spend. A named judge is the operator's choice (and is then never routed).

Expected cost of one judged pair on a promise route (``pair_usd``), at the nominal
``TYPICAL_TOKENS`` (500 in, 256 out): the reference's answer, capped at ``max_tokens``, plus
the judge reading the prompt and both answers twice (both orders) and writing 32 tokens each
time. Whatever it comes to, the route's exploration never spends more than ``max_share`` of
the route's own spend (gateway/learning/exploration_ledger.py enforces it).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import ExplorationSettings
from gateway.pool.modes import CHAT
from gateway.pool.pool import Pool
from gateway.pool.priors import TYPICAL_TOKENS
from gateway.pool.promise import default_reference

JUDGE_OUTPUT_TOKENS = 32  # the pair rubric's two scores (judges.LLMJudge.max_tokens × 2)


def default_judge(pool: Pool) -> tuple[str, str] | None:
    """(backend, why) judging when the config names none (module docstring), or None when no
    chat backend is priced above $0."""
    names = [b.model_name for b in pool.settings.model_list
             if pool.modes.get(b.model_name) == CHAT and b.model_name in pool.prices
             and (pool.prices[b.model_name].input_per_token > 0
                  or pool.prices[b.model_name].output_per_token > 0)
             and pool.expert_of(b.model_name) in pool.qualities]
    if not names:
        return None
    return default_reference(names, pool.known, pool.qualities, pool.prices)


@dataclass(frozen=True)
class Exploring:
    """The pool's exploration as configured: on or off (and why), its judge and its bounds."""

    on: bool
    why_off: str | None
    judge: str | None
    judge_chosen: str | None  # "named in config" or why the default judge is this backend
    cfg: ExplorationSettings

    def pair_usd(self, pool: Pool, route: str) -> float | None:
        """Expected USD of one judged pair on ``route`` (module docstring); None when the
        route has no promise or no judge is priced."""
        promise = pool.promises.get(route)
        if promise is None or self.judge is None or self.judge not in pool.prices:
            return None
        n_in, n_out = TYPICAL_TOKENS
        n_out = min(n_out, self.cfg.max_tokens)
        ref = pool.prices[promise.reference].cost(n_in, n_out)
        judge = 2 * pool.prices[self.judge].cost(n_in + 2 * n_out, JUDGE_OUTPUT_TOKENS)
        return ref + judge

    def entry(self, pool: Pool, route: str) -> dict:
        """The route's learning, as ``/v1/models`` shows it."""
        return {"exploring": self.on and self.cfg.epsilon_for(route) > 0,
                "why_off": self.why_off, "epsilon": self.cfg.epsilon_for(route),
                "max_share": self.cfg.max_share, "budget_usd": self.cfg.budget_usd,
                "judge": self.judge, "judge_chosen": self.judge_chosen,
                "judged_pair_usd": self.pair_usd(pool, route),
                "certified_regions": certified_regions(pool, route)}

    def lines(self, pool: Pool) -> list[str]:
        """The startup block's ``learning`` lines."""
        if not self.on:
            return [f"off: {self.why_off}"]
        share = ("no share bound (max_share: null)" if self.cfg.max_share is None
                 else f"≤ {self.cfg.max_share:.0%} of each route's spend (max_share)")
        cap = "" if self.cfg.budget_usd is None else (
            f", ≤ {self.cfg.budget_usd:g} USD {self.cfg.period}")
        out = [(f"on: shadow calls and a judge on a sampled share of routed requests; spend "
                f"{share}{cap}, on the operator (never a tenant's budget)"),
               f"judge: {self.judge} ({self.judge_chosen})"]
        for route in pool.promises:
            usd = self.pair_usd(pool, route)
            eps = self.cfg.epsilon_for(route)
            if usd is not None and eps > 0:
                out.append(f"{route}: ε {eps:g}, a judged pair ≈ {usd:.4f} USD (reference "
                           "answer + 2 judge calls)")
            cert = pool.certificates.get(route)
            if cert is not None:
                out.append(f"{route}: certificate from {cert.pairs} judged pairs, "
                           f"{cert.certified_regions} of {len(cert.mixes)} regions certified")
        return out


def certified_regions(pool: Pool, route: str) -> dict | None:
    """The route's certificate in brief: regions certified of regions, pairs read (None:
    no certificate published yet, the prior-based rule decides everywhere)."""
    cert = pool.certificates.get(route)
    if cert is None:
        return None
    return {"certified": cert.certified_regions, "regions": len(cert.mixes),
            "judged_pairs": cert.pairs}


def exploring(pool: Pool) -> Exploring:
    """How ``pool``'s settings explore (the judge resolved as the learning loop resolves it)."""
    cfg = pool.settings.retraining.exploration
    if not cfg.enabled:
        return Exploring(False, "retraining.exploration.enabled is false", None, None, cfg)
    if cfg.judge.kind != "llm":
        return Exploring(True, None, None, f"kind {cfg.judge.kind}", cfg)
    if cfg.judge.model is not None:
        return Exploring(True, None, cfg.judge.model, "named in config", cfg)
    picked = default_judge(pool)
    if picked is None:
        return Exploring(False, "no chat backend priced above $0 to judge (name one in "
                         "retraining.exploration.judge.model)", None, None, cfg)
    return Exploring(True, None, picked[0], f"by default: {picked[1]}", cfg)


def next_saving(pool: Pool, route: str) -> dict | None:
    """Where ``route``'s next saving is expected: among its backends cheaper than the
    reference (at ``TYPICAL_TOKENS``), the one whose estimated gap to the reference (mean p̂
    on the reference prompts, ``Quality.level``) is smallest against the promise, the larger
    saving first among equal gaps; the rule certifies it once judged outcomes put its
    estimate within the drop. None when the route has no promise or nothing is cheaper."""
    promise = pool.promises.get(route)
    if promise is None or promise.reference not in pool.prices:
        return None
    ref_q = pool.qualities.get(pool.expert_of(promise.reference) or "")
    ref_usd = pool.prices[promise.reference].cost(*TYPICAL_TOKENS)
    if ref_q is None or ref_usd <= 0:
        return None
    best: tuple[float, float, str] | None = None
    for expert, name in pool.route_experts.get(route, ()):
        q = pool.qualities.get(expert)
        usd = pool.prices[name].cost(*TYPICAL_TOKENS) if name in pool.prices else None
        if q is None or usd is None or usd >= ref_usd or name == promise.reference:
            continue
        key = (ref_q.level - q.level - promise.max_drop, -(1.0 - usd / ref_usd), name)
        if best is None or key < best:
            best = key
    if best is None:
        return None
    excess, neg_saving, name = best
    return {"backend": name, "saving_if_certified": -neg_saving,
            "estimated_drop": excess + promise.max_drop, "max_drop": promise.max_drop,
            "known": pool.how_known(name)}
