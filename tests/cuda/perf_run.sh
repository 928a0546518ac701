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
FINAL=$OUT                  # what comes back: summary.md and logs.tar.gz only
OUT=/tmp/perf-work          # the sub-scripts' logs and binaries
rm -rf "$OUT" && mkdir -p "$OUT"
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

summary=$FINAL/summary.md   # written as it goes: a timed-out call still brings it back
: >"$summary"
if has tests; then
  stamp "cuda checks"
  BUILD=build-cuda OUT=$OUT bash tests/cuda/run.sh >"$OUT/cuda-checks.txt" 2>&1
  echo "cuda checks rc=$?" >>"$summary"
  tail -14 "$OUT/cuda-checks.txt" >>"$summary"
fi
if has kernels || has gemm; then
  for b in tests/cuda/bench_*.sh; do
    [ -f "$b" ] || continue
    has kernels || [ "$b" = tests/cuda/bench_gemm.sh ] || continue
    stamp "$b"
    timeout 120 bash "$b" >"$OUT/$(basename "$b" .sh).txt" 2>&1
    echo "## $b rc=$?" >>"$summary"
    tail -45 "$OUT/$(basename "$b" .sh).txt" >>"$summary"
  done
fi
if has tune; then
  stamp tune_gemv
  echo "## tune_gemv" >>"$summary"
  timeout 200 bash tests/cuda/tune_gemv.sh >>"$summary" 2>&1
fi
if has bench9b || has profile || has prefill; then
  stamp "synth + quantize 9b"
  m=/tmp/m9
  [ -d $m ] || build-cuda/quill synth --preset 9b $m >>"$log" 2>&1
  [ -d ${m}q4 ] || build-cuda/quill quantize $m ${m}q4 --bits 4 --group-size 64 >>"$log" 2>&1
fi
q() { # label, env..., quill bench args...: one bench line group into the summary
  local label=$1; shift
  stamp "$label"
  echo "## $label" >>"$summary"
  timeout 200 env "$@" >>"$summary" 2>>"$log"
  echo "rc=$?" >>"$summary"
}
if has prefill; then
  for w in $m ${m}q4; do
    B="build-cuda/quill bench $w --backend cuda --contexts '' --streams ''"
    q "prefill $w split, chunk 4096" X=1 $B --prefill 4096 --prefill-chunk 4096
    q "prefill $w bf16, chunk 4096" QUILL_PREFILL_PRECISION=bf16 $B --prefill 4096 --prefill-chunk 4096
    q "prefill $w bf16, chunk 512" QUILL_PREFILL_PRECISION=bf16 $B --prefill 4096
  done
fi
if has bench9b; then
  for w in $m ${m}q4; do
    B="build-cuda/quill bench $w --backend cuda"
    q "decode $w" X=1 $B --prefill '' --contexts 0,32768 --streams 4,16,64 --steps 16
    q "decode $w, no graphs" QUILL_CUDA_GRAPHS=0 $B --prefill '' --contexts 0 --streams 64 --steps 16
    q "prefill $w split" X=1 $B --contexts '' --streams '' --prefill 512,4096,16384
    q "prefill $w bf16" QUILL_PREFILL_PRECISION=bf16 $B --contexts '' --streams '' --prefill 512,4096,16384
    q "prefill $w bf16, chunk 4096" QUILL_PREFILL_PRECISION=bf16 $B --contexts '' --streams '' --prefill 4096 --prefill-chunk 4096
  done
  q "cold 65536 ${m}q4 bf16" QUILL_PREFILL_PRECISION=bf16 build-cuda/quill bench ${m}q4 --backend cuda --grow-prefill 65536
  q "cold 65536 ${m}q4 split" X=1 build-cuda/quill bench ${m}q4 --backend cuda --grow-prefill 65536
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
tar -C "$OUT" -czf "$FINAL/logs.tar.gz" --exclude=bench_gemv . 2>/dev/null
cat "$summary"
