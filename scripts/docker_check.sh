#!/usr/bin/env bash
# Where a Docker engine runs (not on this kind of development machine, whose docker is only a
# client): builds the image, starts it, waits for /ready (the router loaded, the database
# reachable), then checks docker-compose.yml with `docker compose config`. Exit 0 only if
# all of that passed. CI with Docker runs it as it is: scripts/docker_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if ! docker info >/dev/null 2>&1; then
  echo "scripts/docker_check.sh: no Docker engine answers here (docker info failed)" >&2
  exit 1
fi
tag=tollgate:check-$$
name=tollgate-check-$$
port=${PORT:-14000}
cleanup() { docker rm -f "$name" >/dev/null 2>&1 || true; docker image rm "$tag" >/dev/null 2>&1 || true; }
trap cleanup EXIT
docker build -t "$tag" .
docker run -d --name "$name" -p "127.0.0.1:$port:4000" -e TOLLGATE_ADMIN_KEY=sk-check-admin "$tag"
for _ in $(seq 1 120); do
  if curl -fsS "http://127.0.0.1:$port/ready" >/dev/null 2>&1; then
    echo "image ready: $(curl -fsS "http://127.0.0.1:$port/ready")"
    TOLLGATE_ADMIN_KEY=sk-check docker compose config --quiet
    echo "docker-compose.yml: valid"
    exit 0
  fi
  sleep 2
done
docker logs "$name" | tail -40 >&2
echo "scripts/docker_check.sh: /ready did not answer 200 within 240 s" >&2
exit 1
