#!/usr/bin/env bash
# tools/train/device_pipeline.sh: the whole demo-pair pipeline in one call on the GPU machine
# (one H200, no network; python3 with torch, transformers, tokenizers, safetensors, numpy).
#
#   TRAIN_SECONDS=300 DRAFT_SECONDS=120 bash tools/train/device_pipeline.sh
#
# Carry .debs (quill's Debian libraries). Stages, each timed and logged; a failed stage skips the
# stages that need it, and the report and packing always run:
#   deps + CPU build of quill (background) | corpus | tokenizer + encoding | target training |
#   pack the target checkpoint into $OUT at once | quill quantize target | drafter training against
#   the 4-bit target | quill quantize drafter | evaluate (held-out loss, samples, acceptance 8/16) |
#   goldens (CPU float32 from the dequantized bundles) + quill's own check | report + pack
# Env: TRAIN_SECONDS (300), DRAFT_SECONDS (120), TOTAL_SECONDS (560: the budgets shrink to fit it),
#   RESUME (a directory to continue the target from: build-train/target of an earlier call on the
#   same machine, weights + optimizer; or models/qwen35-pycoder, the 4-bit bundle, on a new machine),
#   RESUME_DRAFTER (default: the drafter beside RESUME), CORPUS_MB (240), WORK (build-train),
#   TOK_REUSE (a directory whose tokenizer to keep instead of training one), and extra arguments
#   TARGET_ARGS, DRAFTER_ARGS, EVAL_ARGS (tests/smoke_local.sh runs the same script on toy sizes).
# $OUT gets pipeline.log, report.md, target.tar.NN, final.tgz.NN (and bundle.tgz.NN when it fits);
# tools/train/unpack.sh puts them in place in the repository.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PIPELINE_T0=${PIPELINE_T0:-$(date +%s.%N)}
OUT=${OUT:-/tmp/quill-train-out}
W=${WORK:-build-train}
TRAIN_SECONDS=${TRAIN_SECONDS:-300}
DRAFT_SECONDS=${DRAFT_SECONDS:-120}
TOTAL_SECONDS=${TOTAL_SECONDS:-560}
RESUME=${RESUME:-}
RESUME_DRAFTER=${RESUME_DRAFTER:-}
T=tools/train
mkdir -p "$OUT" "$W"
exec > >(tee -a "$OUT/pipeline.log") 2>&1
: >"$W/stages.tsv"
export TOKENIZERS_PARALLELISM=true OMP_NUM_THREADS=${OMP_NUM_THREADS:-16} PYTHONUNBUFFERED=1

now() { python3 -c "import time; print(int(time.time() - $PIPELINE_T0))"; }
failed=""
# stage NAME NEEDS CMD...: runs CMD unless a stage named in NEEDS (space-separated) failed.
stage() {
  local name=$1 needs=$2; shift 2
  for n in $needs; do
    case " $failed " in *" $n "*) echo "[$(now)s] == $name: skipped ($n failed)"; printf '%s\tskipped\t0\n' "$name" >>"$W/stages.tsv"; failed="$failed $name"; return 1;; esac
  done
  echo "[$(now)s] == $name"
  local t0; t0=$(date +%s)
  "$@"
  local rc=$?
  local dt=$(( $(date +%s) - t0 ))
  if [ $rc -eq 0 ]; then printf '%s\tok\t%d\n' "$name" "$dt" >>"$W/stages.tsv"
  else printf '%s\tFAILED (exit %d)\t%d\n' "$name" "$rc" "$dt" >>"$W/stages.tsv"; failed="$failed $name"
       echo "[$(now)s] !! $name FAILED (exit $rc)"; fi
  return $rc
}
budget() { # budget WANT RESERVE: min(WANT, TOTAL - elapsed - RESERVE)
  local left=$(( TOTAL_SECONDS - $(now) - $2 ))
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}

env_info() {
  python3 - "$W/env.json" <<'EOF'
import json, platform, subprocess, sys
info = {"python": platform.python_version()}
for m in ("torch", "transformers", "tokenizers", "safetensors", "numpy"):
    try:
        info[m] = __import__(m).__version__
    except Exception as e:  # noqa: BLE001
        info[m] = f"missing ({e})"
try:
    import torch
    info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
except Exception:  # noqa: BLE001
    info["gpu"] = "?"
json.dump(info, open(sys.argv[1], "w"), indent=1)
print(info)
bad = [m for m in ("torch", "transformers", "tokenizers", "numpy") if str(info[m]).startswith("missing")]
sys.exit(1 if bad else 0)
EOF
}
build_quill() {
  [ -d .debs ] && . tests/cuda/device_deps.sh
  cmake -S . -B build-cpu -DCMAKE_BUILD_TYPE=Release -DQUILL_CUDA=OFF -DQUILL_WERROR=OFF && \
    cmake --build build-cpu -j "$(nproc)" --target quill
}
quantize() { # quantize SRC DST
  rm -rf "$2" && mkdir -p "$(dirname "$2")" && build-cpu/quill quantize "$1" "$2" --bits 4 --group-size 64
}

