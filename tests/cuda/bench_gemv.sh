#!/usr/bin/env bash
# tests/cuda/bench_gemv.sh: builds tests/cuda/bench_gemv.cu with nvcc (cudart only) and runs it on the
# GPU: checks (f64 reference, poisoned outputs, EXACT(batch) bitwise) and timings of the decode matmul
# (the tensor-core kernel vs the old SIMT gemv). Prints one table (< 80 lines); exit 0 when every check passes.
set -eu
cd "$(dirname "$0")/../.."
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
bin=${OUT:-/tmp}/bench_gemv
"$nvcc" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Isrc -Werror=all-warnings -Xptxas -v \
  tests/cuda/bench_gemv.cu -o "$bin" 2>"$bin.ptxas.txt" || { cat "$bin.ptxas.txt"; exit 1; }
grep -A3 "Compiling entry function .*gemv_tc" "$bin.ptxas.txt" | grep -E "Compiling|Used|spill" | sed -e "s/.*function ._Z[0-9]*//" -e "s/EEvPKf.*//" -e "s/^ *//" -e "s/, used 1 barriers.*//" | paste - - - | head -12
"$bin"
