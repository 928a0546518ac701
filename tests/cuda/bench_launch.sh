#!/usr/bin/env bash
# tests/cuda/bench_launch.sh: the cost of one kernel boundary in a chain of dependent launches (plain,
# programmatic dependent launch, a graph), see bench_launch.cu. Builds it with nvcc (seconds), prints one
# table, keeps the log in $OUT.
set -u
cd "$(dirname "$0")/../.."
. tests/cuda/bench_lib.sh
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
bin=build-bench/bench_launch
log=${OUT:-/tmp}/bench-launch.log
: >"$log"
mkdir -p build-bench
if ! "$nvcc" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Werror=all-warnings -Isrc \
     tests/cuda/bench_launch.cu src/util/status.c -o "$bin" >>"$log" 2>&1; then
  tail -30 "$log"; echo "build failed"; exit 1
fi
bench_run bench_launch "$log" "$bin"
