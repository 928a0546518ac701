#!/usr/bin/env bash
# CLI checks of `quill tokenize`: the ids SOURCE.md records as Hugging Face's for a Qwen3.5 chat prompt,
# --chat rendering with the Qwen3.5 template (thinking off by default in the 0.8B template), --ids,
# --pieces, --file with arbitrary bytes, and errors.
# usage: tokenize.sh QUILL_BINARY SOURCE_DIR
set -u
quill=$1
src=$2
tok=$src/../shared/data/qwen35-tokenizer
pass=0
fails=0
check() {
  local name=$1; shift
  if "$@"; then pass=$((pass + 1)); else echo "FAIL: $name"; fails=$((fails + 1)); fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

want="248045 846 198 9419 11 1204 513 488 30 248046 198 248045 74455 198 248068 271 248069 271"
got=$("$quill" tokenize "$tok" $'<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n')
check "Qwen3.5 ids as HF" test "$got" = "$want"

echo '{"messages":[{"role":"user","content":"Hello, how are you?"}]}' >"$tmp/req.json"
"$quill" tokenize "$tok" --chat "$tmp/req.json" >"$tmp/prompt"
printf '<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' >"$tmp/want"
check "--chat renders the template" cmp -s "$tmp/prompt" "$tmp/want"
got=$("$quill" tokenize "$tok" --chat "$tmp/req.json" --ids)
check "--chat --ids" test "$got" = "$want"

printf 'caf\xc3\xa9 \xff\xfe ok' >"$tmp/bytes"
got=$("$quill" tokenize "$tok" --file "$tmp/bytes")
check "--file with invalid UTF-8 gives ids" bash -c "echo '$got' | grep -Eq '^[0-9]+( [0-9]+)+$'"
check "--pieces prints id and text" bash -c "'$quill' tokenize '$tok' --pieces 'Hello world' | grep -q 'Hello'"

"$quill" tokenize "$tmp/none" "x" >/dev/null 2>"$tmp/e1"; check "missing tokenizer -> 1" test $? -eq 1
check "missing tokenizer named" grep -q "$tmp/none" "$tmp/e1"
echo '{"model": ' >"$tmp/tokenizer.json"
"$quill" tokenize "$tmp" "x" >/dev/null 2>"$tmp/e2"; check "malformed tokenizer.json -> 1" test $? -eq 1
check "malformed tokenizer.json named" grep -q "tokenizer.json" "$tmp/e2"
echo '{"messages":[]}' >"$tmp/bad.json"
"$quill" tokenize "$tok" --chat "$tmp/bad.json" >/dev/null 2>"$tmp/e3"; check "empty messages -> error" test $? -ne 0
check "empty messages named" grep -q "messages" "$tmp/e3"
check "the template's file named" grep -q "tokenizer_config.json: messages" "$tmp/e3"
"$quill" tokenize "$tok" --chat "$tmp/bad.json" --ids >/dev/null 2>"$tmp/e4"
check "--ids: empty messages -> error" test $? -ne 0
check "--ids: the template's file named" grep -q "tokenizer_config.json: messages" "$tmp/e4"

echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
