"""A config value ``os.environ/NAME`` whose variable is unset is an error naming the variable
(one line), not a type error on the None it would have become."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from gateway.cli import main
from gateway.config import ConfigError, load_settings, settings_from_dict


@pytest.fixture(autouse=True)
def _no_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("TOLLGATE_DATABASE_URL", "TOLLGATE_ADMIN_KEY", "TOLLGATE_METRICS_TOKEN",
                "DATABASE_URL", "LITELLM_MASTER_KEY", "METRICS_TOKEN"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize(("raw", "message"), [
    ({"general_settings": {"database_url": "os.environ/DATABASE_URL"}},
     "database_url (from general_settings.database_url): os.environ/DATABASE_URL is not set"),
    ({"database_url": "os.environ/DATABASE_URL"},
     "database_url: os.environ/DATABASE_URL is not set"),
    ({"general_settings": {"master_key": "os.environ/LITELLM_MASTER_KEY"}},
     "admin_key (from general_settings.master_key): os.environ/LITELLM_MASTER_KEY is not set"),
    ({"metrics_token": "os.environ/METRICS_TOKEN"},
     "metrics_token: os.environ/METRICS_TOKEN is not set"),
])
def test_an_unset_variable_is_named(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        settings_from_dict(raw, source="config.yaml")
    text = str(e.value)
    assert text.startswith("config.yaml: ") and message in text and "\n" not in text
    assert "valid string" not in text


def test_a_set_variable_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "sqlite:///x.db")
    s = settings_from_dict({"general_settings": {"database_url": "os.environ/DATABASE_URL"}})
    assert s.database_url == "sqlite:///x.db"


def test_the_environment_override_wins_over_an_unset_reference(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOLLGATE_DATABASE_URL", "sqlite:///y.db")
    s = settings_from_dict({"database_url": "os.environ/DATABASE_URL"})
    assert s.database_url == "sqlite:///y.db"


def test_serve_says_it_in_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("general_settings:\n  database_url: os.environ/DATABASE_URL\n")
    res = CliRunner().invoke(main, ["serve", "--config", str(cfg)])
    assert res.exit_code != 0
    assert res.output.strip() == (
        f"Error: {cfg}: database_url (from general_settings.database_url): "
        "os.environ/DATABASE_URL is not set (export DATABASE_URL=...)")
    with pytest.raises(ConfigError):
        load_settings(cfg)
