#!/usr/bin/env bash
# tests/cuda/run.sh: the CUDA backend's checks, run on the GPU machine (see docs/performance.md and
# tools/goldens/README.md). Builds quill with nvcc (sm_90a), then:
#   1. every CUDA op against the CPU reference on random inputs, and EXACT(batch) on the GPU;
#   2. every model golden (transformers' fp32 logits and greedy tokens) through the CUDA backend;
#   3. the batch-invariance / chunking / prefill-vs-decode tests through the CUDA backend (also on the 4-bit fixture
#      and with the decode matmuls' x in bf16, QUILL_DECODE_PRECISION=bf16, and the 4-bit weights too, =dequant;
#      and the 4-bit prompt GEMM through the dequantization pass, QUILL_PREFILL_DEQUANT=pass);
#   4. K/V that grows through CUDA virtual memory: mapping, a kernel across a boundary, equal tokens
#      with grow on and off; the same tokens and logits with programmatic launch on and off;
#   5. compute-sanitizer memcheck and racecheck on a short `quill run` (skipped with QUILL_CUDA_QUICK=1).
# Prints one table; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/../.."
[ -d .debs ] && . tests/cuda/device_deps.sh
build=${BUILD:-build-cuda}
log=${OUT:-/tmp}/cuda-tests.log
: >"$log"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DQUILL_WERROR=OFF >>"$log" 2>&1 && cmake --build "$build" -j "$(nproc)" --target quill cuda_test_cuda_ops cuda_test_cuda_matmul cuda_test_cuda_rows cuda_test_cuda_head cuda_test_cuda_seq_ops cuda_test_cuda_kvgrow golden_test_model_goldens golden_test_model_batch >>"$log" 2>&1
if [ $? -ne 0 ]; then tail -40 "$log"; echo "build failed"; exit 1; fi
declare -a rows
fails=0
step() { # name, command...
  local name=$1; shift
  local t0=$(date +%s%N)
  echo "== $name" >>"$log"
  "$@" >>"$log" 2>&1
  local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  rows+=("$(printf '| %-52s | %-4s | %6d ms |' "$name" "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$ms")")
  [ $rc -eq 0 ] || fails=$((fails + 1))
}
# the matmuls' binary, then the other ops': command... (env, timeout, a sanitizer) with each appended
ops() { "$@" "$build/cuda_test_cuda_matmul" && "$@" "$build/cuda_test_cuda_ops"; }
step "cuda matmuls and ops vs cpu, batch invariance" ops
step "  the matmuls with the ticket finish only (QUILL_CUDA_GT_CLUSTER=0)" env QUILL_CUDA_GT_CLUSTER=0 \
     "$build/cuda_test_cuda_matmul"
step "cuda attention/GDN vs cpu, batch and chunk invariance" "$build/cuda_test_cuda_seq_ops"
step "  the same with SIMT decode attention (QUILL_CUDA_ATT_TC=0)" env QUILL_CUDA_ATT_TC=0 "$build/cuda_test_cuda_seq_ops"
step "  the same in bf16 prefill mode (QUILL_PREFILL_PRECISION=bf16)" env QUILL_PREFILL_PRECISION=bf16 \
     "$build/cuda_test_cuda_seq_ops"
step "cuda ops, 4-bit prompt GEMM by the pass (QUILL_PREFILL_DEQUANT=pass)" ops env QUILL_PREFILL_DEQUANT=pass
step "cuda ops in bf16 decode mode (QUILL_DECODE_PRECISION=bf16)" ops env QUILL_DECODE_PRECISION=bf16
step "cuda ops in dequant decode mode (QUILL_DECODE_PRECISION=dequant)" ops env QUILL_DECODE_PRECISION=dequant
step "producers' split rows (GLU pair, gated norm, output gate) in every mode" bash -c \
     "'$build/cuda_test_cuda_rows' && QUILL_DECODE_PRECISION=bf16 '$build/cuda_test_cuda_rows' &&
      QUILL_DECODE_PRECISION=dequant '$build/cuda_test_cuda_rows'"
step "greedy id from the lm_head's sketch = argmax (ties, cap, NaN), split and bf16 x" bash -c \
     "'$build/cuda_test_cuda_head' && QUILL_DECODE_PRECISION=bf16 '$build/cuda_test_cuda_head'"
step "K/V grow-as-used through CUDA VMM (exactness, give-back)" "$build/cuda_test_cuda_kvgrow"
step "model goldens via cuda (transformers fp32)" env QUILL_TEST_BACKEND=cuda "$build/golden_test_model_goldens"
step "batch invariance, chunk cuts, prefill=decode (cuda)" env QUILL_TEST_BACKEND=cuda "$build/golden_test_model_batch"
step "  the same on the 4-bit fixture" env QUILL_TEST_MODEL=gqa4-v2k-mlx4 QUILL_TEST_BACKEND=cuda \
     "$build/golden_test_model_batch"
step "  the same, 4-bit prompt GEMM by the pass (QUILL_PREFILL_DEQUANT=pass)" env QUILL_PREFILL_DEQUANT=pass \
     QUILL_TEST_MODEL=gqa4-v2k-mlx4 QUILL_TEST_BACKEND=cuda "$build/golden_test_model_batch"
