#!/usr/bin/env bash
# Regenerate the gateway's default router (router_core/default_router/) with the repo's own
# command, on the RouterBench subset (standard split: its train rows, a seeded val slice for
# early stopping and calibration; test rows are never read). Needs the benchmark data
# (../shared/data or $TOLLGATE_DATA_DIR); embeddings are cached in $TOLLGATE_CACHE_DIR.
# First builds the export of the query encoder the router is trained with (the registry's
# default, or $TOLLGATE_ENCODER; see router_core/encoders/build.py), then trains on its vectors.
# Extra arguments are passed to `tollgate train` (e.g. --set epochs=30).
set -euo pipefail
cd "$(dirname "$0")/.."
TOLLGATE="${TOLLGATE:-tollgate}"
PYTHON="${PYTHON:-python}"
ENCODER="${TOLLGATE_ENCODER:-$("$PYTHON" -c 'from router_core.encoders import DEFAULT_KIND; print(DEFAULT_KIND)')}"
"$PYTHON" -m router_core.encoders.build "$ENCODER"
"$TOLLGATE" train --dataset routerbench --split standard --seed 0 --encoder "$ENCODER" \
    --out router_core/default_router --quiet "$@"
du -sh router_core/default_router
