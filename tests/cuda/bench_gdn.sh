#!/usr/bin/env bash
# tests/cuda/bench_gdn.sh: the gated delta rule for prompt rows on the GPU machine, recurrent (old) vs
# chunked (src/backend/cuda/cuda_gdn_chunked.cu), on the 9B GDN layer shape; see bench_gdn.cu. Twice: the
# default (three tf32 products per product) and bf16 prefill mode (one). Builds bench_gdn in $BUILD (default
# build-cuda), prints two tables, keeps the log in $OUT.
# Exits non-zero on a failed check.
set -u
cd "$(dirname "$0")/../.."
. tests/cuda/bench_lib.sh
bench_cmake gdn
bench_run bench_gdn "$log" "$build/bench_gdn" || rc=1
echo "# QUILL_PREFILL_PRECISION=bf16: one tf32 product in the chunked rule"
QUILL_PREFILL_PRECISION=bf16 bench_run bench_gdn "$log" "$build/bench_gdn" || rc=1
exit ${rc:-0}
