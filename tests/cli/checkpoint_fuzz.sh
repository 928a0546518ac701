#!/usr/bin/env bash
# A seeded fuzz of the checkpoint loader (tests/cli/checkpoint_fuzz.mjs): damaged copies of models/qwen35-tiny
# are loaded or refused with the damaged file named, never a crash. usage: checkpoint_fuzz.sh QUILL_BINARY SOURCE_DIR
set -euo pipefail
exec node "$2/tests/cli/checkpoint_fuzz.mjs" "$1" "$2"
