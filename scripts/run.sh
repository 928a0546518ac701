#!/usr/bin/env bash
# Sets up, builds and starts `quill serve` on the model bundled in the repo (http://127.0.0.1:8080/v1).
# Extra arguments go to quill serve (e.g. --port 9000 --parallel 4).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh build
exec build/quill serve "$@"
