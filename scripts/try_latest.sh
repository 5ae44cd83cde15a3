#!/usr/bin/env bash
# Tries the newest releases pyproject.toml's ranges allow, before they reach requirements.lock:
# locks them (scripts/lock.sh --upgrade, into a scratch file), installs that lock with its
# hashes checked into a scratch venv, prints what moved, then runs the test suite there.
#   scripts/try_latest.sh [pytest arguments]      e.g. scripts/try_latest.sh -x tests/gateway
# Not part of .ci/run (a new release must not break an unrelated change's CI): run it on a
# schedule, or before `scripts/lock.sh --upgrade`. Needs uv, as scripts/lock.sh does. A new
# litellm release is also named by `tollgate serve`'s startup block when it differs from the
# one tested (gateway/litellm_compat.py).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${TRY_LATEST_DIR:-$(mktemp -d)}
LOCK_OUT="$dir/latest.lock" ./scripts/lock.sh --upgrade
echo "releases newer than requirements.lock's:"
diff <(grep -oE '^[A-Za-z0-9_.-]+==[^ ]+' requirements.lock) \
     <(grep -oE '^[A-Za-z0-9_.-]+==[^ ]+' "$dir/latest.lock") | grep '^>' || echo "  none"
python3 -m venv "$dir/venv"
TOLLGATE_LOCK="$dir/latest.lock" ./scripts/install_locked.sh "$dir/venv/bin/python" -e .
"$dir/venv/bin/python" -m router_core.encoders.build --defaults
"$dir/venv/bin/python" -m pytest "$@"
