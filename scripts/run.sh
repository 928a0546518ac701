#!/usr/bin/env bash
# Sets up, builds and runs quill on the model bundled in the repo: greedy continuation of a prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh build
exec build/quill run --prompt-ids 1,2,3,4,5 -n 32 "$@"
