#!/usr/bin/env bash
# tests/cuda/perf_run.sh: one call on the GPU machine for issue 7's work (run it from the repo root with
# .debs carried): builds quill for sm_90a, runs the CUDA checks (tests/cuda/run.sh), the kernel
# benchmarks (tests/cuda/bench_*.sh), then `quill bench` on a 9B-shaped model, bf16 and MLX 4-bit g64,
# with and without --profile. PARTS picks steps (default: all): tests kernels bench9b profile.
# Everything goes to $OUT/perf.log; the summary (tables) is printed last.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/perf-out}
mkdir -p "$OUT"
PARTS=${PARTS:-"tests kernels bench9b profile"}
log=$OUT/perf.log
: >"$log"
[ -d .debs ] && . tests/cuda/device_deps.sh
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
stamp() { echo "[$(date +%T)] $*" | tee -a "$log"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv >>"$log" 2>&1

stamp build
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DQUILL_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90a >>"$log" 2>&1 &&
  cmake --build build-cuda -j "$(nproc)" >>"$log" 2>&1 || { tail -60 "$log"; echo "build failed"; exit 1; }

summary=$OUT/summary.md
: >"$summary"
if has tests; then
  stamp "cuda checks"
  BUILD=build-cuda OUT=$OUT bash tests/cuda/run.sh >"$OUT/cuda-checks.txt" 2>&1
  echo "cuda checks rc=$?" >>"$summary"
  tail -14 "$OUT/cuda-checks.txt" >>"$summary"
fi
if has kernels; then
  for b in tests/cuda/bench_*.sh; do
    [ -f "$b" ] || continue
    stamp "$b"
    timeout 120 bash "$b" >"$OUT/$(basename "$b" .sh).txt" 2>&1
    echo "## $b rc=$?" >>"$summary"
    tail -45 "$OUT/$(basename "$b" .sh).txt" >>"$summary"
  done
fi
if has bench9b || has profile; then
  stamp "synth + quantize 9b"
  m=/tmp/m9
  [ -d $m ] || build-cuda/quill synth --preset 9b $m >>"$log" 2>&1
  [ -d ${m}q4 ] || build-cuda/quill quantize $m ${m}q4 --bits 4 --group-size 64 >>"$log" 2>&1
fi
if has bench9b; then
  for w in $m ${m}q4; do
    stamp "bench $w"
    echo "## quill bench $w ${BENCH_ARGS:-}" >>"$summary"
    timeout 240 build-cuda/quill bench $w --backend cuda ${BENCH_ARGS:-} >>"$summary" 2>>"$log"
    echo "rc=$?" >>"$summary"
  done
fi
if has profile; then
  for w in $m ${m}q4; do
    stamp "profile $w"
    echo "## quill bench $w --profile (decode 1 and 64 streams, prefill 4096)" >>"$summary"
    timeout 120 build-cuda/quill bench $w --backend cuda --profile --prefill 4096 --contexts 0 --streams 64 \
      --steps 8 >>"$summary" 2>>"$log"
    echo "rc=$?" >>"$summary"
  done
fi
stamp done
cat "$summary"
