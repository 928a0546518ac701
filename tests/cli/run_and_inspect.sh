#!/usr/bin/env bash
# CLI checks of `quill run` and `quill inspect` on the bundled model and the golden fixtures.
# usage: run_and_inspect.sh QUILL_BINARY SOURCE_DIR
set -u
quill=$1
src=$2
fails=0
pass=0
check() { # name, then a command that must succeed
  local name=$1; shift
  if "$@"; then pass=$((pass + 1)); else echo "FAIL: $name"; fails=$((fails + 1)); fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run on the bundled model: 8 ids on one line, speed on stderr (--ignore-eos: a trained default
# model may end its reply early)
out=$("$quill" run --prompt-ids 1,2,3 -n 8 --ignore-eos 2>"$tmp/err")
check "run bundled exits 0" test $? -eq 0
check "run prints 8 ids" bash -c "echo '$out' | grep -Eq '^[0-9]+( [0-9]+){7}$'"
check "run prints tokens/s" grep -q "tokens/s" "$tmp/err"

# the same greedy ids through the CLI as the golden test expects (fixture a, prompt 1)
fx=$src/tests/fixtures/models/flat-3gdn1attn
if [ -f "$fx/goldens.json" ]; then
  ids=$(python3 -c "import json;g=json.load(open('$fx/goldens.json'))['prompts'][1];print(','.join(map(str,g['ids'])));print(' '.join(map(str,g['greedy'])))" 2>/dev/null)
  if [ -n "$ids" ]; then
    prompt=$(echo "$ids" | sed -n 1p); want=$(echo "$ids" | sed -n 2p)
    got=$("$quill" run "$fx" --prompt-ids "$prompt" -n 32 --ignore-eos 2>/dev/null)
    check "run reproduces transformers' greedy ids" test "$got" = "$want"
  fi
fi

# --dump-logits writes vocab float32s
"$quill" run --prompt-ids 5 -n 1 --dump-logits "$tmp/l.f32" 2>/dev/null >/dev/null
vocab=$("$quill" inspect 2>/dev/null | sed -n 's/.*vocab \([0-9]*\).*/\1/p' | head -1)
check "dump-logits size" test "$(stat -c %s "$tmp/l.f32")" -eq $((vocab * 4))

# sampling is reproducible for a seed
a=$("$quill" run --prompt-ids 1,2 -n 16 --temperature 0.9 --top-p 0.9 --seed 42 2>/dev/null)
b=$("$quill" run --prompt-ids 1,2 -n 16 --temperature 0.9 --top-p 0.9 --seed 42 2>/dev/null)
check "seeded sampling reproducible" test "$a" = "$b"

# --kv-type f32 (the default is bf16): a greedy run completes (8 ids); a bad type is a usage error
out=$("$quill" run --prompt-ids 1,2,3 -n 8 --ignore-eos --kv-type f32 2>/dev/null)
check "run --kv-type f32 prints 8 ids" bash -c "echo '$out' | grep -Eq '^[0-9]+( [0-9]+){7}$'"
"$quill" run --prompt-ids 1 --kv-type f16 >/dev/null 2>&1; check "run --kv-type f16 -> 2" test $? -eq 2
# --kv-type q8 (8-bit codes and a scale per head): the greedy ids of a short prompt match bf16's on this model
q8=$("$quill" run --prompt-ids 1,2,3 -n 8 --ignore-eos --kv-type q8 2>/dev/null)
b16=$("$quill" run --prompt-ids 1,2,3 -n 8 --ignore-eos 2>/dev/null)
check "run --kv-type q8 prints 8 ids" bash -c "echo '$q8' | grep -Eq '^[0-9]+( [0-9]+){7}$'"
check "run --kv-type q8: the same greedy ids as bf16" test "$q8" = "$b16"
# --gdn-state-type bf16: a greedy run completes (8 ids); a bad type is a usage error
gs=$("$quill" run --prompt-ids 1,2,3 -n 8 --ignore-eos --gdn-state-type bf16 2>/dev/null)
check "run --gdn-state-type bf16 prints 8 ids" bash -c "echo '$gs' | grep -Eq '^[0-9]+( [0-9]+){7}$'"
"$quill" run --prompt-ids 1 --gdn-state-type f16 >/dev/null 2>&1; check "run --gdn-state-type f16 -> 2" test $? -eq 2

# errors: usage errors exit 2, runtime errors exit 1 with a message
"$quill" run --prompt-ids 1,,2 >/dev/null 2>"$tmp/e1"; check "bad ids -> 2" test $? -eq 2
"$quill" run --prompt-ids 1 -n -3 >/dev/null 2>&1; check "negative -n -> 2" test $? -eq 2
"$quill" run --prompt-ids 1 --top-p 0 >/dev/null 2>&1; check "top-p 0 -> 2" test $? -eq 2
"$quill" run "$tmp/none" --prompt-ids 1 >/dev/null 2>"$tmp/e2"; check "missing model -> 1" test $? -eq 1
check "missing model named" grep -q "$tmp/none" "$tmp/e2"
"$quill" run --prompt-ids 999999999 >/dev/null 2>"$tmp/e3"; check "token out of vocab -> 1" test $? -eq 1
check "token out of vocab message" grep -q "vocabulary" "$tmp/e3"
"$quill" frobnicate >/dev/null 2>&1; check "unknown command -> 2" test $? -eq 2

# a truncated checkpoint is refused with the file named, no crash
mkdir -p "$tmp/trunc"
cp "$src/models/qwen35-tiny/config.json" "$tmp/trunc/"
head -c 5000 "$src/models/qwen35-tiny/model.safetensors" >"$tmp/trunc/model.safetensors"
"$quill" run "$tmp/trunc" --prompt-ids 1 >/dev/null 2>"$tmp/e4"; rc=$?
check "truncated checkpoint -> 1" test $rc -eq 1
check "truncated checkpoint names the file" grep -q "model.safetensors" "$tmp/e4"

# inspect
"$quill" inspect >"$tmp/inspect" 2>&1; check "inspect exits 0" test $? -eq 0
check "inspect shows layers" grep -q "gated deltanet" "$tmp/inspect"
check "inspect shows K/V per token" grep -q "K/V per token" "$tmp/inspect"
"$quill" inspect --kv-type f32 >"$tmp/ib" 2>&1
kib() { sed -n 's/.*K\/V per token *\([0-9.]*\) KiB.*/\1/p' "$1"; }
check "inspect --kv-type f32: twice the default (bf16) K/V per token" \
  python3 -c "import sys; a, b = float('$(kib "$tmp/inspect")'), float('$(kib "$tmp/ib")'); sys.exit(abs(b - 2 * a) > 0.11)"
"$quill" inspect --kv-type q8 >"$tmp/i8" 2>&1
check "inspect --kv-type q8: over half and under 0.6x the bf16 K/V per token (codes, then a scale per head)" \
  python3 -c "import sys; a, b = float('$(kib "$tmp/inspect")'), float('$(kib "$tmp/i8")'); sys.exit(not (a / 2 < b < 0.6 * a))"
"$quill" inspect --gdn-state-type bf16 >"$tmp/is" 2>&1
gdn() { sed -n 's/.*GDN state per stream *\([0-9.]*\) MiB.*/\1/p' "$1"; }
check "inspect --gdn-state-type bf16: bf16 states, between half and 0.6x the default's GDN state per stream" \
  bash -c "grep -q 'bf16 states' '$tmp/is' && python3 -c \"import sys; a, b = float('$(gdn "$tmp/inspect")'), float('$(gdn "$tmp/is")'); sys.exit(not (a / 2 < b < 0.6 * a))\""
"$quill" inspect "$src/tests/fixtures/models/gqa4-v2k-mlx4" >"$tmp/i2" 2>&1
check "inspect MLX model shows affine" grep -q "MLX affine" "$tmp/i2"

echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
