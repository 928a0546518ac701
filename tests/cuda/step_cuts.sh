#!/usr/bin/env bash
# tests/cuda/step_cuts.sh: one-stream decode tokens/s (`quill bench MODEL --backend cuda --prefill '' --contexts 0
# --streams '' --steps 16`) of quill built with parts of the step cut out (tests/cuda/step_cuts.py lists the cuts;
# the values are wrong on purpose, only the times count). GPU only (docs/performance.md, forty-fifth pass).
# VARIANTS="name:cut,cut ...": the builds ("main:" is the tree as it is); MODEL (default /tmp/m9q4, made by quill
# synth --preset 9b and quantize --bits 4 --group-size 64 when missing); REPS runs of each, alternating (default 2);
# BUILD (default /tmp/step_cuts). One build directory serves every variant: a variant rewrites only the files its
# cuts change, so a rebuild recompiles what includes them. Prints one table row per variant.
set -eu
cd "$(dirname "$0")/../.."
[ -d .debs ] && . tests/cuda/device_deps.sh
build=${BUILD:-/tmp/step_cuts}
model=${MODEL:-/tmp/m9q4}
reps=${REPS:-2}
read -r -a variants <<<"${VARIANTS:-main: free:free_unit}"
files="src/backend/cuda/cuda_gemv.cuh src/backend/cuda/cuda_common.cuh"

rm -rf "$build/src" "$build/pristine"
mkdir -p "$build/src" "$build/pristine"
# -m: the copy's files are newer than any object an earlier run built, so the first build recompiles them all
tar --exclude=./.git --exclude=./.debs --exclude=./.carry --exclude='./build*' -cf - . | tar -xmf - -C "$build/src"
for f in $files; do mkdir -p "$build/pristine/$(dirname "$f")"; cp "$f" "$build/pristine/$f"; done
cmake -S "$build/src" -B "$build/b" -DCMAKE_BUILD_TYPE=Release -DQUILL_WERROR=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90a >"$build/cmake.log" 2>&1 || { tail -20 "$build/cmake.log"; exit 1; }

synth=
for v in "${variants[@]}"; do
  name=${v%%:*}; cuts=${v#*:}
  rm -rf "$build/cut"; cp -r "$build/pristine" "$build/cut"
  python3 tests/cuda/step_cuts.py "$build/cut" "$cuts"
  for f in $files; do cmp -s "$build/cut/$f" "$build/src/$f" || cp "$build/cut/$f" "$build/src/$f"; done
  t0=$(date +%s)
  cmake --build "$build/b" -j "$(nproc)" --target quill >"$build/build-$name.log" 2>&1 ||
    { tail -20 "$build/build-$name.log"; echo "$name: build failed"; exit 1; }
  echo "# $name ($cuts): built in $(( $(date +%s) - t0 )) s"
  cp "$build/b/quill" "$build/quill-$name"
  if [ ! -d "$model" ] && [ -z "$synth" ]; then
    m9=$model.bf16 # the bf16 synth the 4-bit copy is made from
    ( "$build/quill-$name" synth --preset 9b "$m9" >/dev/null 2>&1 &&
      "$build/quill-$name" quantize "$m9" "$model" --bits 4 --group-size 64 >/dev/null ) &
    synth=$!
  fi
done
[ -z "$synth" ] || wait "$synth"

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | sed 's/^/# /'
declare -A got
for r in $(seq "$reps"); do
  for v in "${variants[@]}"; do
    name=${v%%:*}
    line=$("$build/quill-$name" bench "$model" --backend cuda --prefill '' --contexts 0 --streams '' --steps 16 2>&1 |
      grep "decode, 1 stream" || echo "| | failed | |")
    got[$name]="${got[$name]:-}$(echo "$line" | awk -F'|' '{gsub(/ /, "", $3); gsub(/ /, "", $4); print $3 " (floor " $4 ")"}') "
  done
done
echo "| variant | cuts | tokens/s, one stream, runs alternating |"
echo "|---|---|---|"
for v in "${variants[@]}"; do echo "| ${v%%:*} | ${v#*:} | ${got[${v%%:*}]}|"; done
