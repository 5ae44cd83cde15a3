"""Each `auto*` route of a config, measured where users meet it: `tollgate serve` over HTTP.

The config's backends answer from a local upstream on 127.0.0.1 (live_gateway.py: prices
kept). Test prompts of MMLU-Pro, LLMRouter and RouterBench (a seeded sample of each test
split) go through the OpenAI SDK to every route the gateway serves, one after another, so the
gateway carries its state from request to request (explore shares, breakers, budgets); every
request's explanation (``GET /v1/routing/{id}``) is read. Per route:

- where the prompts went;
- the mean p̂ of the chosen backend and of the route's reference on the same prompts (the
  reference the explanation names; a route without a promise is compared with its strongest
  candidate on each prompt);
- the estimated drop: mean of p̂_reference − p̂_chosen per request when every explanation
  gives the reference's p̂; when some do not (the reference was not a candidate), the mean
  p̂ of the reference where given minus the chosen backend's mean p̂ over all requests (how
  many gave it is printed beside it);
- the saving: 1 − what the gateway charged / what the reference's price would have charged for
  the same usage.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

from bench.routing.live_gateway import (
    admin_key,
    candidate_p,
    explanation,
    local_config,
    reference_of,
    strongest_candidate,
    tenant_key,
    tollgate_serve,
    upstream_name,
)

ROUTES = ("auto", "auto-balanced", "auto-cheap")
DATASETS = ("mmlu-pro", "llmrouter", "routerbench")
REPLY = "The answer follows from the definitions; see the steps above."


@dataclass
class RouteFigures:
    """One route's requests, as its explanations describe them."""

    route: str
    went: Counter = field(default_factory=Counter)
    reference: Counter = field(default_factory=Counter)  # the reference each request named
    p_chosen: list[float] = field(default_factory=list)  # every request's
    p_reference: list[float | None] = field(default_factory=list)  # None: not in its explanation
    charged: float = 0.0
    reference_usd: float = 0.0
    requests: int = 0
    refused: list[str] = field(default_factory=list)

    @property
    def reference_known(self) -> int:
        return sum(p is not None for p in self.p_reference)

    @property
    def mean_reference(self) -> float:
        known = [p for p in self.p_reference if p is not None]
        return float(np.mean(known)) if known else float("nan")

    @property
    def drop(self) -> float:
        """Paired when every request gave the reference's p̂, else the two means' difference
        (module docstring)."""
        if not self.p_chosen or not self.reference_known:
            return float("nan")
        if self.reference_known == len(self.p_chosen):
            return float(np.mean(np.subtract(self.p_reference, self.p_chosen)))
        return self.mean_reference - float(np.mean(self.p_chosen))

    @property
    def saving(self) -> float:
        return 1.0 - self.charged / self.reference_usd if self.reference_usd > 0 else float("nan")


def sample_prompts(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """(dataset, prompt): a seeded sample of ``n`` test prompts of each dataset."""
    from router_core.data import load_dataset

    out = []
    for name in DATASETS:
        table = load_dataset(name)
        rows = np.flatnonzero(np.asarray(table.split) == "test")
        rng = np.random.default_rng(seed)
        picked = np.sort(rng.choice(rows, size=min(n, len(rows)), replace=False))
        out += [(name, str(table.prompts[i])) for i in picked]
    return out


def _one(client, http: httpx.Client, prices, fig: RouteFigures, prompt: str) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=fig.route, messages=[{"role": "user", "content": prompt}], max_tokens=64)
    rid = raw.headers["x-tollgate-request-id"]
    usage = raw.parse().usage
    expl = explanation(http, rid)
    chosen = expl["answered_by"] or expl["decision"]["winner"]
    ref = reference_of(expl) or strongest_candidate(expl)
    fig.requests += 1
    fig.went[chosen] += 1
    fig.reference[ref] += 1
    p_chosen = candidate_p(expl, chosen)
    if p_chosen is not None:
        fig.p_chosen.append(p_chosen)
        fig.p_reference.append(candidate_p(expl, ref) if ref else None)
    fig.charged += float(raw.headers["x-tollgate-cost-usd"])
    if ref in prices:
        fig.reference_usd += prices[ref].cost(int(usage.prompt_tokens),
                                              int(usage.completion_tokens))


def measure_routes(config_path: Path, prompts: list[tuple[str, str]],
                   routes: tuple[str, ...] = ROUTES) -> dict[str, RouteFigures]:
    """Start the gateway on ``config_path`` and send every prompt to every route it serves."""
    import openai

    from gateway.config import load_settings, settings_from_dict
    from gateway.pricing import resolve_prices
    from gateway.sandbox.local_upstream import FakeBackend, FakeUpstream

    names = [b.model_name for b in load_settings(config_path).model_list]
    backends = [FakeBackend(upstream_name(n), reply=REPLY) for n in dict.fromkeys(names)]
    admin = admin_key()
    out: dict[str, RouteFigures] = {}
    with tempfile.TemporaryDirectory(prefix="tollgate-live-") as tmp, \
            FakeUpstream(backends) as up:
        config = local_config(config_path, up.base_url, Path(tmp), admin)
        prices = resolve_prices(settings_from_dict(config, source="bench"), strict=False)
        with tollgate_serve(config, Path(tmp)) as server:
            key = tenant_key(server.url, admin)
            client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0,
                                   timeout=120)
            with httpx.Client(base_url=server.url, timeout=60,
                              headers={"authorization": f"Bearer {key}"}) as http:
                for route in routes:
                    fig = RouteFigures(route)
                    for _, prompt in prompts:
                        try:
                            _one(client, http, prices, fig, prompt)
                        except openai.NotFoundError as e:  # the config has no such route
                            fig.refused.append(str(e)[:200])
                            break
                        except openai.APIStatusError as e:
                            fig.refused.append(f"{e.status_code} {str(e)[:200]}")
                    out[route] = fig
    return out


def print_routes(label: str, figures: dict[str, RouteFigures]) -> None:
    print(f"\n{label}")
    print(f"{'route':<14} {'n':>4} {'p̂ chosen':>9} {'p̂ ref':>7} {'est. drop':>9} "
          f"{'ref known':>9} {'saving':>7}  reference; where the prompts went")
    for route, f in figures.items():
        if not f.requests:
            print(f"{route:<14} not served: {f.refused[0] if f.refused else '?'}")
            continue
        mix = ", ".join(f"{b} {n / f.requests:.0%}" for b, n in f.went.most_common())
        refs = ", ".join(f"{b} {n}" for b, n in f.reference.most_common())
        pc = np.mean(f.p_chosen) if f.p_chosen else float("nan")
        print(f"{route:<14} {f.requests:>4} {pc:>9.3f} {f.mean_reference:>7.3f} "
              f"{f.drop:>+9.4f} {f.reference_known:>9} {f.saving:>7.3f}  ref {refs}; {mix}")
        if f.refused:
            print(f"{'':<14} {len(f.refused)} refused, e.g. {f.refused[0]}")
