#!/usr/bin/env bash
# CTest's cuda_stage_host: builds tests/cuda/stage_host.cpp with the host's C++ compiler and runs it, so that the
# decode matmul's staging of x (src/backend/cuda/cuda_gemv_stage.cuh) is checked where no GPU is. Skips (77) where
# no C++ compiler is found. STAGE_HOST_CXXFLAGS: more flags (the sanitized build's CTest passes ASan + UBSan).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cxx=${CXX:-c++}
command -v "$cxx" >/dev/null 2>&1 || { echo "stage_host: no C++ compiler ($cxx)"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$cxx" -std=c++20 -O1 -ffp-contract=off -pthread -Wall -Wextra -Wno-unknown-pragmas -Werror ${STAGE_HOST_CXXFLAGS:-} \
  -I"$root/src" "$root/tests/cuda/stage_host.cpp" -o "$out/stage_host"
"$out/stage_host"
