#!/usr/bin/env bash
# tests/cuda/bench_ws.sh: a chain of dependent one-row matmuls as the decode path's launches and as one persistent
# kernel with loader warps (bench_ws.cu). Builds it with nvcc, prints one table, keeps the log in $OUT.
# WS_VARIANTS="name:flags ..." builds and runs more geometries after the bf16 base (e.g. "cw8:-DWS_CW=8_-DWS_NST=4";
# "q4:-DWS_Q=64" the 4-bit chain in tiles, "q4free:-DWS_Q=64_-DWS_FREE=1" with units that cost nothing); WS_ONLY=...
# runs those alone, without the base ("q4int8:-DWS_Q=64_-DWS_INT8=1": the int8 unit). The builds run side by side,
# then the benches one at a time.
set -u
cd "$(dirname "$0")/../.."
. tests/cuda/bench_lib.sh
log=${OUT:-/tmp}/bench-ws.log
variants=(${WS_ONLY:-base: ${WS_VARIANTS:-}})
bench_variants bench_ws tests/cuda/bench_ws.cu ws_kernel "${WS_TIMEOUT:-90}" "$log" "${variants[@]}"
