#!/usr/bin/env bash
# Regenerate the packaged routers with the repo's own command (standard splits: train rows,
# a seeded val slice for early stopping and calibration; test rows are never read). Needs the
# benchmark data (../shared/data or $TOLLGATE_DATA_DIR); embeddings are cached in
# $TOLLGATE_CACHE_DIR.
#   router_core/default_router/      the gateway's router, trained on $TOLLGATE_DEFAULT_DATASET:
#                                    all (default: RouterBench, MMLU-Pro and LLMRouter
#                                    together, experts by canonical id from
#                                    router_core/identity/model_identity.yaml, so the packaged
#                                    config.yaml's open models are trained experts; compare it
#                                    with python -m bench.routing.combined_router) or routerbench
#   router_core/routerbench_router/  RouterBench only, experts by RouterBench's names: what
#                                    `tollgate demo` routes its 11 local models with
# First builds the export of the query encoder the routers are trained with (the registry's
# default, or $TOLLGATE_ENCODER; see router_core/encoders/build.py), then trains on its vectors.
# Then measures each artifact's promise parameters on its own validation prompts (trained
# experts' pseudo-counts, the aggregate prior's n0, the line from published capability to the
# router's scale, each promise's z and τ) and stores them in its router.json
# (scripts/route_promises.py; the artifact's version gets "@promise-<hash>").
# The packaged routes (config.yaml, gateway/sandbox/demo_config.yaml) are promises
# (max_drop), which read those parameters at startup; a route that trades by cost_weight
# instead has its λ chosen by scripts/route_lambdas.py (not run here: no packaged route has one).
# Last, gives each artifact its encoder cascade (scripts/route_cascade.py;
# router_core/tuning/cascade_fit.py): the static encoder's map into MiniLM's space fitted on its
# training prompts, the margin threshold on its validation prompts, so that serving runs MiniLM only
# where the static encoder's decision is not safe (the version gets "@cascade-<hash>"). Set
# TOLLGATE_CASCADE=0 to skip it; TOLLGATE_CASCADE_ONLY=1 runs only this step on the artifacts as
# they are; TOLLGATE_MEASURE_ONLY=1 keeps the trained artifacts and re-measures their promise
# parameters and cascades (after a change to how they are measured). Extra arguments are
# passed to `tollgate train` (e.g. --set epochs=30).
set -euo pipefail
cd "$(dirname "$0")/.."
TOLLGATE="${TOLLGATE:-tollgate}"
PYTHON="${PYTHON:-python}"
DATASET="${TOLLGATE_DEFAULT_DATASET:-all}"
ENCODER="${TOLLGATE_ENCODER:-$("$PYTHON" -c 'from router_core.encoders import DEFAULT_KIND; print(DEFAULT_KIND)')}"
"$PYTHON" -m router_core.encoders.build "$ENCODER" minilm-static
if [ "${TOLLGATE_CASCADE_ONLY:-0}" != 1 ]; then
    if [ "${TOLLGATE_MEASURE_ONLY:-0}" != 1 ]; then
    "$TOLLGATE" train --dataset "$DATASET" --split standard --seed 0 --encoder "$ENCODER" \
        --out router_core/default_router --quiet "$@"
    "$TOLLGATE" train --dataset routerbench --split standard --seed 0 --encoder "$ENCODER" \
        --out router_core/routerbench_router --quiet "$@"
    fi
    "$PYTHON" scripts/route_promises.py --router router_core/default_router --write
    "$PYTHON" scripts/route_promises.py --router router_core/routerbench_router --write
fi
if [ "${TOLLGATE_CASCADE:-1}" != 0 ]; then
    "$PYTHON" scripts/route_cascade.py --router router_core/default_router --write
    "$PYTHON" scripts/route_cascade.py --router router_core/routerbench_router --write
fi
du -sh router_core/default_router router_core/routerbench_router
