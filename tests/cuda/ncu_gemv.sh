#!/usr/bin/env bash
# tests/cuda/ncu_gemv.sh: Nsight Compute on one launch of the many-row decode matmul (gemv_wide_kernel, 4-bit
# g64) inside bench_gemv, for each row-tile count in TILES (default "16 8": bench_gemv built with that
# GW_MAX_TILES). KERNEL=gemv_dq_kernel TILES=8 QUILL_DECODE_PRECISION=dequant profiles dequant mode's 64-row
# kernel instead (its tiles follow the rows; TILES then only names it). Writes $OUT/ncu_gemv_<t>.txt (details
# page), $OUT/ncu_gemv_<t>.csv (per-instruction counts and stall samples) and $OUT/sass_<t>.txt (cuobjdump of the
# kernel). GPU machine only.
set -u
cd "$(dirname "$0")/../.."
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
out=${OUT:-/tmp}
for t in ${TILES:-16 8}; do
  "$nvcc" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -DGW_MAX_TILES="$t" -Isrc tests/cuda/bench_gemv.cu \
    -o "/tmp/bg$t" >"$out/ncu_gemv_$t.build.txt" 2>&1 &
done
wait
for t in ${TILES:-16 8}; do
  k="${KERNEL:-gemv_wide_kernel}ILi64ELi${t}E"
  ncu --clock-control none --set full --import-source yes --kernel-name-base mangled -k "regex:$k" --launch-skip 1 \
    --launch-count 1 -f -o "/tmp/ncu_gemv_$t" "/tmp/bg$t" >"$out/ncu_gemv_$t.log" 2>&1 || tail -5 "$out/ncu_gemv_$t.log"
  ncu -i "/tmp/ncu_gemv_$t.ncu-rep" --page details >"$out/ncu_gemv_$t.txt" 2>&1
  ncu -i "/tmp/ncu_gemv_$t.ncu-rep" --page source --csv --print-source sass >"$out/ncu_gemv_$t.csv" 2>&1
  cuobjdump -sass "/tmp/bg$t" | awk -v k="$k" '/Function : /{p = index($0, k) > 0} p' >"$out/sass_$t.txt"
  grep -E "Duration|Executed Ipc A|Registers Per|Grid Size|Achieved Occupancy" "$out/ncu_gemv_$t.txt"
done
