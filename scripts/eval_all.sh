#!/usr/bin/env bash
# Evaluate every router on the five benchmark runs and print the combined table.
#
#   scripts/eval_all.sh [OUT_DIR]      (default: ${TMPDIR:-/tmp}/tollgate-eval)
#   PARALLEL=1 scripts/eval_all.sh     (the five runs at once; same results, seeded)
#   SEED=1 scripts/eval_all.sh         (another seed: val slice, probes, initialisation,
#                                       MMLU-Pro's test draw, the held-out unseen models)
#
# Runs `tollgate eval` on routerbench, mmlu-pro and llmrouter (standard split) and on
# mmlu-pro ood and unseen-models; each writes OUT_DIR/<dataset>-<split>.{json,png}.
# Needs the benchmark data ($TOLLGATE_DATA_DIR or ../shared/data). The first run embeds
# every prompt (cached in $TOLLGATE_CACHE_DIR); later runs take a few minutes each.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-${TMPDIR:-/tmp}/tollgate-eval}"
mkdir -p "$OUT"
# The project's Python: $PYTHON, else the install script's .venv, else python3 on PATH.
if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"; elif [ -x .venv/bin/python ]; then PY=.venv/bin/python;
else PY=python3; fi

RUNS=(
  "routerbench standard"
  "mmlu-pro standard"
  "llmrouter standard"
  "mmlu-pro ood"
  "mmlu-pro unseen-models"
)
files=()
pids=()
one() {  # dataset split
  local name="$1-$2" start=$SECONDS
  echo "== tollgate eval --dataset $1 --split $2" >&2
  "$PY" -c 'from gateway.cli import main; main()' eval --dataset "$1" --split "$2" --seed "${SEED:-0}" --quiet \
    --json "$OUT/$name.json" --plot "$OUT/$name.png" >"$OUT/$name.txt" 2>"$OUT/$name.log"
  echo "   $name done in $((SECONDS - start)) s" >&2
}
for run in "${RUNS[@]}"; do
  set -- $run
  files+=("$OUT/$1-$2.json")
  if [ "${PARALLEL:-0}" = 1 ]; then one "$1" "$2" & pids+=($!); else one "$1" "$2"; fi
done
for pid in "${pids[@]}"; do wait "$pid"; done
"$PY" -m router_core.evaluation.summary "${files[@]}"
