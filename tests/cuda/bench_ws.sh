#!/usr/bin/env bash
# tests/cuda/bench_ws.sh: a chain of dependent one-row bf16 matmuls as the decode path's launches and as one
# persistent kernel with loader warps (bench_ws.cu). Builds it with nvcc, prints one table, keeps the log in $OUT.
# WS_VARIANTS="name:flags ..." builds and runs more geometries (e.g. "cw8:-DWS_CW=8_-DWS_NST=4").
set -u
cd "$(dirname "$0")/../.."
. tests/cuda/bench_lib.sh
log=${OUT:-/tmp}/bench-ws.log
for v in "base:" ${WS_VARIANTS:-}; do
  name=${v%%:*}; flags=${v#*:}; flags=${flags//_-/ -}
  bench_nvcc "bench_ws_$name" "$log.$name" -Xptxas -v $flags -- tests/cuda/bench_ws.cu
  grep -A2 -E "Compiling.*ws_kernel" "$log.$name" | grep -E "registers|spill"
  bench_run "bench_ws $name" "$log" "build-bench/bench_ws_$name"
done
