#!/usr/bin/env bash
# tests/cuda/bench_gdn.sh: the gated delta rule for prompt rows on the GPU machine, recurrent (old) vs
# chunked (src/backend/cuda/cuda_gdn_chunked.cu), on the 9B GDN layer shape; see bench_gdn.cu. Builds
# libquillcore in $BUILD (default build-cuda), links bench_gdn with nvcc, prints one table (under 40
# lines), keeps the log in $OUT. Exits non-zero on a failed check.
set -u
cd "$(dirname "$0")/../.."
[ -d .debs ] && . tests/cuda/device_deps.sh
build=${BUILD:-build-cuda}
log=${OUT:-/tmp}/bench-gdn.log
: >"$log"
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if ! { cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DQUILL_WERROR=OFF >>"$log" 2>&1 &&
       cmake --build "$build" -j "$(nproc)" --target quillcore >>"$log" 2>&1 &&
       "$nvcc" -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc tests/cuda/bench_gdn.cu -o "$build/bench_gdn" \
         -Xlinker --start-group "$build/libquillcore.a" "$build/libquillcuda.a" -Xlinker --end-group \
         $(pkg-config --libs jansson libpcre2-8 libutf8proc 2>/dev/null || echo -ljansson -lpcre2-8 -lutf8proc) \
         -lmicrohttpd -ldl -lpthread -lm >>"$log" 2>&1; }; then
  tail -30 "$log"; echo "build failed"; exit 1
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader 2>/dev/null | sed 's/^/# /'
t0=$(date +%s)
"$build/bench_gdn" 2>&1 | tee -a "$log"
rc=${PIPESTATUS[0]}
echo "# bench_gdn: rc $rc, $(( $(date +%s) - t0 )) s"
exit $rc
