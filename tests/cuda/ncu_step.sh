#!/usr/bin/env bash
# tests/cuda/ncu_step.sh: every kernel of one decode step with its own GPU time (Nsight Compute, one metric,
# caches and clocks left as they run), summed per kernel: the per-kernel table of a step without the CUDA
# events' per-op overhead (`quill bench --profile`). ncu runs the kernels one at a time, so programmatic launch
# does not overlap them: the sum is the step with every kernel's ramp and tail exposed (the real step is shorter;
# `quill bench` gives it). GPU machine only.
# Usage: MODEL=/tmp/m9q4 [STREAMS=16] [METRICS=issue] bash tests/cuda/ncu_step.sh   (STREAMS empty: one stream at
# context 0; METRICS=issue also counts each kernel's warp instructions and DRAM bytes, several replays a kernel)
# Writes $OUT/ncu_step.csv.gz (the raw per-kernel rows) and prints the table (tests/cuda/ncu_step_table.py).
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
model=${MODEL:-/tmp/m9q4}
streams=${STREAMS:-}
ctx=0
[ -n "$streams" ] && ctx=
# --steps 1: two warm-up steps and one measured; the table takes the last step (from its embed kernel on)
metrics=gpu__time_duration.sum
[ "${METRICS:-}" = issue ] && metrics=$metrics,smsp__inst_executed.sum,dram__bytes_read.sum,sm__cycles_elapsed.avg.per_second,device__attribute_multiprocessor_count
ncu --clock-control none --cache-control none --metrics "$metrics" --csv --page raw \
  "${BUILD:-build-cuda}/quill" bench "$model" --backend cuda --prefill '' --contexts "$ctx" --streams "$streams" \
  --steps 1 2>"$out/ncu_step.log" | gzip >"$out/ncu_step.csv.gz" || { tail -20 "$out/ncu_step.log"; exit 1; }
python3 tests/cuda/ncu_step_table.py "$out/ncu_step.csv.gz"
