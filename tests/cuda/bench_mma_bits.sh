#!/usr/bin/env bash
# tests/cuda/bench_mma_bits.sh: whether wgmma (A from registers) gives the decode matmul's mma.sync sums bit for
# bit, and whether its bits depend on N (bench_mma_bits.cu). Builds it with nvcc (seconds), prints one table.
set -u
cd "$(dirname "$0")/../.."
. tests/cuda/bench_lib.sh
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
bin=build-bench/bench_mma_bits
log=${OUT:-/tmp}/bench-mma-bits.log
: >"$log"
mkdir -p build-bench
if ! "$nvcc" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Werror=all-warnings -Isrc \
     tests/cuda/bench_mma_bits.cu -o "$bin" >>"$log" 2>&1; then
  tail -30 "$log"; echo "build failed"; exit 1
fi
bench_run bench_mma_bits "$log" "$bin"
