#!/usr/bin/env bash
# tests/cuda/bench_gemv_int.sh: builds and runs tests/cuda/bench_gemv_int.cu (the exact-integer decode matmul
# prototype, one row, 4-bit g64) on the GPU machine, once per VARIANTS entry "name:flags" (flags joined by
# "_-"; default: ring depths 8 and 4, and 8 with the two-phase turn). Prints one table per variant; exit 0 when every check passes.
set -eu
cd "$(dirname "$0")/../.."
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
for v in ${VARIANTS:-"d8:-DGI_D=8" "d4:-DGI_D=4" "d8two:-DGI_D=8_-DGI_TWO_PHASE=1"}; do
  d=${v%%:*}; flags=${v#*:}; flags=${flags//_-/ -}
  bin=${OUT:-/tmp}/bench_gemv_int_$d
  "$nvcc" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Isrc -Werror=all-warnings -Xptxas -v $flags \
    tests/cuda/bench_gemv_int.cu -o "$bin" 2>"$bin.ptxas.txt" || { cat "$bin.ptxas.txt"; exit 1; }
  echo "## $d ($flags): $(grep -A2 'gemv_int_kernel' "$bin.ptxas.txt" | grep -oE 'Used [0-9]+ registers|[0-9]+ bytes spill stores' | paste -sd ' ')"
  "$bin"
done
