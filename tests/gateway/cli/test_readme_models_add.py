"""The README's `models add` example runs as written against the packaged router.

The packaged router's descriptors are probe-outcome, so the example must name that kind and a
judge. Here the example's own arguments are run end to end, with two substitutions only: the
placeholder server (`--api-base http://10.0.0.5:8000/v1`) and the judge's provider are a fake
OpenAI-compatible upstream on 127.0.0.1 (`--judge-api-base`), and the config and router it
writes go to a temporary folder. Then `models list` and `models remove`, as the block goes on.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gateway.cli import main
from tests.fakes.upstream import FakeBackend, FakeUpstream

README = Path(__file__).resolve().parents[3] / "README.md"


def readme_models_block() -> list[list[str]]:
    """The shell block under "## Add a model without retraining", one argv per command."""
    text = README.read_text()
    section = text[text.index("## Add a model without retraining"):]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None
    commands = block.group(1).replace("\\\n", " ").strip().splitlines()
    return [shlex.split(c) for c in commands]


def _replace(argv: list[str], option: str, value: str) -> list[str]:
    i = argv.index(option)
    return [*argv[:i + 1], value, *argv[i + 2:]]


def test_the_example_names_the_packaged_routers_descriptor_kind() -> None:
    from router_core.artifact import DEFAULT_ROUTER_DIR, load_router
    from router_core.fingerprints.space import kind_for_artifact

    add = readme_models_block()[0]
    fingerprint = add[add.index("--fingerprint") + 1]
    assert "--force" not in add
    kind_for_artifact(load_router(DEFAULT_ROUTER_DIR).config, fingerprint)  # no ValueError
    if fingerprint == "probe-outcome":
        assert "--judge-model" in add


def _judge(body: dict) -> str:
    """Grades that vary with the probe (a judge grading all answers alike places nothing)."""
    text = str(body["messages"][-1]["content"])
    return "Score: 9" if sum(map(ord, text)) % 3 == 0 else "Score: 2"


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    backends = [
        FakeBackend("my-model", reply="A short, careful answer.", input_per_m=0.2,
                    output_per_m=0.6),
        FakeBackend("gpt-4o-mini", reply=_judge, input_per_m=0.15, output_per_m=0.6),
    ]
    with FakeUpstream(backends) as up:
        yield up


def test_readme_models_add_list_remove_run_as_written(
    upstream: FakeUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    add, listing, remove = readme_models_block()
    assert add[:3] == [".venv/bin/tollgate", "models", "add"]
    monkeypatch.setenv("MY_KEY", "sk-fake")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-judge")
    monkeypatch.setenv("TOLLGATE_HOME", str(tmp_path))  # where a changed packaged router goes
    monkeypatch.delenv("TOLLGATE_DATABASE_URL", raising=False)
    monkeypatch.delenv("TOLLGATE_CONFIG", raising=False)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"model_list": []}))  # the packaged router (no router_path)
    monkeypatch.chdir(tmp_path)  # ./config.yaml is the config the commands edit
    argv = _replace(add[1:], "--api-base", upstream.base_url)
    argv += ["--judge-api-base", upstream.base_url]
    runner = CliRunner()
    result = runner.invoke(main, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert len(upstream.requests_for("my-model")) == len(upstream.requests_for("gpt-4o-mini"))
    entries = yaml.safe_load(cfg.read_text())["model_list"]
    assert [e["model_name"] for e in entries] == ["my-model"]
    assert entries[0]["litellm_params"]["api_key"] == "os.environ/MY_KEY"
    result = runner.invoke(main, listing[1:], catch_exceptions=False)
    assert result.exit_code == 0 and "my-model" in result.output, result.output
    result = runner.invoke(main, remove[1:], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(cfg.read_text())["model_list"] in ([], None)
