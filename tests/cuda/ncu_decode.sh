#!/usr/bin/env bash
# tests/cuda/ncu_decode.sh: Nsight Compute on the decode matmuls of a real decode step (GPU machine).
# Profiles COUNT consecutive launches of kernels matching KERNEL (default: the tensor-core decode matmul),
# after skipping SKIP of them (default 200: past the warm-up, inside a step), in
#   quill bench MODEL --backend cuda --prefill '' --contexts 0 --streams '' --steps 2
# and writes $OUT/ncu_decode.txt (the details page: launch, occupancy, throughput, warp states) and
# $OUT/ncu_decode_sass.csv (per-instruction stall samples of the first profiled kernel; tests/cuda/ncu_sass_mix.py
# sums it by unit loop and once-per-warp work).
# ARGS replaces the bench's context options (default "--contexts 0"), e.g. "--kv-type bf16 --contexts 32768";
# STREAMS profiles an aggregate step instead (e.g. 64: the many-row kernels; ARGS then defaults to "--contexts ''").
# Usage: MODEL=/tmp/m9q4 [SKIP=200] [COUNT=4] [KERNEL=regex:gemv_tc_kernel] [ARGS=...] bash tests/cuda/ncu_decode.sh
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
model=${MODEL:-/tmp/m9q4}
rep=/tmp/ncu_decode
streams=${STREAMS:-}
ctx=0
[ -n "$streams" ] && ctx=
read -r -a args <<<"${ARGS:-}"
[ -n "${ARGS:-}" ] || args=(--contexts "$ctx")
ncu --clock-control none --set full --import-source yes -k "${KERNEL:-regex:gemv_tc_kernel}" \
  --launch-skip "${SKIP:-200}" --launch-count "${COUNT:-4}" -f -o "$rep" \
  "${BUILD:-build-cuda}/quill" bench "$model" --backend cuda --prefill '' "${args[@]}" --streams "$streams" --steps 2 \
  >"$out/ncu_decode.log" 2>&1 || { tail -20 "$out/ncu_decode.log"; exit 1; }
ncu -i "$rep.ncu-rep" --page details >"$out/ncu_decode.txt" 2>&1
ncu -i "$rep.ncu-rep" --page source --csv --print-source sass --launch-count 1 >"$out/ncu_decode_sass.csv" 2>&1
grep -E "gemv_tc_kernel|attention_|kv_write|Duration|Registers Per|Achieved Occupancy|Memory Throughput|DRAM Throughput|Executed Ipc A|Grid Size|Block Limit" \
  "$out/ncu_decode.txt" | head -80
