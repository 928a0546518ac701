#!/usr/bin/env bash
# run.sh QUILL_BINARY SOURCE_DIR [TEST_FILE...]: the e2e tests (all *.test.mjs unless files, named
# relative to tests/e2e, are given). Starts `quill serve` with the bundled
# model (or $QUILL_E2E_MODEL) on a free loopback port with --parallel 4, waits for /health, runs every
# tests/e2e/*.test.mjs with node's test runner (the official `openai` npm package as the client), then
# stops the server with SIGTERM and checks that it exited 0. Tests that need other flags start their
# own server through lib.mjs (QUILL_BINARY, QUILL_MODEL).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 QUILL_BINARY SOURCE_DIR" >&2
  exit 2
fi
BIN=$(realpath "$1")
SRC=$(realpath "$2")
shift 2
HERE="$SRC/tests/e2e"
MODEL=${QUILL_E2E_MODEL:-$SRC/models/qwen35-tiny}
cd "$HERE"
if [ ! -d node_modules/openai ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
PORT=$(node -e "const s=require('net').createServer();s.listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")
LOG=$(mktemp -t quill-e2e-XXXXXX.log)
"$BIN" serve "$MODEL" --host 127.0.0.1 --port "$PORT" --parallel 4 --queue 64 2>"$LOG" &
PID=$!
cleanup() {
  if kill -0 "$PID" 2>/dev/null; then kill -TERM "$PID" 2>/dev/null || true; fi
}
trap cleanup EXIT
URL="http://127.0.0.1:$PORT"
for _ in $(seq 1 600); do
  if curl -sf "$URL/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$PID" 2>/dev/null; then
    echo "quill serve exited before it became healthy:" >&2
    cat "$LOG" >&2
    exit 1
  fi
  sleep 0.1
done
rc=0
if [ $# -eq 0 ]; then set -- ./*.test.mjs; fi
QUILL_URL="$URL" QUILL_BINARY="$BIN" QUILL_MODEL="$MODEL" QUILL_SERVER_LOG="$LOG" \
  node --test --test-concurrency=1 "$@" || rc=$?
kill -TERM "$PID"
src=0
wait "$PID" || src=$?
trap - EXIT
if [ "$src" -ne 0 ]; then
  echo "quill serve exited with $src after SIGTERM (expected 0); its log:" >&2
  tail -n 50 "$LOG" >&2
  rc=1
fi
if [ "$rc" -ne 0 ]; then
  echo "--- server log (last 40 lines): $LOG" >&2
  tail -n 40 "$LOG" >&2
else
  rm -f "$LOG"
fi
exit "$rc"
