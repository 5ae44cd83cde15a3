#!/usr/bin/env bash
# Installs requirements.lock into the environment of PYTHON with every file's sha256 checked
# (pip --require-hashes), then, when given, the project itself without dependencies.
#   scripts/install_locked.sh PYTHON [pip install arguments for the project, e.g. -e .]
# torch's CPU build first: from a local wheel folder when pip's configuration has one holding
# it (find-links, /opt/wheels on this kind of machine; no index is asked), else from the
# PyTorch CPU index. The lock pins torch==X+cpu with the wheel's hash, the same file in both
# places, so the CPU build is what installs with or without a GPU (the gateway embeds on the
# CPU) and never PyPI's multi-GB CUDA build.
# The lock is complete (scripts/lock.sh), so nothing is resolved: --no-deps everywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:?usage: scripts/install_locked.sh PYTHON [project install options]}
shift
LOCK=${TOLLGATE_LOCK:-requirements.lock}
pip=("$PY" -m pip install --quiet --no-deps --require-hashes)
torch_req=$(mktemp)
trap 'rm -f "$torch_req"' EXIT
# the torch entry of the lock: its line and its hash lines
awk '/^torch==/{p=1; print; next} p && /^ +--hash/{print; next} {p=0}' "$LOCK" > "$torch_req"
if ! "${pip[@]}" --no-index -r "$torch_req" 2>/dev/null; then
  "${pip[@]}" --index-url https://download.pytorch.org/whl/cpu -r "$torch_req"
fi
"${pip[@]}" -r "$LOCK"
# the project: its build backend (setuptools) came from the lock, so nothing unverified
if [ $# -gt 0 ]; then
  "$PY" -m pip install --quiet --no-deps --no-build-isolation "$@"
fi
