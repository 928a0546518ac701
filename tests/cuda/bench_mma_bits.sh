#!/usr/bin/env bash
# tests/cuda/bench_mma_bits.sh: whether wgmma (A from registers) gives the decode matmul's mma.sync sums bit for
# bit, and whether its bits depend on N (bench_mma_bits.cu). Builds it with nvcc (seconds), prints one table.
set -u
cd "$(dirname "$0")/../.."
. tests/cuda/bench_lib.sh
log=${OUT:-/tmp}/bench-mma-bits.log
bench_nvcc bench_mma_bits "$log" -- tests/cuda/bench_mma_bits.cu
bench_run bench_mma_bits "$log" build-bench/bench_mma_bits
