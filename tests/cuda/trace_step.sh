#!/usr/bin/env bash
# tests/cuda/trace_step.sh: a one-stream decode step's matmul launches laid out in time (docs/performance.md,
# fifty-fifth pass): quill built with GT_TRACE=1 (cuda_gemv_trace.cuh: every one-row matmul block records when it
# started, passed its wait, had x staged, left its loop and finished; the fused conv + rule's blocks their own marks,
# sixty-seventh pass), `quill bench MODEL --backend cuda --prefill '' --contexts 0 --streams '' --steps 16` with
# QUILL_CUDA_TRACE set, then tests/cuda/trace_step.py's tables. The traced build's tokens/s is printed beside an
# untraced build's, so what the records cost shows. GPU machine only.
# Usage: [MODEL=/tmp/m9q4] [BUILD=/tmp/trace] [PLAIN=build-cuda] bash tests/cuda/trace_step.sh  (PLAIN: an untraced
# build's directory, built when it has no quill; MODEL made by quill synth --preset 9b and quantize --bits 4
# --group-size 64 when missing; TRACE_FLAGS: more nvcc flags for the traced build, a probe's macro). Leaves the
# records in $OUT/trace.bin (OUT defaults to /tmp).
set -eu
cd "$(dirname "$0")/../.."
[ -d .debs ] && . tests/cuda/device_deps.sh
out=${OUT:-/tmp}
model=${MODEL:-/tmp/m9q4}
build=${BUILD:-/tmp/trace}
plain=${PLAIN:-build-cuda}
jobs=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
configure() { # dir, extra CUDA flags
  cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=Release -DQUILL_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCMAKE_CUDA_FLAGS="$2" >"$1.cmake.log" 2>&1 || { tail -20 "$1.cmake.log"; exit 1; }
}
configure "$build" "-DGT_TRACE=1 ${TRACE_FLAGS:-}"
case "${TRACE_FLAGS:-}" in *-DGDN_TRACE_END=1*) export GDN_TRACE_END=1 ;; esac # trace_step.py names the rule's marks
[ -x "$plain/quill" ] || configure "$plain" ""
( [ -x "$plain/quill" ] || cmake --build "$plain" -j "$jobs" --target quill >"$out/trace_plain.log" 2>&1 ) &
plain_pid=$!
cmake --build "$build" -j "$jobs" --target quill >"$out/trace_build.log" 2>&1 || { tail -20 "$out/trace_build.log"; exit 1; }
wait "$plain_pid" || { tail -20 "$out/trace_plain.log"; exit 1; }
if [ ! -d "$model" ]; then
  "$build/quill" synth --preset 9b "$model.bf16" >/dev/null && "$build/quill" quantize "$model.bf16" "$model" --bits 4 \
    --group-size 64 >/dev/null
fi
run() { "$@" bench "$model" --backend cuda --prefill '' --contexts 0 --streams '' --steps 16 2>&1 | grep "decode, 1 stream"; }
echo "untraced: $(run "$plain/quill")"
echo "traced:   $(QUILL_CUDA_TRACE="$out/trace.bin" run "$build/quill")"
echo "untraced: $(run "$plain/quill")"
python3 tests/cuda/trace_step.py "$out/trace.bin"
