"""`tollgate models add --fingerprint probe-outcome`: the new model answers the probes over
HTTP, an LLM judge (also over HTTP) grades each answer, and the model joins the router with
its probe readout: its own direction and calibration in the head's space, no retraining.

Real parts: the fake OpenAI-compatible upstream on 127.0.0.1 serving both the model and the
judge through litellm, MiniLM embedding the probes, the artifact on disk, SQLite with the
gateway's migrations (the version is recorded and activated there).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from gateway.cli import main
from gateway.store.migrate import upgrade
from router_core.artifact import load_router, save_router
from router_core.descriptors.base import ProbeSet
from router_core.encoders.minilm import Encoder
from router_core.runtime.router import Calibration, Expert, Head, Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.router_core.fingerprints import conftest as fingerprint_fixtures

# the scorer LM fixtures of the fingerprint tests (one torch thread, SmolLM2, the probes)
_one_torch_thread = fingerprint_fixtures._one_torch_thread
probes, scorer = fingerprint_fixtures.probes, fingerprint_fixtures.scorer

GOOD = ("2 + 2", "Hamlet", "Italy", "colour")  # the new model answers these well


def new_model_reply(body: dict) -> str:
    q = str(body["messages"][-1]["content"])
    return f"A careful answer to: {q}" if any(g in q for g in GOOD) else "I do not know."


def judge_reply(body: dict) -> str:
    """Grades like a strict judge: 9 for an answer that engages the question, else 1."""
    text = str(body["messages"][-1]["content"])
    answer = re.search(r"\[Answer\]\n(.*)", text, re.DOTALL)
    return "Score: 9" if answer and "careful" in answer.group(1) else "Score: 1"


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    backends = [
        FakeBackend("fake-new", reply=new_model_reply, input_per_m=0.05, output_per_m=0.1),
        FakeBackend("fake-judge", reply=judge_reply, input_per_m=0.1, output_per_m=0.2),
        FakeBackend("fake-lenient-judge", reply="Score: 7", input_per_m=0.1, output_per_m=0.2),
    ]
    with FakeUpstream(backends) as up:
        yield up


def _save_router(path: Path, probes: ProbeSet, version: str, descriptor: dict, a0: float) -> Path:
    """A two-expert router of the given descriptor kind (random head and descriptors: its
    space is what counts), saved with its probes."""
    rng = np.random.default_rng(0)
    d = len(probes)
    head = Head(
        layers=(
            (rng.normal(size=(32, 384)).astype(np.float32) / 10, np.zeros(32, np.float32)),
            (rng.normal(size=(d, 32)).astype(np.float32) / 4, np.zeros(d, np.float32)),
        )
    )
    E = rng.normal(size=(2, d))
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    router = Router(
        version=version,
        head=head,
        experts=(
            Expert("fake-strong", E[0].astype(np.float32), 3e-3, descriptor["name"]),
            Expert("fake-mid", E[1].astype(np.float32), 3e-4, descriptor["name"]),
        ),
        calibration=Calibration(a={"fake-strong": 2.0, "fake-mid": 2.0},
                                b={"fake-strong": 1.0, "fake-mid": 0.0}, a0=a0, b0=0.0),
        config={"descriptor": descriptor, "probe_ids": list(probes.ids),
                "encoder": Encoder(cache=False).settings()},
    )
    save_router(router, path, probes=probes.to_json())
    return path


@pytest.fixture()
def artifact(tmp_path: Path, probes: ProbeSet) -> Path:
    """A router trained on probe-outcome descriptors."""
    return _save_router(tmp_path / "router", probes, "probe-router-1",
                        {"name": "probe-outcome"}, a0=1.0)


def _add_judged(upstream: FakeUpstream, artifact: Path, cfg: Path, fingerprint: str,
                *extra: str, catch: bool = False, judge: str = "fake-judge"):
    """`tollgate models add fake-new` with ``judge`` grading, both over the fake upstream."""
    return CliRunner().invoke(
        main,
        ["models", "add", "fake-new", "--litellm-model", "openai/fake-new",
         "--api-base", upstream.base_url, "--api-key-env", "FAKE_UPSTREAM_KEY",
         "--fingerprint", fingerprint, "--judge-model", f"openai/{judge}",
         "--judge-api-base", upstream.base_url, "--judge-api-key-env", "FAKE_UPSTREAM_KEY",
         "--config", str(cfg), "--router", str(artifact), "--max-spend", "0.01", *extra],
        catch_exceptions=catch,
    )


def test_models_add_probe_outcome_grades_answers_and_fits_a_readout(
    upstream: FakeUpstream, artifact: Path, probes: ProbeSet, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_UPSTREAM_KEY", "sk-fake-upstream")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"model_list": [], "router_path": str(artifact)}))
    db_url = f"sqlite:///{tmp_path / 'tollgate.db'}"
    upgrade(db_url)  # the gateway's database, as a gateway starting on it leaves it
    result = _add_judged(upstream, artifact, cfg, "probe-outcome",
                         "--price-in", "0.05", "--price-out", "0.1", "--judge-price-in", "0.1",
                         "--judge-price-out", "0.2", "--database-url", db_url)
    assert result.exit_code == 0, result.output
    # every probe answered by the model, every answer graded by the judge, over HTTP
    asked = upstream.requests_for("fake-new")
    assert sorted(r["messages"][-1]["content"] for r in asked) == sorted(probes.prompts)
    graded = upstream.requests_for("fake-judge")
    assert len(graded) == len(probes) and all(r.get("temperature") == 0 for r in graded)
    assert "8 of 8 probe answers graded, mean 0.50" in result.output
    # the new expert: a unit descriptor and its own calibration, which puts the probes it
    # answered well above the others (a regularised fit on 8 points: by a margin, on average)
    router = load_router(artifact)
    new = router.experts[router.model_names.index("fake-new")]
    assert new.kind == "probe-outcome"
    assert np.linalg.norm(new.descriptor) == pytest.approx(1.0, abs=1e-5)
    assert router.calibration.a["fake-new"] > 0
    Q = router.project(Encoder(cache=False).encode(list(probes.prompts)))
    p = router.calibration("fake-new", Q @ new.descriptor)
    good = np.array([any(g in q for g in GOOD) for q in probes.prompts])
    assert p[good].mean() > p[~good].mean() + 0.05
    assert p.mean() == pytest.approx(0.5, abs=0.05)  # the judge's mean grade
    # the other experts are untouched
    assert router.calibration.a["fake-strong"] == 2.0
    assert "fake-new" in [e["model_name"] for e in yaml.safe_load(cfg.read_text())["model_list"]]
    # recorded and activated in the database: running gateways hot-swap to it
    from gateway.learning import router_versions
    from gateway.store.engine import make_engine

    engine = make_engine(db_url)
    try:
        active = router_versions.active_version(engine)["version"]
        assert active == router.version != "probe-router-1"
    finally:
        engine.dispose()


def test_models_add_probe_outcome_needs_a_judge(artifact: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["models", "add", "x", "--litellm-model", "openai/x", "--fingerprint", "probe-outcome",
         "--config", str(tmp_path / "c.yaml"), "--router", str(artifact)],
    )
    assert result.exit_code != 0 and "--judge-model" in result.output


def test_a_failing_judge_adds_nothing(
    upstream: FakeUpstream, artifact: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_UPSTREAM_KEY", "sk-fake-upstream")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"model_list": [], "router_path": str(artifact)}))
    upstream.set_mode("fake-judge", "error_500")
    try:
        result = _add_judged(upstream, artifact, cfg, "probe-outcome", catch=True)
    finally:
        upstream.reset()
    assert result.exit_code != 0
    assert "only 0 of 8 probes answered and graded" in result.output
    assert load_router(artifact).model_names == ("fake-strong", "fake-mid")  # unchanged
    assert yaml.safe_load(cfg.read_text())["model_list"] == []


@pytest.fixture()
def perplexity_artifact(tmp_path: Path, probes: ProbeSet, scorer) -> Path:
    """A router whose experts are perplexity fingerprints (scored by SmolLM2)."""
    from router_core.fingerprints.perplexity import PerplexityFingerprint

    return _save_router(tmp_path / "router", probes, "ppl-router-1",
                        PerplexityFingerprint(scorer).config(), a0=2.0)


def _bare_fingerprint(scorer, probes: ProbeSet) -> np.ndarray:
    """fake-new's perplexity fingerprint, from the answers the fake upstream gives it."""
    from router_core.fingerprints.perplexity import PerplexityFingerprint

    answers = [new_model_reply({"messages": [{"content": p}]}) for p in probes.prompts]
    return PerplexityFingerprint(scorer).describe({"fake-new": answers}, probes, ["fake-new"])[0]


