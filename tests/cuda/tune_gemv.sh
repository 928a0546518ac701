#!/usr/bin/env bash
# tests/cuda/tune_gemv.sh: the decode matmul bench (bench_gemv.cu) built with several geometries
# (cuda_gemv.cuh's GT_* knobs: tiles, blocks, slice, ring depth), n = 1, 16 and 64 rows, to pick the defaults. GPU only.
# VARIANTS="name:flags ..." replaces the list; flags go before -Isrc, so "ref:-I.carry/ref/src" builds the bench
# against another revision's headers copied there (an A/B of two versions of the kernel in one run).
set -u
cd "$(dirname "$0")/../.."
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
dir=${OUT:-/tmp}/tune_gemv
mkdir -p "$dir"
if [ -n "${VARIANTS:-}" ]; then read -r -a variants <<<"$VARIANTS"
else variants=("base:" "wide16:-DGW_MAX_TILES=16" "blk256:-DGT_BLOCKS=256" "q4blk512:-DGT_BLOCKS_Q4=512" "bfd8:-DGT_DEPTH_BF16=8"); fi
for v in "${variants[@]}"; do
  name=${v%%:*}; flags=${v#*:}; flags=${flags//_-/ -} # "a_-Db": two flags (VARIANTS splits on spaces)
  "$nvcc" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a $flags -Isrc tests/cuda/bench_gemv.cu \
    -o "$dir/$name" >"$dir/$name.build.txt" 2>&1 &
done
wait
for v in "${variants[@]}"; do
  name=${v%%:*}
  [ -x "$dir/$name" ] || { echo "$name: build failed"; tail -5 "$dir/$name.build.txt"; continue; }
  echo "## $name ${v#*:}"
  "$dir/$name" >"$dir/$name.txt" 2>&1
  grep -E "^(4096x4096|12288x4096|4096x12288|248320x4096) +(bf16|q4g64) +(1|16|64) " "$dir/$name.txt"
  grep -E "failed checks" "$dir/$name.txt"
done
