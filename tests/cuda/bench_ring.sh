#!/usr/bin/env bash
# tests/cuda/bench_ring.sh: a chain of dependent one-row 4-bit matmuls as the decode path's launches and as one
# persistent kernel fed by a copying thread an SM through a ring of large stages (bench_ring.cu). Builds each variant
# with nvcc side by side, then runs them one at a time, one table each; the log goes to $OUT.
# RB_VARIANTS="name:flags ..." (default: the base geometry, its units free, and free with no waits), e.g.
# "cw16:-DRB_CW=16" or "ch16:-DRB_CH=16_-DRB_NST=16".
set -u
cd "$(dirname "$0")/../.."
. tests/cuda/bench_lib.sh
log=${OUT:-/tmp}/bench-ring.log
variants=(${RB_VARIANTS:-base: free:-DRB_FREE=1 freenodep:-DRB_FREE=1_-DRB_NODEP=1})
bench_variants bench_ring tests/cuda/bench_ring.cu rb_kernel "${RB_TIMEOUT:-60}" "$log" "${variants[@]}"
