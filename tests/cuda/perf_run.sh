#!/usr/bin/env bash
# tests/cuda/perf_run.sh: one call on the GPU machine for issue 7's work (run it from the repo root with
# .debs carried). Builds quill for sm_90a, then the parts named in PARTS (default: all), each under its
# own time limit:
#   checks   tests/cuda/run.sh (ops vs CPU, goldens and invariance through CUDA; QUICK=1 skips sanitizers)
#   kernels  every tests/cuda/bench_*.sh;  gemv / gemm / launch ...: only that bench;  tune: tests/cuda/tune_gemv.sh
#   decode   quill bench decode figures on a 9B-shaped model, bf16 and MLX 4-bit g64, graphs off and on
#   prefill  quill bench prefill figures (split and bf16 precision; 4096 and 65536 tokens)
#   p4096    only the prefill 4096 figures of each model, split and bf16 precision
#   profile  quill bench --profile: the per-op GPU time table of a decode step (1 stream, PROFILE_STREAMS: 16 64)
#            and of a prefill (split and bf16 precision; pprofile: the prefill tables alone)
#   ncu      tests/cuda/ncu_decode.sh on the 4-bit model (its reports come back in $OUT)
#   kv8      the 4-bit model's decode with bf16 and q8 K/V caches at contexts 0 and 32768 (1, 16, 64 streams),
#            q8 on the SIMT attention too, its prefill, and the 32k decode step's per-op profile with q8
#   variant  a second quill build with VARIANT_FLAGS (e.g. "-DGT_BLOCKS_Q4=128") and the 4-bit decode figures from
#            both builds, one after the other (an A/B of a kernel knob on the whole model; VARIANT_ARGS: the
#            bench's options, default "--contexts 0 --streams 4,16")
# The summary ($OUT/summary.md) is written as the run goes, so a call cut short still brings it back;
# logs go to $OUT/logs.tar.gz at the end.
set -u
cd "$(dirname "$0")/../.."
FINAL=${OUT:-/tmp/perf-out}
mkdir -p "$FINAL"
OUT=/tmp/perf-work # the sub-scripts' logs and binaries
rm -rf "$OUT" && mkdir -p "$OUT"
PARTS=${PARTS:-"checks kernels decode prefill profile"}
log=$OUT/perf.log
summary=$FINAL/summary.md
: >"$log"
: >"$summary"
[ -d .debs ] && . tests/cuda/device_deps.sh
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
stamp() { echo "[$(date +%T)] $*" | tee -a "$log"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv >>"$summary" 2>&1

if has accept; then # issue 8's acceptance lengths: GPU work of its own while quill builds
  stamp "acceptance (background)"
  ( OUT=$FINAL timeout 200 bash tools/train/eval_acceptance.sh >"$OUT/accept.log" 2>&1; echo "accept rc=$?" >>"$OUT/accept.log" ) &
  accept_pid=$!
fi
stamp build
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DQUILL_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90a >>"$log" 2>&1 &&
  cmake --build build-cuda -j "$(nproc)" >>"$log" 2>&1 || { tail -60 "$log" | tee -a "$summary"; echo "build failed"; exit 1; }

m=/tmp/m9
if has decode || has prefill || has p4096 || has pprofile || has profile || has ncu || has variant || has kv8; then # the model files are made on the CPU while the GPU checks run
  ( [ -d $m ] || build-cuda/quill synth --preset 9b $m >>"$OUT/synth.log" 2>&1
    [ -d ${m}q4 ] || build-cuda/quill quantize $m ${m}q4 --bits 4 --group-size 64 >>"$OUT/synth.log" 2>&1 ) &
  synth_pid=$!
fi
if has checks; then
  stamp "cuda checks"
  BUILD=build-cuda OUT=$OUT timeout 420 bash tests/cuda/run.sh >"$OUT/cuda-checks.txt" 2>&1
  echo "## cuda checks rc=$?" >>"$summary"
  tail -17 "$OUT/cuda-checks.txt" >>"$summary"
fi
for b in tests/cuda/bench_*.sh; do
  name=$(basename "$b" .sh)
  has kernels || has "${name#bench_}" || continue
  stamp "$b"
  OUT=$OUT timeout 120 bash "$b" >"$OUT/$name.txt" 2>&1
  echo "## $b rc=$?" >>"$summary"
  tail -60 "$OUT/$name.txt" >>"$summary"
done
if has tune; then
  stamp tune_gemv
  echo "## tune_gemv" >>"$summary"
  OUT=$OUT timeout 200 bash tests/cuda/tune_gemv.sh >>"$summary" 2>&1
fi
[ -n "${synth_pid:-}" ] && { stamp "waiting for the 9b model files"; wait $synth_pid; }
[ -n "${accept_pid:-}" ] && { stamp "waiting for the acceptance run"; wait $accept_pid; echo "## acceptance" >>"$summary"; grep -E "evaluate:|rc=|Error|error" "$OUT/accept.log" | tail -8 >>"$summary"; }
MODELS=${MODELS:-"$m ${m}q4"}

q() { # limit, label, env..., command: one group of figures into the summary
  local limit=$1 label=$2; shift 2
  stamp "$label"
  echo "## $label" >>"$summary"
  timeout "$limit" env "$@" >>"$summary" 2>>"$log"
  echo "rc=$?" >>"$summary"
}
if has decode; then
  for w in $MODELS; do
    B="build-cuda/quill bench $w --backend cuda"
    q 90 "decode $w" X=1 $B --prefill '' --contexts 0,32768 --streams 4,16,64 --steps 16
    q 40 "decode $w, graphs on" QUILL_CUDA_GRAPHS=1 $B --prefill '' --contexts 0 --streams '' --steps 16
    q 40 "decode $w, PDL off" QUILL_CUDA_PDL=0 $B --prefill '' --contexts 0 --streams 4 --steps 16
    q 90 "decode $w, f32 K/V" X=1 $B --kv-type f32 --prefill '' --contexts 0,32768 --streams 16,64 --steps 16
    q 60 "decode $w, bf16 K/V, SIMT attention" QUILL_CUDA_ATT_TC=0 $B --kv-type bf16 --prefill '' --contexts 0,32768 \
      --streams '' --steps 16
  done
fi
if has prefill; then
  for w in $MODELS; do
    B="build-cuda/quill bench $w --backend cuda"
    q 60 "prefill $w split (default)" X=1 $B --contexts '' --streams '' --prefill 512,4096 --prefill-chunk 4096
    q 60 "prefill $w bf16" QUILL_PREFILL_PRECISION=bf16 $B --contexts '' --streams '' --prefill 512,4096 --prefill-chunk 4096
    q 40 "prefill $w bf16, chunks of 512" QUILL_PREFILL_PRECISION=bf16 $B --contexts '' --streams '' --prefill 4096
    q 60 "prefill $w split, cuBLASLt GEMM" QUILL_PREFILL_GEMM=cublaslt $B --contexts '' --streams '' \
      --prefill 512,4096 --prefill-chunk 4096
    q 60 "prefill $w bf16, cuBLASLt GEMM" QUILL_PREFILL_GEMM=cublaslt QUILL_PREFILL_PRECISION=bf16 $B --contexts '' \
      --streams '' --prefill 512,4096 --prefill-chunk 4096
  done
  q 60 "prefill ${m}q4 split, PDL off" QUILL_CUDA_PDL=0 build-cuda/quill bench ${m}q4 --backend cuda --contexts '' \
    --streams '' --prefill 4096 --prefill-chunk 4096
  q 90 "prefill 65536 ${m}q4 bf16 (one run, chunks of 4096)" QUILL_PREFILL_PRECISION=bf16 \
    build-cuda/quill bench ${m}q4 --backend cuda --contexts '' --streams '' --prefill 65536 --prefill-chunk 4096
  q 90 "prefill 65536 ${m}q4 split (one run, chunks of 4096)" \
    build-cuda/quill bench ${m}q4 --backend cuda --contexts '' --streams '' --prefill 65536 --prefill-chunk 4096
fi
if has p4096; then
  for w in $MODELS; do
    for p in split bf16; do
      q 40 "prefill 4096 $w $p" QUILL_PREFILL_PRECISION=$p build-cuda/quill bench $w --backend cuda --contexts '' \
        --streams '' --prefill 4096 --prefill-chunk 4096
    done
  done
fi
if has profile; then
  q 60 "profile ${m}q4: decode, 1 stream" X=1 build-cuda/quill bench ${m}q4 --backend cuda --profile --prefill '' \
    --contexts 0 --streams '' --steps 8
  for kv in f32 bf16 q8; do
    q 60 "profile ${m}q4: decode, 1 stream at 32k, $kv K/V" X=1 build-cuda/quill bench ${m}q4 --backend cuda --profile \
      --kv-type $kv --prefill '' --contexts 32768 --streams '' --steps 8
  done
  for s in ${PROFILE_STREAMS:-16 64}; do
    q 60 "profile ${m}q4: decode, $s streams" X=1 build-cuda/quill bench ${m}q4 --backend cuda --profile --prefill '' \
      --contexts '' --streams $s --steps 8
  done
fi
if has profile || has pprofile; then # pprofile: the prefill profiles alone
  for p in split bf16; do
    q 60 "profile ${m}q4: prefill 4096, $p" QUILL_PREFILL_PRECISION=$p build-cuda/quill bench ${m}q4 --backend cuda \
      --profile --prefill 4096 --prefill-chunk 4096 --contexts '' --streams ''
  done
fi
if has variant; then
  stamp "variant build: ${VARIANT_FLAGS:-}"
  cmake -S . -B build-var -DCMAKE_BUILD_TYPE=Release -DQUILL_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
    "-DCMAKE_CUDA_FLAGS=${VARIANT_FLAGS:-}" >>"$log" 2>&1 && cmake --build build-var -j "$(nproc)" --target quill >>"$log" 2>&1 ||
    echo "variant build failed" >>"$summary"
  for b in build-cuda build-var; do
    q 60 "decode ${m}q4 with $b (${VARIANT_FLAGS:-})" X=1 $b/quill bench ${m}q4 --backend cuda --prefill '' \
      ${VARIANT_ARGS:---contexts 0 --streams 4,16} --steps 16
  done
fi
if has kv8; then
  B="build-cuda/quill bench ${m}q4 --backend cuda"
  for kv in bf16 q8 bf16 q8; do
    q 90 "decode ${m}q4, $kv K/V" X=1 $B --kv-type $kv --prefill '' --contexts 0,32768 --streams 16,64 --steps 16
  done
  q 60 "decode ${m}q4, q8 K/V, SIMT attention" QUILL_CUDA_ATT_TC=0 $B --kv-type q8 --prefill '' --contexts 0,32768 \
    --streams '' --steps 16
  for p in split bf16; do
    q 60 "prefill 4096 ${m}q4 $p, q8 K/V" QUILL_PREFILL_PRECISION=$p $B --kv-type q8 --contexts '' --streams '' \
      --prefill 4096 --prefill-chunk 4096
  done
  q 60 "profile ${m}q4: decode, 1 stream at 32k, q8 K/V" X=1 $B --profile --kv-type q8 --prefill '' --contexts 32768 \
    --streams '' --steps 8
fi
if has ncu; then
  stamp ncu
  echo "## ncu: decode matmuls of ${m}q4" >>"$summary"
  MODEL=${m}q4 BUILD=build-cuda OUT=$FINAL timeout 240 bash tests/cuda/ncu_decode.sh >>"$summary" 2>&1
  echo "rc=$?" >>"$summary"
fi
stamp done
tar -C "$OUT" -czf "$FINAL/logs.tar.gz" --exclude=bench_gemv --exclude=tune_gemv . 2>/dev/null
cat "$summary"
