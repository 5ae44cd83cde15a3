#!/usr/bin/env bash
# Regenerate the gateway's default router (router_core/default_router/) with the repo's own
# command, on the RouterBench subset (standard split: its train rows, a seeded val slice for
# early stopping and calibration; test rows are never read). Needs the benchmark data
# (../shared/data or $TOLLGATE_DATA_DIR); embeddings are cached in $TOLLGATE_CACHE_DIR.
# Extra arguments are passed to `tollgate train` (e.g. --set epochs=30).
set -euo pipefail
cd "$(dirname "$0")/.."
TOLLGATE="${TOLLGATE:-tollgate}"
"$TOLLGATE" train --dataset routerbench --split standard --seed 0 \
    --out router_core/default_router --quiet "$@"
du -sh router_core/default_router
