"""`tollgate models add|list|remove` against a fake OpenAI-compatible upstream on 127.0.0.1,
with a running gateway that must route to the new model without a restart or retraining.

Real parts throughout: the fake upstream over HTTP (litellm calls it for the probe answers),
SmolLM2 scoring those answers, the artifact on disk, SQLite with the gateway's migrations,
uvicorn serving the gateway, the official openai SDK as the client.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from gateway.cli import main
from gateway.config import settings_from_dict
from router_core.artifact import load_meta, load_probes, load_router, save_router
from router_core.fingerprints.perplexity import PerplexityFingerprint
from router_core.runtime.router import Calibration, Expert, Head, Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import ADMIN_KEY, run_gateway
from tests.router_core.fingerprints import conftest as fingerprint_fixtures

# the scorer LM fixtures of the fingerprint tests (one torch thread, SmolLM2, the probes)
_one_torch_thread = fingerprint_fixtures._one_torch_thread
probes, scorer = fingerprint_fixtures.probes, fingerprint_fixtures.scorer

PRICES = {"fake-strong": (10.0, 30.0), "fake-mid": (1.0, 2.0), "fake-new": (0.05, 0.1)}
STYLE = {
    "fake-strong": "Let me think step by step about '{q}'. The careful answer follows.",
    "fake-mid": "Answer to {q}: probably yes.",
    "fake-new": "{q} -> ok",
}


def reply_for(name: str):
    def reply(body: dict) -> str:  # the answer depends on the question, like a real model
        q = str(body["messages"][-1]["content"])
        return STYLE[name].format(q=q[:40])

    return reply


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    backends = [
        FakeBackend(n, reply=reply_for(n), input_per_m=p[0], output_per_m=p[1])
        for n, p in PRICES.items()
    ]
    with FakeUpstream(backends) as up:
        yield up


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


@pytest.fixture(scope="module")
def artifact(tmp_path_factory, scorer, probes) -> Path:
    """A router over fake-strong and fake-mid described by perplexity fingerprints of their
    answers to the 8 probes, recorded with the scorer's settings and the probes."""
    kind = PerplexityFingerprint(scorer)
    names = ["fake-strong", "fake-mid"]
    answers = {
        n: [reply_for(n)({"messages": [{"content": p}]}) for p in probes.prompts] for n in names
    }
    E = kind.describe(answers, probes, names)
    rng = np.random.default_rng(0)
    d = len(probes)
    head = Head(
        layers=(
            (rng.normal(size=(16, 384)).astype(np.float32) / 20, np.zeros(16, np.float32)),
            (rng.normal(size=(d, 16)).astype(np.float32) / 4, np.zeros(d, np.float32)),
        )
    )
    quality = {"fake-strong": 0.9, "fake-mid": 0.75}
    router = Router(
        version="ppl-router-1",
        head=head,
        experts=tuple(
            Expert(n, E[i], cost_usd=sum(PRICES[n]) * 1e-4, kind="perplexity")
            for i, n in enumerate(names)
        ),
        # flat calibration: decisions depend on λ and prices only (a new model: σ(b0) = 0.7)
        calibration=Calibration(
            a={n: 0.0 for n in names},
            b={n: _logit(q) for n, q in quality.items()},
            a0=0.0,
            b0=_logit(0.7),
        ),
        k=3,
        config={"descriptor": kind.config(), "probe_ids": list(probes.ids)},
    )
    path = tmp_path_factory.mktemp("artifact") / "router"
    save_router(router, path, probes=probes.to_json())
    return path


@pytest.fixture(scope="module")
def gateway(upstream, artifact, tmp_path_factory):
    from router_core.encoders.minilm import Encoder

    tmp = tmp_path_factory.mktemp("gw")
    config = {
        "model_list": [upstream.model_entry(n) for n in ("fake-strong", "fake-mid")],
        "routes": {"cheap": {"cost_weight": 5.0}},
        "admin_key": ADMIN_KEY,
        "database_url": f"sqlite:///{tmp / 'tollgate.db'}",
        "router_path": str(artifact),
        "retraining": {"poll_s": 0.2},  # how often the gateway looks for a new version
        "reliability": {"spool_dir": str(tmp / "spool")},
    }
    cfg_path = tmp / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(config, sort_keys=False))
    settings = settings_from_dict(config)
    enc = Encoder(cache=False)
    for gw in run_gateway(settings, load_router(artifact), enc):
        yield gw, cfg_path


