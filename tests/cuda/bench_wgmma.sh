#!/usr/bin/env bash
# tests/cuda/bench_wgmma.sh: builds tests/cuda/bench_wgmma.cu (nvcc, cudart and cuBLAS) and runs it on the GPU:
# the wgmma prompt GEMM (cuda_gemm_wg.cuh) against float64, cuBLAS and itself at other row counts, and its speed.
# Prints the registers ptxas gave the kernel and one table; exit 0 when every check passes.
set -eu
cd "$(dirname "$0")/../.."
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
bin=${OUT:-/tmp}/bench_wgmma
"$nvcc" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Isrc -Werror=all-warnings -Xptxas -v \
  ${WG_FLAGS:-} tests/cuda/bench_wgmma.cu -lcublas -o "$bin" 2>"$bin.ptxas.txt" || { cat "$bin.ptxas.txt"; exit 1; }
grep -A2 "wg_gemm" "$bin.ptxas.txt" | grep -E "Used|spill" | head -4
"$bin"
