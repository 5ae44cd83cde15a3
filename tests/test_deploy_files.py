"""The Dockerfile and docker-compose.yml, checked for structure.

docker cannot run on the development machine, so neither file is built or started here:
these tests read them and check what the deployment relies on. Each check names the
reason it exists."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _dockerfile() -> list[str]:
    """Instructions with continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def _index(lines: list[str], pattern: str) -> int:
    return next(i for i, ln in enumerate(lines) if re.search(pattern, ln))


def test_dependencies_are_installed_before_the_source_is_copied() -> None:
    lines = _dockerfile()
    deps = _index(lines, r"^RUN .*pip install -r /tmp/requirements.txt")
    assert _index(lines, r"^COPY pyproject.toml ") < deps  # only pyproject.toml before it
    for src in ("gateway", "router_core", "migrations"):
        assert _index(lines, rf"^COPY {src} ") > deps  # a code change keeps the layer
    assert "optional-dependencies']['fingerprints']" in lines[deps]  # models add in the image
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "fingerprints" in project["optional-dependencies"]
    assert re.search(r"pip install --no-deps \.$", lines[_index(lines, r"^RUN pip install --no-deps \.")])


def test_health_check_is_readiness_and_the_data_directory_is_writable() -> None:
    lines = _dockerfile()
    health = lines[_index(lines, r"^HEALTHCHECK ")]
    assert "/ready" in health and "/health'" not in health
    user = _index(lines, r"^USER tollgate")
    assert _index(lines, r"chown tollgate /data") < user
    env = " ".join(ln for ln in lines if ln.startswith("ENV "))
    assert "TOLLGATE_HOME=/data" in env and "TOLLGATE_SPOOL_DIR=/data/spool" in env
    assert lines[_index(lines, r"^WORKDIR ")] == "WORKDIR /app"
    assert [ln for ln in lines if ln.startswith("WORKDIR")][-1] == "WORKDIR /data"
    assert "cp /app/config.yaml config.yaml" in lines[_index(lines, r"^CMD ")]


def test_compose_runs_two_replicas_on_postgres_and_redis() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    replicas = {n: s for n, s in services.items() if s.get("image") == "tollgate:latest"}
    assert len(replicas) == 2
    ports = set()
    for name, svc in replicas.items():
        env = svc["environment"]
        assert env["TOLLGATE_DATABASE_URL"].startswith("postgresql://")
        assert "@postgres:5432/" in env["TOLLGATE_DATABASE_URL"]
        assert env["TOLLGATE_REDIS_URL"].startswith("redis://redis:6379")
        assert env["TOLLGATE_ADMIN_KEY"].startswith("${TOLLGATE_ADMIN_KEY:?")
        assert svc["depends_on"] == {"postgres": {"condition": "service_healthy"},
                                     "redis": {"condition": "service_healthy"}}
        assert "tollgate-data:/data" in svc["volumes"], name
        ports.add(svc["ports"][0].split(":")[0])
    assert len(ports) == 2  # each replica on its own host port
    spools = {s["environment"]["TOLLGATE_SPOOL_DIR"] for s in replicas.values()}
    assert len(spools) == 2  # two replicas never append to one spool file
    pg, redis = services["postgres"], services["redis"]
    assert pg["image"].startswith("postgres:") and "pg_isready" in " ".join(
        pg["healthcheck"]["test"])
    assert redis["image"].startswith("redis:") and "ping" in redis["healthcheck"]["test"]
    env = pg["environment"]
    url = f"postgresql://{env['POSTGRES_USER']}:{env['POSTGRES_PASSWORD']}@postgres:5432/" \
          f"{env['POSTGRES_DB']}"
    assert all(s["environment"]["TOLLGATE_DATABASE_URL"] == url for s in replicas.values())
    assert set(compose["volumes"]) >= {"tollgate-data", "postgres-data"}
