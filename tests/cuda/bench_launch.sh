#!/usr/bin/env bash
# tests/cuda/bench_launch.sh: the cost of one kernel boundary in a chain of dependent launches (plain,
# programmatic dependent launch, a graph), see bench_launch.cu. Builds it with nvcc (seconds), prints one
# table, keeps the log in $OUT.
set -u
cd "$(dirname "$0")/../.."
. tests/cuda/bench_lib.sh
log=${OUT:-/tmp}/bench-launch.log
bench_nvcc bench_launch "$log" -- tests/cuda/bench_launch.cu src/util/status.c
bench_run bench_launch "$log" build-bench/bench_launch