def test_models_add_perplexity_with_a_judge_refines_the_fingerprint(
    upstream: FakeUpstream, perplexity_artifact: Path, probes: ProbeSet, scorer, tmp_path: Path,
    monkeypatch,
) -> None:
    """perplexity + --judge-model: the answers are fingerprinted (SmolLM2) *and* graded, and
    the grades refine the fingerprint: the readout with a0·e as its prior mean."""
    from router_core.cold_start.readout import fit_readout

    monkeypatch.setenv("FAKE_UPSTREAM_KEY", "sk-fake-upstream")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"model_list": [], "router_path": str(perplexity_artifact)}))
    before = len(upstream.requests_for("fake-judge"))
    result = _add_judged(upstream, perplexity_artifact, cfg, "perplexity",
                         "--price-in", "0.05", "--price-out", "0.1")
    assert result.exit_code == 0, result.output
    assert len(upstream.requests_for("fake-judge")) - before == len(probes)
    assert "8 of 8 probe answers graded, mean 0.50" in result.output
    router = load_router(perplexity_artifact)
    new = router.experts[router.model_names.index("fake-new")]
    assert new.kind == "perplexity"
    # what the command computed, recomputed: the fingerprint of the same answers, the
    # judge's grades, the readout with the fingerprint (times the pooled slope) as prior
    e = _bare_fingerprint(scorer, probes)
    good = np.array([any(g in q for g in GOOD) for q in probes.prompts])
    Q = router.project(Encoder(cache=False).encode(list(probes.prompts)))
    want = fit_readout(Q, np.where(good, 0.9, 0.1), prior=2.0 * e)
    np.testing.assert_allclose(new.descriptor, want.descriptor, atol=1e-4)
    assert router.calibration.a["fake-new"] == pytest.approx(want.a, rel=1e-4)
    assert float(new.descriptor @ e) < 0.999  # refined, not the bare fingerprint
    p = router.calibration("fake-new", Q @ new.descriptor)
    assert p[good].mean() > p[~good].mean()


def test_a_judge_grading_all_alike_keeps_the_fingerprint_and_says_so(
    upstream: FakeUpstream, perplexity_artifact: Path, probes: ProbeSet, scorer, tmp_path: Path,
    monkeypatch,
) -> None:
    """Every answer graded 7/10: no signal to refine by. The model still joins with its
    bare fingerprint, and the command says why its grades were not used."""
    monkeypatch.setenv("FAKE_UPSTREAM_KEY", "sk-fake-upstream")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"model_list": [], "router_path": str(perplexity_artifact)}))
    result = _add_judged(upstream, perplexity_artifact, cfg, "perplexity",
                         judge="fake-lenient-judge")
    assert result.exit_code == 0, result.output
    assert "the judge graded all 8 answers alike: fake-new keeps its bare fingerprint" in (
        result.output
    )
    router = load_router(perplexity_artifact)
    new = router.experts[router.model_names.index("fake-new")]
    e = _bare_fingerprint(scorer, probes)
    np.testing.assert_allclose(new.descriptor, e, atol=1e-5)
    assert "fake-new" not in router.calibration.a  # the pooled (a0, b0) place it
