#!/usr/bin/env bash
# Sets up and runs every test: installs packages (Debian, and the openai npm client), builds (the CUDA sources too when nvcc is found),
# runs all of CTest, then builds and runs it all again under ASan + UBSan (leaks too): the unit tests, the goldens,
# the CLI, and the e2e tests with their request fuzz against a sanitized `quill serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh build
(cd tests/e2e && npm ci --no-audit --no-fund --loglevel=error)   # the official openai client
(cd build && ctest --output-on-failure -j "$(nproc)")
bash scripts/build.sh build-asan -DQUILL_SANITIZE=ON -DQUILL_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
   ctest --output-on-failure -j "$(nproc)" -LE cuda)
