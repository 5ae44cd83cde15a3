#!/usr/bin/env bash
# Refreshes requirements.lock: every package the gateway, its tests and the fingerprints extra
# install, pinned with its sha256 hashes, for Linux x86_64 and Python 3.11.
#   scripts/lock.sh              keep every pin still allowed, add what is new (deterministic)
#   scripts/lock.sh --upgrade    take the newest releases pyproject.toml allows
#   LOCK_OUT=FILE scripts/lock.sh ...   write FILE instead (scripts/try_latest.sh)
# Needs uv (a tool, not in the lock): `.venv/bin/pip install uv` or `pipx install uv`.
# Reaches PyPI for hashes it has not seen; the pins already in the lock are kept (uv reads the
# existing file as its preferences), so rerunning it after a dependency is added to
# pyproject.toml changes only that dependency and what it pulls in.
# torch's CPU build is read from a local wheel folder when one holds it (pip's find-links,
# /opt/wheels on this kind of machine), else downloaded once from the PyTorch CPU index; the
# wheel is the same file, so the lock's one hash covers both.
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-$(command -v uv || echo .venv/bin/uv)}
if ! [ -x "$UV" ] && ! command -v "$UV" >/dev/null 2>&1; then
  echo "scripts/lock.sh needs uv: .venv/bin/pip install uv (or set UV=/path/to/uv)" >&2
  exit 1
fi
TORCH=$(grep -E '^torch==' scripts/lock.in | cut -d' ' -f1)
WHEELS=${TORCH_WHEELS:-/opt/wheels}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! ls "$WHEELS"/torch-"${TORCH#torch==}"-cp311-*.whl >/dev/null 2>&1; then
  WHEELS=$tmp/wheels
  python3 -m pip download --quiet --no-deps --only-binary :all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 --index-url https://download.pytorch.org/whl/cpu \
    -d "$WHEELS" "$TORCH"
fi
common=(--generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28
        --no-config --custom-compile-command "scripts/lock.sh")
# uv keeps the pins of the file it writes to: start from the current lock without its
# no-deps tail, which is appended again below.
OUT=${LOCK_OUT:-requirements.lock}
if [ -f "$OUT" ]; then
  sed '/^# --- installed without their dependencies/,$d' "$OUT" > "$tmp/requirements.lock"
fi
"$UV" pip compile --quiet "${common[@]}" "$@" --find-links "$WHEELS" \
  --extra test --extra fingerprints -o "$tmp/requirements.lock" pyproject.toml scripts/lock.in
"$UV" pip compile --quiet "${common[@]}" --no-deps --no-header -o "$tmp/nodeps.lock" \
  scripts/lock_nodeps.in
{
  sed "s#$WHEELS#WHEELS#g" "$tmp/requirements.lock"
  echo "# --- installed without their dependencies (scripts/lock_nodeps.in) ---"
  cat "$tmp/nodeps.lock"
} > "$OUT"
echo "$OUT: $(grep -cE '^[a-zA-Z0-9]' "$OUT") packages" >&2