step "  4-bit fixture goldens, the pass" env QUILL_PREFILL_DEQUANT=pass QUILL_TEST_MODEL=gqa4-v2k-mlx4 \
     QUILL_TEST_BACKEND=cuda "$build/golden_test_model_goldens"
step "  the same in bf16 decode mode (QUILL_DECODE_PRECISION=bf16)" env QUILL_DECODE_PRECISION=bf16 \
     QUILL_TEST_MODEL=gqa4-v2k-mlx4 QUILL_TEST_BACKEND=cuda "$build/golden_test_model_batch"
step "  the same in dequant decode mode (QUILL_DECODE_PRECISION=dequant)" env QUILL_DECODE_PRECISION=dequant \
     QUILL_TEST_MODEL=gqa4-v2k-mlx4 QUILL_TEST_BACKEND=cuda "$build/golden_test_model_batch"
step "model goldens via cpu" env QUILL_TEST_BACKEND=cpu "$build/golden_test_model_goldens"
# the cuBLASLt prompt GEMM (QUILL_PREFILL_GEMM=cublaslt; the default on other GPUs): the same checks through it
step "cuda ops with the cuBLASLt prefill GEMM" ops env QUILL_PREFILL_GEMM=cublaslt
step "model goldens via cuda, cuBLASLt prefill GEMM" env QUILL_PREFILL_GEMM=cublaslt QUILL_TEST_BACKEND=cuda \
     "$build/golden_test_model_goldens"
step "batch invariance, chunk cuts (cuda, cuBLASLt prefill GEMM)" env QUILL_PREFILL_GEMM=cublaslt \
     QUILL_TEST_BACKEND=cuda "$build/golden_test_model_batch"
