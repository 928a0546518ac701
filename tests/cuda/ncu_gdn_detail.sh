#!/usr/bin/env bash
# tests/cuda/ncu_gdn_detail.sh: ncu's full sections for one gdn_prep_kernel and one gdn_scan launch of bench_gdn's
# 1 x 4096 case (the 9B layer shape) on the GPU machine: duration, throughput (SM, L1, L2, DRAM), occupancy,
# warp stall reasons, as ncu prints them (key lines only). Needs $BUILD/bench_gdn (bench_gdn.sh builds it).
# SKIP: launches of each kernel to skip first (default 20: past the 1 x 512 case).
set -u
cd "$(dirname "$0")/../.."
build=${BUILD:-build-cuda}
for k in gdn_prep gdn_scan; do
  echo "## $k"
  ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section LaunchStats --section ComputeWorkloadAnalysis -k regex:$k --launch-skip "${SKIP:-20}" --launch-count 1 \
    "$build/bench_gdn" 2>/dev/null |
    grep -E "gdn_|Duration|Throughput|Occupancy|Active Warps|Stall|Registers|Shared Memory Config|Block Limit|Waves|Executed Ipc|Issue Slots|Hit Rate|Busy|Bandwidth|Warp Cycles" |
    grep -v "^ *$" | head -60
done