def ask(gw, key: str) -> str:
    """The backend the gateway answered the ``cheap`` route with."""
    raw = gw.client(key).chat.completions.with_raw_response.create(
        model="cheap", messages=[{"role": "user", "content": "Say something short."}]
    )
    return raw.headers["x-tollgate-model"]


def wait_for(predicate, timeout_s: float = 60.0) -> bool:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_models_add_fingerprints_live_and_a_running_gateway_routes_to_it(
    gateway, upstream, artifact, scorer, probes, monkeypatch
):
    gw, cfg_path = gateway
    key, _ = gw.tenant()
    assert ask(gw, key) == "fake-mid"  # the cheapest model the gateway knows
    monkeypatch.setenv("FAKE_UPSTREAM_KEY", "sk-fake-upstream")
    upstream.reset()
    result = CliRunner().invoke(
        main,
        [
            "models",
            "add",
            "fake-new",
            "--litellm-model",
            "openai/fake-new",
            "--api-base",
            upstream.base_url,
            "--api-key-env",
            "FAKE_UPSTREAM_KEY",
            "--price-in",
            "0.05",
            "--price-out",
            "0.1",
            "--fingerprint",
            "perplexity",
            "--config",
            str(cfg_path),
            "--router",
            str(artifact),
            "--database-url",
            gw.db_url,
            "--max-spend",
            "0.01",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    # every probe was asked once, greedily, over HTTP
    asked = upstream.requests_for("fake-new")
    assert sorted(r["messages"][-1]["content"] for r in asked) == sorted(probes.prompts)
    assert all(r.get("temperature") == 0 for r in asked)
    # the descriptor is the perplexity fingerprint of those answers under the same scorer
    router = load_router(artifact)
    new = router.experts[router.model_names.index("fake-new")]
    answers = [reply_for("fake-new")({"messages": [{"content": p}]}) for p in probes.prompts]
    want = PerplexityFingerprint(scorer).describe({"x": answers}, probes, ["x"])[0]
    np.testing.assert_allclose(new.descriptor, want, atol=1e-5)
    assert new.kind == "perplexity" and new.cost_usd > 0
    assert load_meta(artifact)["version"] != "ppl-router-1"
    assert [p["id"] for p in load_probes(artifact)] == list(probes.ids)  # probes kept
    cfg = yaml.safe_load(cfg_path.read_text())
    entry = next(e for e in cfg["model_list"] if e["model_name"] == "fake-new")
    assert entry["litellm_params"]["api_key"] == "os.environ/FAKE_UPSTREAM_KEY"  # no secret
    assert "$0.0" in result.output and "fake-new" in result.output
    # the running gateway hot-swaps and routes the cheap route to the new model
    assert wait_for(lambda: ask(gw, key) == "fake-new"), "the gateway never routed to fake-new"
    assert upstream.requests_for("fake-new")[-1]["messages"][-1]["content"] == (
        "Say something short."
    )

    listed = CliRunner().invoke(
        main,
        [
            "models",
            "list",
            "--config",
            str(cfg_path),
            "--router",
            str(artifact),
            "--database-url",
            gw.db_url,
        ],
    )
    assert listed.exit_code == 0, listed.output
    line = next(x for x in listed.output.splitlines() if x.startswith("fake-new"))
    assert "perplexity" in line

    removed = CliRunner().invoke(
        main,
        [
            "models",
            "remove",
            "fake-new",
            "--config",
            str(cfg_path),
            "--router",
            str(artifact),
            "--database-url",
            gw.db_url,
        ],
    )
    assert removed.exit_code == 0, removed.output
    assert "fake-new" not in load_router(artifact).model_names
    assert wait_for(lambda: ask(gw, key) == "fake-mid")


def test_models_add_stops_at_the_spend_cap(upstream, artifact, tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"model_list": []}))
    before = load_meta(artifact)["version"]
    result = CliRunner().invoke(
        main,
        [
            "models",
            "add",
            "fake-strong-2",
            "--litellm-model",
            "openai/fake-strong",
            "--api-base",
            upstream.base_url,
            "--price-in",
            "10",
            "--price-out",
            "30",
            "--config",
            str(cfg),
            "--router",
            str(artifact),
            "--max-spend",
            "0.00001",  # less than one worst-case probe call
        ],
        env={"TOLLGATE_DATABASE_URL": ""},
    )
    assert result.exit_code != 0 and "spend cap" in result.output
    assert load_meta(artifact)["version"] == before  # nothing was published
    assert yaml.safe_load(cfg.read_text()) == {"model_list": []}
