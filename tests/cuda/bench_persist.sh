#!/usr/bin/env bash
# tests/cuda/bench_persist.sh: what the kernel boundaries of a one-row decode step cost: a chain of dependent
# 4-bit matmuls as programmatic launches, as a replayed graph and as one persistent kernel (bench_persist.cu).
# Builds it with nvcc (about a minute), prints one table, keeps the log in $OUT.
set -u
cd "$(dirname "$0")/../.."
. tests/cuda/bench_lib.sh
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
bin=build-bench/bench_persist
log=${OUT:-/tmp}/bench-persist.log
: >"$log"
mkdir -p build-bench
if ! "$nvcc" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Werror=all-warnings -Xptxas -v -Isrc \
     tests/cuda/bench_persist.cu -o "$bin" >>"$log" 2>&1; then
  tail -30 "$log"; echo "build failed"; exit 1
fi
grep -A2 "chain_kernel" "$log" | grep -E "registers|spill" | head -8
bench_run bench_persist "$log" "$bin"
