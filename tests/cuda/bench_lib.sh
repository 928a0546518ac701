# tests/cuda/bench_lib.sh: sourced by the device benches' scripts (bench_attn.sh, bench_gdn.sh,
# bench_gemm.sh). bench_run NAME LOG CMD...: a comment line naming the GPU (clocks, temperature, power),
# then CMD with its output on the screen and appended to LOG, then "# NAME: rc R, S s"; returns R.
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
