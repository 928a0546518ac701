#!/usr/bin/env bash
# tests/cuda/bench_head.sh: one row's greedy id from the lm_head's 8-bit sketch (head_argmax) against the full bf16
# head (bench_head.cu), on synth's uniform weights, with outlier channels in h, and on Gaussian weights. Builds it,
# prints one table each, keeps the log in $OUT.
set -u
cd "$(dirname "$0")/../.."
. tests/cuda/bench_lib.sh
bench_cmake head
bench_run "bench_head synth" "$log" "$build/bench_head"
HEAD_OUTLIER=8 bench_run "bench_head synth, outliers" "$log" "$build/bench_head"
HEAD_GAUSS=1 bench_run "bench_head Gaussian" "$log" "$build/bench_head"
