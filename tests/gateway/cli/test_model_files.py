"""`tollgate models remove` (and add, through the same code) writes to the config `serve`
uses and to the data directory, keeping the config's comments; the install stays as it is.

`remove` is used because it needs no upstream: `add` shares these paths and is run end to
end in tests/fingerprints/test_models_cli.py."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from gateway.cli import main
from gateway.config import DEFAULT_CONFIG_PATH, load_settings, resolve_config_path
from router_core.artifact import DEFAULT_ROUTER_DIR, load_router

VICTIM = "gemma-2-9b-it"  # a trained expert of the packaged router (LLMRouter)


def _fingerprint(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        for f in sorted(p.rglob("*") if p.is_dir() else [p]):
            if f.is_file():
                h.update(f.read_bytes())
    return h.hexdigest()


@pytest.fixture
def install_unchanged() -> None:
    before = _fingerprint(DEFAULT_CONFIG_PATH, DEFAULT_ROUTER_DIR)
    yield
    assert _fingerprint(DEFAULT_CONFIG_PATH, DEFAULT_ROUTER_DIR) == before


def test_remove_edits_the_served_config_keeping_comments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, install_unchanged: None
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TOLLGATE_CONFIG", raising=False)
    monkeypatch.delenv("TOLLGATE_HOME", raising=False)
    text = DEFAULT_CONFIG_PATH.read_text().replace(
        "model_list:", "model_list:   # my pool, my comment", 1)
    Path("config.yaml").write_text(text)
    result = CliRunner().invoke(main, ["models", "remove", VICTIM])
    assert result.exit_code == 0, result.output
    written = Path("config.yaml").read_text()
    assert "model_list:   # my pool, my comment" in written
    assert "# Model names clients send that are routed." in written  # a block comment too
    assert VICTIM not in written and "router_path: router" in written
    settings = load_settings(resolve_config_path(None))  # what `serve` would load now
    assert settings.backend(VICTIM) is None
    router = load_router(Path(settings.router_path))
    packaged = load_router(DEFAULT_ROUTER_DIR)
    assert VICTIM not in router.model_names
    assert len(router.model_names) == len(packaged.model_names) - 1
    assert (tmp_path / "router" / "probes.json").exists()


def test_the_packaged_config_is_copied_to_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, install_unchanged: None
) -> None:
    home = tmp_path / "home"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TOLLGATE_CONFIG", raising=False)
    monkeypatch.setenv("TOLLGATE_HOME", str(home))
    result = CliRunner().invoke(main, ["models", "remove", VICTIM])
    assert result.exit_code == 0, result.output
    assert "a copy of the packaged config.yaml" in result.output
    copy = (home / "config.yaml").read_text()
    assert "# Tollgate configuration." in copy and VICTIM not in copy
    assert load_router(home / "router").version.endswith(tuple("0123456789"))
    assert resolve_config_path(None) == home / "config.yaml"  # `serve` finds the copy
    second = CliRunner().invoke(main, ["models", "remove", "qwen2.5-7b-instruct"])  # edits the copy
    assert second.exit_code == 0, second.output
    assert "copy of the packaged" not in second.output
    cfg = load_settings(home / "config.yaml")
    assert cfg.backend("qwen2.5-7b-instruct") is None and cfg.backend(VICTIM) is None
