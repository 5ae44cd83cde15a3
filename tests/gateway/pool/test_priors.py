"""How each backend is known: trained, alias of an expert, fingerprint, prior, no price."""

from __future__ import annotations

import numpy as np

from gateway.config import settings_from_dict
from gateway.pool import build_pool
from gateway.pool.explore_share import PriorShare
from gateway.pool.known import expert_for, know_backends, table_text
from gateway.pool.priors import with_priors
from gateway.pricing import Price
from router_core.runtime.router import Calibration, Expert, Head, Router


def _router() -> Router:
    d = 8
    rng = np.random.default_rng(0)
    E = rng.normal(size=(4, d)).astype(np.float32)
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    names = ["llama-3.1-70b-instruct", "llama-3.1-8b-instruct", "claude-v1", "fp-model"]
    kinds = ["probe-outcome", "probe-outcome", "probe-outcome", "perplexity"]
    experts = tuple(Expert(n, E[i], 0.001 * (i + 1), k) for i, (n, k) in enumerate(zip(names, kinds)))
    cal = Calibration(a={n: 3.0 for n in names}, b={n: 0.0 for n in names}, a0=3.0, b0=0.0)
    head = Head(((rng.normal(size=(d, 384)).astype(np.float32), np.zeros(d, np.float32)),))
    return Router("v1", head, experts, cal, k=0, delta=0.01)


def _entry(name: str, model: str, **info) -> dict:
    return {"model_name": name, "litellm_params": {"model": model}, "model_info": info}


SETTINGS = settings_from_dict({
    "model_list": [
        _entry("big-llama", "together_ai/meta-llama/Meta-Llama-3.1-70B-Instruct-Turbo"),
        _entry("llama-3.1-8b-instruct", "groq/llama-3.1-8b-instant"),
        _entry("claude-v1", "anthropic/claude-1.3"),
        _entry("mine", "openai/whatever", router_model="fp-model"),
        _entry("gpt-4o", "openai/gpt-4o"),
        _entry("private", "openai/private-model"),
    ],
})
PRICES = {
    "big-llama": Price(8.8e-7, 8.8e-7),
    "llama-3.1-8b-instruct": Price(1.8e-7, 1.8e-7),
    "claude-v1": Price(8e-6, 2.4e-5),
    "mine": Price(1e-6, 1e-6),
    "gpt-4o": Price(2.5e-6, 1e-5),
}


def test_each_backend_is_resolved_exactly_or_not_at_all():
    router = _router()
    got = {b.model_name: expert_for(b, router) for b in SETTINGS.model_list}
    assert got == {
        "big-llama": "llama-3.1-70b-instruct",  # alias through the identity table
        "llama-3.1-8b-instruct": "llama-3.1-8b-instruct",
        "claude-v1": "claude-v1",
        "mine": "fp-model",  # model_info.router_model overrides
        "gpt-4o": None,
        "private": None,
    }


def test_unknown_priced_backends_join_on_a_prior_and_the_table_says_how():
    router = with_priors(_router(), SETTINGS, PRICES)
    assert "gpt-4o" in router.model_names and "private" not in router.model_names
    known = {k.backend: k.status for k in know_backends(SETTINGS, router, PRICES)}
    assert known == {
        "big-llama": "alias of llama-3.1-70b-instruct",
        "llama-3.1-8b-instruct": "trained",
        "claude-v1": "trained",
        "mine": "fingerprint",
        "gpt-4o": "prior (0 outcomes)",
        "private": "no price",
    }
    text = table_text(know_backends(SETTINGS, router, PRICES))
    assert "warning: routes cannot use private" in text
    again = with_priors(router, SETTINGS, PRICES)  # a hot swap re-applies: nothing doubles
    assert again.model_names == router.model_names


def test_a_prior_backend_gets_at_most_its_explore_share():
    share = PriorShare()
    for _ in range(400):
        over = share.over("auto", ["gpt-4o"], 0.05)
        chosen = "gpt-4o" if "gpt-4o" not in over else "big-llama"
        share.record("auto", chosen, on_prior=chosen == "gpt-4o")
    assert 0.04 < share.share("auto", "gpt-4o") <= 0.05 + 1 / 400


def test_outcomes_in_the_database_refine_a_prior_and_models_learn_publishes_it(tmp_path):
    import yaml
    from click.testing import CliRunner

    from gateway.cli import main
    from gateway.learning import router_versions
    from gateway.learning import tables as ldb
    from gateway.learning.refine_priors import refine_due
    from gateway.store.engine import make_engine
    from gateway.store.migrate import upgrade_engine
    from router_core.artifact import load_router, save_router

    url = f"sqlite:///{tmp_path / 'learn.db'}"
    engine = make_engine(url)
    upgrade_engine(engine)
    router = with_priors(_router(), SETTINGS, PRICES)
    rng = np.random.default_rng(1)
    for i in range(120):  # the judge's grades of gpt-4o on 120 prompts: good where x0 > 0
        phi = rng.normal(size=384).astype(np.float32)
        key = ldb.prompt_key(f"prompt {i}", b"test-prompt-secret")
        ldb.record_served(engine, request_id=f"r{i}", tenant_id=None, text=None, key=key,
                          embedding=phi, route="auto", model="gpt-4o", backend="gpt-4o",
                          cost_usd=0.001)  # fmt: skip
        ldb.add_observation(engine, key=key, model="gpt-4o", quality=float(phi[0] > 0),
                            cost_usd=0.001, source="shadow")  # fmt: skip
    assert refine_due(engine, build_pool(SETTINGS, PRICES, router)) == ["gpt-4o"]
    live = router_versions.load_version(engine, router_versions.active_version(engine)["version"])
    learned = {k.backend: k.status for k in know_backends(SETTINGS, live, PRICES)}
    assert learned["gpt-4o"] == "learned (120 outcomes)"  # past the prior: no share cap
    assert refine_due(engine, build_pool(SETTINGS, PRICES, live)) == []  # nothing new

    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"model_list": [e.model_dump(exclude_none=True)
                                                  for e in SETTINGS.model_list]}))  # fmt: skip
    art = tmp_path / "router"
    save_router(_router(), art)
    out = CliRunner().invoke(main, ["models", "learn", "gpt-4o", "--config", str(cfg),
                                    "--router", str(art), "--database-url", url])  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "refined from 120 outcomes" in out.output
    assert load_router(art).version == router_versions.active_version(engine)["version"]
    # the promise's estimate of gpt-4o is refined from the same 120 outcomes, from its prior
    assert load_router(art).config["promise_beliefs"]["gpt-4o"]["n_outcomes"] == 120
    bad = CliRunner().invoke(main, ["models", "learn", "big-llama", "--config", str(cfg),
                                    "--router", str(art), "--database-url", url])  # fmt: skip
    assert bad.exit_code != 0 and "not on a cold-start prior" in bad.output
