#!/usr/bin/env bash
# tools/train/tests/smoke_local.sh: the whole pipeline on toy sizes on a machine WITHOUT the GPU
# machine's packages: Debian's python3-torch (apt-get install python3-torch), with stand-ins for
# transformers (../qwen35_torch.py: the Qwen3.5 math, checked here against the transformers goldens
# in tests/fixtures/models) and for tokenizers (through `quill tokenize`, reusing the bundled tiny
# model's tokenizer). Then unpack.sh into a scratch copy of the docs, and the C golden test on the
# toy pair: quill must reproduce the stand-in's greedy tokens from the dequantized 4-bit weights.
# usage: bash tools/train/tests/smoke_local.sh   (about 5 minutes on 2 cores)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$repo"
tmp=${SMOKE_DIR:-/tmp/quill-train-smoke}
rm -rf "$tmp"
mkdir -p "$tmp/bin" "$tmp/out" "$tmp/repo/docs" "$tmp/repo/models" "$tmp/repo/tests/fixtures"
ln -s /usr/bin/python3 "$tmp/bin/python3"
export PATH="$tmp/bin:$PATH" PYTHONPATH="$repo/tools/train/tests/fake" QUILL_TRAIN_SMALL=1

echo "== stand-in model against the transformers goldens"
python3 tools/train/tests/check_stand_in.py

echo "== pipeline (toy)"
bash scripts/build.sh build-i8 -DQUILL_CUDA=OFF
export QUILL_BIN=$repo/build-i8/quill
OUT=$tmp/out WORK=$tmp/work CORPUS_MB=3 TOK_REUSE=models/qwen35-tiny TRAIN_SECONDS=40 DRAFT_SECONDS=25 \
  TOTAL_SECONDS=2000 TARGET_ARGS="--batch 4 --seq 64 --warmup 5" DRAFTER_ARGS="--seqs 2 --anchors 4 --seq 64" \
  EVAL_ARGS="--n-accept 2 --max-new 8 --windows 2" bash tools/train/device_pipeline.sh
ls -l "$tmp/out"

echo "== unpack into a scratch repository"
cp docs/models.md README.md "$tmp/repo/" && mv "$tmp/repo/models.md" "$tmp/repo/docs/"
mkdir -p "$tmp/repo/scripts"
rm -f "$tmp/out"/bundle.tgz.*
QUILL_BIN=$QUILL_BIN bash tools/train/unpack.sh "$tmp/out" "$tmp/repo"
grep -q "mean acceptance length" "$tmp/repo/docs/models.md"

echo "== C golden test on the toy pair"
cmake --build build-i8 -j2 --target golden_test_pycoder_goldens >/dev/null
QUILL_PYCODER_MODEL=$tmp/repo/models/qwen35-pycoder QUILL_PYCODER_GOLDENS=$tmp/repo/tests/fixtures/pycoder/goldens.json \
  build-i8/golden_test_pycoder_goldens
echo "smoke: OK"
