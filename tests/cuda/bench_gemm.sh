#!/usr/bin/env bash
# tests/cuda/bench_gemm.sh: the prefill GEMM (matmul_prefill) on the GPU machine: accuracy against a
# float64 reference, bitwise EXACT(batch) across call sizes, and speed, for the 9B model's shapes in
# bf16 and MLX 4-bit (group 64), split (default) and bf16 (QUILL_PREFILL_PRECISION=bf16) modes, plus the
# old tiled kernel on one shape. Builds bench_gemm in $BUILD (default build-cuda), prints one table
# (under 40 lines), keeps the log in $OUT. Exits non-zero on any failed check.
# Tuning knobs it passes through: QUILL_GEMM_REF_M (the row count the algorithm is chosen at, 512),
# QUILL_GEMM_WS_MB (cuBLASLt workspace limit, 32; used only where no algorithm without one exists).
# The selection's trace (every candidate and why it was refused) goes to $OUT/gemm-trace.txt(.gz)
# unless QUILL_GEMM_TRACE names another file.
set -u
cd "$(dirname "$0")/../.."
. tests/cuda/bench_lib.sh
bench_cmake gemm
trace=${QUILL_GEMM_TRACE:-${OUT:-/tmp}/gemm-trace.txt}
rm -f "$trace" "$trace.gz"
bench_run bench_gemm "$log" env QUILL_GEMM_TRACE="$trace" "$build/bench_gemm"
rc=$?
[ -s "$trace" ] && echo "# selection trace: $(wc -l <"$trace") lines in $trace.gz" && gzip -f "$trace"
exit $rc
