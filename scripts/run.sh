#!/usr/bin/env bash
# Sets up, builds and starts `quill serve` on the model bundled in the repo (http://127.0.0.1:8080/v1):
# models/qwen35-pycoder, the small trained Python model of docs/models.md (models/qwen35-tiny, random
# weights, while that one is not in the tree). Extra arguments go to quill serve (e.g. --port 9000
# --parallel 4); set QUILL_MODEL or pass a MODEL_DIR first to serve another checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh build
exec build/quill serve "$@"
