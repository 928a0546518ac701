#!/usr/bin/env bash
# tools/train/eval_acceptance.sh: the bundled pair's acceptance lengths on held-out code (GPU machine):
# re-collects the corpus (deterministic: the same held-out files as the training run), then
# evaluate.py --acceptance-only on models/qwen35-pycoder + models/qwen35-pycoder-dflash, blocks of 16
# and 8 at temperature 0. TOK: the training run's tok/ folder (tokens.json). Writes $OUT/eval_acceptance.json.
set -eu
cd "$(dirname "$0")/../.."
W=${WORK:-/tmp/quill-eval}
OUT=${OUT:-/tmp}
mkdir -p "$W"
python3 tools/train/corpus.py --out "$W/corpus" >"$W/corpus.log" 2>&1
python3 tools/train/evaluate.py --tok "${TOK:-build-train/returned/tok}" --corpus "$W/corpus" \
  --target models/qwen35-pycoder --drafter models/qwen35-pycoder-dflash --out "$OUT/eval_acceptance.json" \
  --acceptance-only --n-accept "${N_ACCEPT:-16}" --max-new "${MAX_NEW:-128}"
