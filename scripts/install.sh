#!/usr/bin/env bash
# Installs Tollgate into ./.venv from scratch, from requirements.lock with every hash checked
# (scripts/install_locked.sh): the CPU build of torch, then each pinned dependency, then the
# project (editable). `--test` also installs Debian's chromium for the dashboard's browser test
# (the lock already holds the test tools). scripts/lock.sh refreshes the lock.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
./scripts/install_locked.sh .venv/bin/python -e .
if [ "${1:-}" = "--test" ]; then
  # The dashboard's browser test drives Debian's chromium (Playwright never downloads one).
  if ! command -v chromium >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
  fi
fi
# The exports of the default query encoder and of those the packaged routers were trained on
# (MiniLM's ONNX int8), made offline from the packaged MiniLM into $TOLLGATE_CACHE_DIR
# (~/.cache/tollgate), so that the first `tollgate serve` (or test) does not build them.
.venv/bin/python -m router_core.encoders.build --defaults