# programmatic dependent launch changes when kernels start, never what they compute: the same logits bitwise
pdl_same() {
  local d=${OUT:-/tmp}
  "$build/quill" run --backend cuda --prompt-ids 1,2,3,4,5,6,7,8 -n 24 --ignore-eos --dump-logits "$d/pdl1.bin" >"$d/pdl1.txt" &&
    QUILL_CUDA_PDL=0 "$build/quill" run --backend cuda --prompt-ids 1,2,3,4,5,6,7,8 -n 24 --ignore-eos \
      --dump-logits "$d/pdl0.bin" >"$d/pdl0.txt" &&
    cmp "$d/pdl1.txt" "$d/pdl0.txt" && cmp "$d/pdl1.bin" "$d/pdl0.bin"
}
step "decode with and without programmatic launch: same bits" pdl_same
[ "${QUILL_CUDA_QUICK:-0}" = 1 ] || {
step "compute-sanitizer memcheck: quill run (bf16 K/V)" compute-sanitizer --tool memcheck --error-exitcode 9 \
     "$build/quill" run --backend cuda --prompt-ids 1,2,3,4,5,6,7,8 -n 8
step "compute-sanitizer memcheck: quill run, f32 K/V" compute-sanitizer --tool memcheck --error-exitcode 9 \
     "$build/quill" run --backend cuda --kv-type f32 --prompt-ids 1,2,3,4,5,6,7,8 -n 8
step "compute-sanitizer memcheck: quill run, q8 K/V" compute-sanitizer --tool memcheck --error-exitcode 9 \
     "$build/quill" run --backend cuda --kv-type q8 --prompt-ids 1,2,3,4,5,6,7,8 -n 8
step "compute-sanitizer memcheck: quill run, bf16 GDN states" compute-sanitizer --tool memcheck --error-exitcode 9 \
     "$build/quill" run --backend cuda --gdn-state-type bf16 --prompt-ids 1,2,3,4,5,6,7,8 -n 8
step "compute-sanitizer racecheck: quill run, f32 K/V" compute-sanitizer --tool racecheck --error-exitcode 9 \
     "$build/quill" run --backend cuda --kv-type f32 --prompt-ids 1,2,3,4,5,6,7,8 -n 4
step "compute-sanitizer racecheck: quill run (bf16 K/V)" compute-sanitizer --tool racecheck --error-exitcode 9 \
     "$build/quill" run --backend cuda --prompt-ids 1,2,3,4,5,6,7,8 -n 4
# sampled tokens: the draw's kernels, the pick's radix select, ordered ties and bitonic sort in shared memory
for tool in memcheck racecheck; do
  step "compute-sanitizer $tool: quill run sampled (top-k, top-p; whole row, min-p)" bash -c \
       "compute-sanitizer --tool $tool --error-exitcode 9 '$build/quill' run --backend cuda --prompt-ids 1,2,3 -n 8 \
        --temperature 0.8 --top-k 20 --top-p 0.9 && compute-sanitizer --tool $tool --error-exitcode 9 '$build/quill' \
        run --backend cuda --prompt-ids 1,2,3 -n 8 --temperature 0.8 --min-p 0.1"
done
# the seq ops test runs the chunked GDN rule's tensor-core kernels and the flash prefill attention (in bf16 mode
# its double-buffered form): cp.async stages and barriers between phases
step "compute-sanitizer memcheck: cuda seq ops (chunked GDN, flash)" timeout 150 compute-sanitizer --tool memcheck \
     --error-exitcode 9 "$build/cuda_test_cuda_seq_ops"
step "compute-sanitizer racecheck: cuda seq ops (chunked GDN, flash)" timeout 150 compute-sanitizer --tool racecheck \
     --error-exitcode 9 "$build/cuda_test_cuda_seq_ops"
step "compute-sanitizer racecheck: cuda seq ops, bf16 prefill mode" env QUILL_PREFILL_PRECISION=bf16 timeout 150 \
     compute-sanitizer --tool racecheck --error-exitcode 9 "$build/cuda_test_cuda_seq_ops"
# the matmul test runs the decode matmul at 37 and 70 rows (gemv_wide_kernel's cp.async stages), which one stream never
# does
step "compute-sanitizer memcheck: cuda ops (many-row matmul)" ops timeout 150 compute-sanitizer --tool memcheck \
     --error-exitcode 9
step "compute-sanitizer racecheck: cuda ops (many-row matmul)" ops timeout 150 compute-sanitizer --tool racecheck \
     --error-exitcode 9
step "compute-sanitizer memcheck: cuda ops, bf16 decode mode" ops env QUILL_DECODE_PRECISION=bf16 timeout 150 \
     compute-sanitizer --tool memcheck --error-exitcode 9
step "compute-sanitizer racecheck: cuda ops, bf16 decode mode" ops env QUILL_DECODE_PRECISION=bf16 timeout 150 \
     compute-sanitizer --tool racecheck --error-exitcode 9
# the 4-bit fold, the default: TMA stages read by wgmma and by the consumers' loads, the stages' barriers, the 128-row
# tile's ping-pong barriers. memcheck on test_cuda_matmul's prompt matmuls (QUILL_CUDA_TESTS=2,3,4); racecheck there
# passes 280 s (session 44), so it runs on a 4-bit prompt (150 rows in chunks of 100) through each tile, forced
step "compute-sanitizer memcheck: prompt matmuls, the fold's 128-row tile" env QUILL_WQ_TILE=long \
     QUILL_CUDA_TESTS=2,3,4 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
     "$build/cuda_test_cuda_matmul"
for tile in short mid long; do
  step "compute-sanitizer racecheck: a 4-bit prompt through the fold's $tile tile" env QUILL_WQ_TILE=$tile timeout 200 \
       compute-sanitizer --tool racecheck --error-exitcode 9 "$build/quill" run tests/fixtures/models/gqa4-v2k-mlx4 \
       --backend cuda --prompt-ids "$(seq -s, 1 150)" -n 4 --ignore-eos --prefill-chunk 100
done
# the 4-bit dequantization pass's scratch and the wgmma kernel on it
step "compute-sanitizer memcheck: cuda ops, the 4-bit pass" ops env QUILL_PREFILL_DEQUANT=pass timeout 150 \
     compute-sanitizer --tool memcheck --error-exitcode 9
# dequant mode's many-row matmul (gemv_dq_kernel): cp.async stages read by wgmma, sums read across a cluster
step "compute-sanitizer memcheck: cuda ops, dequant decode mode" ops env QUILL_DECODE_PRECISION=dequant timeout 150 \
     compute-sanitizer --tool memcheck --error-exitcode 9
step "compute-sanitizer racecheck: cuda ops, dequant decode mode" ops env QUILL_DECODE_PRECISION=dequant timeout 150 \
     compute-sanitizer --tool racecheck --error-exitcode 9
# the producers' rows: the GLU pair's cluster finish, the gated delta rule's clusters trading quad sums
step "compute-sanitizer memcheck: split rows, dequant decode mode" env QUILL_DECODE_PRECISION=dequant timeout 150 \
     compute-sanitizer --tool memcheck --error-exitcode 9 "$build/cuda_test_cuda_rows"
step "compute-sanitizer racecheck: split rows, dequant decode mode" env QUILL_DECODE_PRECISION=dequant timeout 150 \
     compute-sanitizer --tool racecheck --error-exitcode 9 "$build/cuda_test_cuda_rows"
# the head's sketch: its build, the bounds' block reductions, the candidates' append and gather, the plain matmul launch
step "compute-sanitizer memcheck: the lm_head's sketch" timeout 200 compute-sanitizer --tool memcheck \
     --error-exitcode 9 "$build/cuda_test_cuda_head"
step "compute-sanitizer racecheck: the lm_head's sketch" timeout 200 compute-sanitizer --tool racecheck \
     --error-exitcode 9 "$build/cuda_test_cuda_head"
}
grep -E '^\|' "$log" | grep -v -- '---' | head -60
grep -E "rel err" "$log" | head -40
echo
echo "| check | result | time |"
echo "|---|---|---|"
printf '%s\n' "${rows[@]}"
echo "$(( ${#rows[@]} - fails )) passed, $fails failed"
[ $fails -eq 0 ]
