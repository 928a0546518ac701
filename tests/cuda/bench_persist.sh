#!/usr/bin/env bash
# tests/cuda/bench_persist.sh: what the kernel boundaries of a one-row decode step cost: a chain of dependent
# 4-bit matmuls as programmatic launches, as a replayed graph, as one persistent kernel, and as launches that do not
# wait for the whole op before them (bench_persist.cu).
# Builds it with nvcc (about a minute), prints one table, keeps the log in $OUT.
set -u
cd "$(dirname "$0")/../.."
. tests/cuda/bench_lib.sh
log=${OUT:-/tmp}/bench-persist.log
bench_nvcc bench_persist "$log" -Xptxas -v -- tests/cuda/bench_persist.cu
grep -A2 -E "Compiling.*(chain|ahead|flow)_kernel" "$log" | grep -E "registers|spill"
bench_run bench_persist "$log" build-bench/bench_persist
