#!/usr/bin/env bash
# tools/train/unpack.sh: puts what device_pipeline.sh returned in place, here (no GPU needed).
#
#   bash tools/train/unpack.sh FILES_DIR [REPO]
#
# FILES_DIR holds the returned files (report.md, pipeline.log, target.tar.NN, final.tgz.NN, maybe
# bundle.tgz.NN). Steps: join and extract into REPO/build-train/returned (the bf16 checkpoints stay
# there, git-ignored, for a later RESUME); the 4-bit bundles: taken from the archive, or made again
# with this quill's `quantize` from the bf16 checkpoints and checked against the sha256 the device
# recorded (quantization is deterministic, so the goldens apply); then models/qwen35-pycoder,
# models/qwen35-pycoder-dflash, tests/fixtures/pycoder/, and the generated sections of
# docs/models.md and README.md. Ends by running quill on the goldens.
# Env: QUILL_BIN (default: REPO/build/quill, built with scripts/build.sh when missing), PYTHON.
set -euo pipefail
src=$(cd "$1" && pwd)
repo=$(cd "${2:-$(dirname "$0")/../..}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
"$PY" -c "import numpy" 2>/dev/null || PY=/usr/bin/python3
"$PY" -c "import numpy" 2>/dev/null || { echo "unpack: needs a python3 with numpy (apt-get install python3-numpy)"; exit 1; }
quill=${QUILL_BIN:-$repo/build/quill}
if [ -z "${QUILL_BIN:-}" ]; then bash "$repo/scripts/build.sh" build >/dev/null; fi # never a stale build

ret=$repo/build-train/returned
rm -rf "$ret"
"$PY" "$here/pack.py" unpack --src "$src" --dest "$ret"
cp "$src/report.md" "$src/pipeline.log" "$ret/" 2>/dev/null || true

t=$ret/bundle/qwen35-pycoder
d=$ret/bundle/qwen35-pycoder-dflash
if [ ! -f "$t/model.safetensors" ]; then
  echo "unpack: quantizing the bf16 target again (the 4-bit bundle did not fit in the return)"
  "$quill" quantize "$ret/target/hf" "$t" --bits 4 --group-size 64
  cp "$ret/target/hf/quill-train.json" "$t/" 2>/dev/null || true
fi
if [ ! -f "$d/model.safetensors" ] && [ -f "$ret/drafter/model.safetensors" ]; then
  "$quill" quantize "$ret/drafter" "$d" --bits 4 --group-size 64
fi
sums=$ret/goldens/pycoder/bundle_sha256.json
if [ -f "$sums" ]; then
  "$PY" - "$sums" "$t" "$d" <<'EOF'
import hashlib, json, os, sys
want = json.load(open(sys.argv[1]))
for key, d in (("target_model_sha256", sys.argv[2]), ("drafter_model_sha256", sys.argv[3])):
    if key not in want:
        continue
    got = hashlib.sha256(open(os.path.join(d, "model.safetensors"), "rb").read()).hexdigest()
    if got != want[key]:
        sys.exit(f"unpack: {d}/model.safetensors sha256 {got} differs from the device's {want[key]}: "
                 "the goldens were computed on other weights")
    print(f"unpack: {os.path.basename(d)} matches the device's sha256")
EOF
else
  echo "unpack: WARNING: no goldens came back (the goldens stage failed?)"
fi

mkdir -p "$repo/models" "$repo/tests/fixtures"
rm -rf "$repo/models/qwen35-pycoder" "$repo/models/qwen35-pycoder-dflash"
cp -r "$t" "$repo/models/qwen35-pycoder"
[ -d "$d" ] && cp -r "$d" "$repo/models/qwen35-pycoder-dflash"
if [ -d "$ret/goldens/pycoder" ]; then
  rm -rf "$repo/tests/fixtures/pycoder"
  cp -r "$ret/goldens/pycoder" "$repo/tests/fixtures/pycoder"
fi
[ -f "$repo/docs/models.md" ] && "$PY" "$here/report.py" --work "$ret" --fill-docs "$repo/docs/models.md" \
  --fill-readme "$repo/README.md"
du -sh "$repo/models/qwen35-pycoder" "$repo/models/qwen35-pycoder-dflash" 2>/dev/null || true
du -cb "$repo/models/qwen35-pycoder" "$repo/models/qwen35-pycoder-dflash" 2>/dev/null | tail -1 | \
  awk '{ printf "unpack: bundles together %.2f MB (limit 20)\n", $1 / 1e6 }'

# quill on the goldens, as tests/golden/test_pycoder_goldens.c checks them
g=$repo/tests/fixtures/pycoder/goldens.json
if [ -f "$g" ]; then
  "$PY" - "$quill" "$repo/models/qwen35-pycoder" "$g" <<'EOF'
import json, subprocess, sys
quill, model, gpath = sys.argv[1:4]
ok = True
for i, p in enumerate(json.load(open(gpath))["prompts"]):
    out = subprocess.run([quill, "run", model, "--backend", "cpu", "--prompt-ids", ",".join(map(str, p["ids"])),
                          "-n", str(p["n_predict"])], capture_output=True, text=True).stdout.split()
    same = [int(x) for x in out] == p["greedy"]
    ok &= same
    print(f"unpack: golden prompt {i}: quill greedy ids {'EQUAL' if same else 'DIFFER'} ({p['n_predict']} tokens)")
sys.exit(0 if ok else 1)
EOF
fi
echo "unpack: done. Next: re-run cmake (the default model becomes models/qwen35-pycoder), ctest, commit"
echo "        models/qwen35-pycoder*, tests/fixtures/pycoder, docs/models.md, README.md."
