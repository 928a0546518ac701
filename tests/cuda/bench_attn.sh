#!/usr/bin/env bash
# tests/cuda/bench_attn.sh: prompt-row attention on the GPU machine, 9B shape (16/4 heads, dim 256):
# the old per-(row, head) kernel vs the flash kernel (cuda_flash_prefill.cu) in bf16 and split mode, one
# seq of 512, 4096, 16384 rows, and 65536 rows as 16 calls of 4096 (bench_attn.cu says what each column
# is). Builds bench_attn with nvcc straight from the sources (no cmake, ~1 min on 16 cores: sm_90a only)
# unless $BENCH_ATTN names a built binary; prints one table; keeps the log in $OUT. Non-zero on failure.
set -u
cd "$(dirname "$0")/../.."
. tests/cuda/bench_lib.sh
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
bin=${BENCH_ATTN:-build-bench/bench_attn}
log=${OUT:-/tmp}/bench-attn.log
: >"$log"
if [ ! -x "$bin" ]; then
  mkdir -p "$(dirname "$bin")"
  if ! "$nvcc" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Werror=all-warnings -Isrc \
       tests/cuda/bench_attn.cu src/backend/cuda/cuda_flash_prefill.cu src/backend/cuda/cuda_attention_tc.cu src/util/status.c -o "$bin" >>"$log" 2>&1; then
    tail -30 "$log"; echo "build failed"; exit 1
  fi
fi
bench_run bench_attn "$log" "$bin"
