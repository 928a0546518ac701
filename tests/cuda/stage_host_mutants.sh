#!/usr/bin/env bash
# tests/cuda/stage_host_mutants.sh: shows that tests/cuda/stage_host.cpp can fail. Each line below puts one deliberate bug
# into a copy of src/backend/cuda/cuda_gemv_stage.cuh, builds stage_host against it and runs it; every one must fail.
# Prints one line a bug and exits non-zero if any passed. Needs only a C++20 compiler (docs/performance.md, fifty-ninth
# pass). Usage: bash tests/cuda/stage_host_mutants.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cxx=${CXX:-c++}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src/backend/cuda"
cp -r "$root/src/backend/backend.h" "$root/src/backend/draw.h" "$work/src/backend/"
cp -r "$root/src/util" "$work/src/"
cp "$root/src/backend/cuda/cuda_gemv_cfg.cuh" "$work/src/backend/cuda/"
survived=0
mut() { # old text, new text, name
  python3 - "$root/src/backend/cuda/cuda_gemv_stage.cuh" "$work/src/backend/cuda/cuda_gemv_stage.cuh" "$1" "$2" <<'PY' || exit 2
import sys
src, dst, old, new = sys.argv[1:5]
text = open(src).read()
if text.count(old) != 1:
    sys.exit(f'stage_host_mutants: not in the source once: {old}')
open(dst, 'w').write(text.replace(old, new))
PY
  "$cxx" -std=c++20 -O1 -ffp-contract=off -pthread -Wno-unknown-pragmas -I"$work/src" "$root/tests/cuda/stage_host.cpp"     -o "$work/stage_host" || exit 2
  if "$work/stage_host" >"$work/out.txt" 2>&1; then
    echo "SURVIVED  $3"; survived=$((survived + 1))
  else
    echo "caught    $3: $(tail -1 "$work/out.txt")"
  fi
}
mut "const float before = __shfl_up_sync(0xffffffffu, sum, 4);" "const float before = __shfl_up_sync(0xffffffffu, sum, 2);" "chain handoff lane"
mut "if (hp == q) {" "if (hp == q - 1) {" "chain handoff part"
mut "m = o < QPI ? 4 * (o / QPL)" "m = o < QPI ? 2 * (o / QPL)" "gnorm part mask"
mut "m = o < QPI ? 4 * (o / QPL) : d < 4 ? d : d * H;" "m = o < QPI ? 4 * (o / QPL) : d < 4 ? d : d * 4;" "gnorm unit mask"
mut "const int j = 2 * jl + q; /* the lane's own k-steps: its values' indices */" "const int j = 2 * (hp * JPL + jl) + q;" "H2 k-step index"
mut "&& u == 0 && t == 0 && hp == 0) sc[r - row0] = scale;" "&& u == 0 && t == 0 && hp == H - 1) sc[r - row0] = scale + (H > 1 ? 1.0f : 0.0f);" "row scale part"
mut "got[e] = __shfl_xor_sync(0xffffffffu, send[e], 4);" "got[e] = __shfl_xor_sync(0xffffffffu, send[e], 8);" "H4 exchange lane"
mut "b[c] = !role     ? cu_pack_bf16x2(h[c], got[c])" "b[c] = !role     ? cu_pack_bf16x2(got[c], h[c])" "H4 hi pair order"
mut ": hi_only ? 0u" ": hi_only ? 1u" "H4 lo column of bf16 x"
mut "template <int Q> __device__ __forceinline__ int gt_kstep_e0(int j) { return Q ? (j & 1) * 2 + (j >> 1) * 8 : 4 * j; }" "template <int Q> __device__ __forceinline__ int gt_kstep_e0(int j) { return Q ? (j & 1) * 1 + (j >> 1) * 8 : 4 * j; }" "k-step order (layout)"
[ "$survived" -eq 0 ]