# ---------------------------------------------------------------- stages
stage env "" env_info
[ -d .debs ] && . tests/cuda/device_deps.sh   # the libraries quill needs at run time, too
( build_quill >"$W/build.log" 2>&1; echo $? >"$W/build.rc" ) &
build_pid=$!

TOKREUSE=${TOK_REUSE:-}
if [ -n "$RESUME" ]; then
  if [ -f "$RESUME/hf/tokenizer.json" ]; then TOKREUSE="$RESUME/hf"; else TOKREUSE="$RESUME"; fi
  [ -f "$TOKREUSE/tokenizer.json" ] || { echo "RESUME=$RESUME has no tokenizer.json"; exit 1; }
  if [ -z "$RESUME_DRAFTER" ]; then
    if [ -d "$(dirname "$RESUME")/drafter" ] && [ -f "$RESUME/full.pt" ]; then RESUME_DRAFTER=$(dirname "$RESUME")/drafter
    elif [ -d "${RESUME%/}-dflash" ]; then RESUME_DRAFTER=${RESUME%/}-dflash; fi
  fi
  echo "resuming the target from $RESUME (tokenizer $TOKREUSE), the drafter from ${RESUME_DRAFTER:-scratch}"
fi
if [ -n "$RESUME" ] && [ -f "$W/tok/tokens.json" ] && cmp -s "$W/tok/tokenizer.json" "$TOKREUSE/tokenizer.json"; then
  echo "corpus and tokens of $W kept (same tokenizer)"
else
  stage corpus "env" python3 $T/corpus.py --out "$W/corpus" --max-mb "${CORPUS_MB:-240}"
  stage tokenizer "corpus" python3 $T/tok.py --corpus "$W/corpus" --out "$W/tok" ${TOKREUSE:+--reuse "$TOKREUSE"}
fi

TS=$(budget "$TRAIN_SECONDS" $((DRAFT_SECONDS + 110)))  # + the stages after: ~110 s
echo "target training budget: $TS s"
[ "$TS" -ge 30 ] || { echo "no time left to train"; failed="$failed time_target"; }
stage target "tokenizer time_target" python3 $T/train_target.py --tok "$W/tok" --out "$W/target" --seconds "$TS" \
  ${RESUME:+--resume "$RESUME"} ${TARGET_ARGS:-}
stage pack_target "target" python3 $T/pack.py target --work "$W" --out "$OUT"

wait "$build_pid"
build_ok() { [ "$(cat "$W/build.rc" 2>/dev/null)" = 0 ] || { tail -30 "$W/build.log"; return 1; }; }
stage build "" build_ok
stage quantize_target "target build" quantize "$W/target/hf" "$W/bundle/qwen35-pycoder"
[ -f "$W/target/hf/quill-train.json" ] && [ -d "$W/bundle/qwen35-pycoder" ] && cp "$W/target/hf/quill-train.json" "$W/bundle/qwen35-pycoder/"

DS=$(budget "$DRAFT_SECONDS" 80)  # evaluate ~40 s, goldens ~20 s, packing
echo "drafter training budget: $DS s"
[ "$DS" -ge 20 ] || { echo "no time left to train the drafter"; failed="$failed time_drafter"; }
stage drafter "quantize_target time_drafter" python3 $T/train_drafter.py --tok "$W/tok" --target "$W/bundle/qwen35-pycoder" \
  --out "$W/drafter" --seconds "$DS" ${RESUME_DRAFTER:+--resume "$RESUME_DRAFTER"} ${DRAFTER_ARGS:-}
stage quantize_drafter "drafter build" quantize "$W/drafter" "$W/bundle/qwen35-pycoder-dflash"

left=$(( TOTAL_SECONDS - $(now) ))
if [ "$left" -ge 55 ]; then EV="--n-accept 16 --max-new 128"; else EV="--n-accept 8 --max-new 64 --windows 64"; fi
EV="$EV --budget $(( left > 80 ? left - 35 : 45 ))"
DR=""  # the drafter bundle when it was made (evaluate and goldens cover the target alone otherwise)
case " $failed " in *" quantize_drafter "*|*" drafter "*) ;; *) DR="$W/bundle/qwen35-pycoder-dflash";; esac
stage evaluate "quantize_target" python3 $T/evaluate.py --tok "$W/tok" --corpus "$W/corpus" \
  --target "$W/bundle/qwen35-pycoder" ${DR:+--drafter "$DR"} --bf16 "$W/target/hf" --out "$W/eval.json" $EV ${EVAL_ARGS:-}
stage goldens "quantize_target" python3 $T/make_goldens.py --target "$W/bundle/qwen35-pycoder" \
  ${DR:+--drafter "$DR"} --corpus "$W/corpus" --out "$W/goldens/pycoder" --quill build-cpu/quill

python3 $T/report.py --work "$W" --out "$OUT/report.md" || echo "report failed"
stage pack_final "" python3 $T/pack.py final --work "$W" --out "$OUT"
python3 $T/report.py --work "$W" --out "$OUT/report.md" || true
echo "[$(now)s] done; failed stages:${failed:- none}"
ls -l "$OUT"
sed -n '/^## Results/,/^## Sample/p' "$OUT/report.md"
[ -z "$failed" ]
