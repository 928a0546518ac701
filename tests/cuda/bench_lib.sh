# tests/cuda/bench_lib.sh: sourced by the device benches' scripts (bench_attn.sh, bench_gdn.sh,
# bench_gemm.sh). bench_run NAME LOG CMD...: a comment line naming the GPU (clocks, temperature, power),
# then CMD with its output on the screen and appended to LOG, then "# NAME: rc R, S s"; returns R.
# bench_build BUILD LOG TARGET: configures BUILD (Release) and builds TARGET, output to LOG; on failure
# prints LOG's tail and "build failed" and exits 1.
# bench_variants: the variants of one nvcc bench built side by side, then run (below).
# bench_cmake NAME: the device's packages (when .debs is here), build=$BUILD (default build-cuda),
# log=$OUT/bench-NAME.log (emptied), then bench_build of target bench_NAME.
bench_cmake() {
  [ -d .debs ] && . tests/cuda/device_deps.sh
  build=${BUILD:-build-cuda}
  log=${OUT:-/tmp}/bench-$1.log
  : >"$log"
  bench_build "$build" "$log" "bench_$1"
}
bench_build() {
  if ! { cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=Release -DQUILL_WERROR=OFF >>"$2" 2>&1 &&
         cmake --build "$1" -j "$(nproc)" --target "$3" >>"$2" 2>&1; }; then
    tail -30 "$2"; echo "build failed"; exit 1
  fi
}
# bench_nvcc NAME LOG FLAGS... -- SOURCES...: builds build-bench/NAME from SOURCES with nvcc for sm_90a (warnings are
# errors, FLAGS before -Isrc), output to LOG (emptied); on failure prints LOG's tail and "build failed" and exits 1.
bench_nvcc() {
  local name=$1 log=$2 flags=()
  shift 2
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  : >"$log"
  mkdir -p build-bench
  if ! "${NVCC:-/usr/local/cuda/bin/nvcc}" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Werror=all-warnings \
       "${flags[@]}" -Isrc "$@" -o "build-bench/$name" >>"$log" 2>&1; then
    tail -30 "$log"; echo "build failed"; exit 1
  fi
}
# bench_variants NAME SRC KERNEL TIMEOUT LOG VARIANT...: builds build-bench/NAME_V from SRC for each VARIANT "V:flags"
# (flags joined by _, e.g. "q4:-DWS_Q=64_-DWS_FREE=1") side by side, then runs each (KERNEL's registers and spills
# from ptxas first), at most TIMEOUT seconds each (a hang), output appended to LOG.
bench_variants() {
  local name=$1 src=$2 kernel=$3 limit=$4 log=$5 v vn flags
  shift 5
  for v in "$@"; do
    vn=${v%%:*}; flags=${v#*:}; flags=${flags//_-/ -}
    rm -f "build-bench/${name}_$vn" # a failed build must not leave an older binary to run
    bench_nvcc "${name}_$vn" "$log.$vn" -Xptxas -v $flags -- "$src" &
  done
  wait
  for v in "$@"; do
    vn=${v%%:*}
    [ -x "build-bench/${name}_$vn" ] || { echo "$name $vn: build failed"; tail -20 "$log.$vn"; continue; }
    grep -A3 -E "Compiling.*$kernel" "$log.$vn" | grep -E "registers|spill"
    bench_run "$name $vn" "$log" timeout "$limit" "build-bench/${name}_$vn"
  done
}
bench_run() {
  local name=$1 log=$2 t0 rc
  shift 2
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader 2>/dev/null |
    sed 's/^/# /'
  t0=$(date +%s)
  "$@" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  echo "# $name: rc $rc, $(( $(date +%s) - t0 )) s"
  return "$rc"
}
