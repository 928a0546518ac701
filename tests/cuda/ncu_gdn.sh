#!/usr/bin/env bash
# tests/cuda/ncu_gdn.sh: where the chunked gated delta rule's time goes on the GPU machine: ncu's duration of
# every gdn_prep_kernel and gdn_scan_kernel launch in bench_gdn (the 9B layer shape, 1 x 512, 1 x 4096, ...),
# averaged per kernel and grid. Prints one table. Needs $BUILD/bench_gdn (bench_gdn.sh builds it).
set -u
cd "$(dirname "$0")/../.."
build=${BUILD:-build-cuda}
csv=${OUT:-/tmp}/ncu-gdn.csv
ncu --metrics gpu__time_duration.sum -k regex:gdn_ --launch-count ${COUNT:-120} --csv --print-units base "$build/bench_gdn" >"$csv" 2>/dev/null
python3 - "$csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
head = rows[0]
ki, gi, mi, vi = (head.index(c) for c in ("Kernel Name", "Grid Size", "Metric Name", "Metric Value"))
acc = collections.defaultdict(list)
for r in rows[1:]:
    if r[mi] == "gpu__time_duration.sum":
        acc[(r[ki].split("(")[0], r[gi])].append(float(r[vi].replace(",", "")))
print("| kernel | grid | launches | mean us |\n|---|---|---|---|")
for (k, g), v in sorted(acc.items()):
    print(f"| {k} | {g} | {len(v)} | {sum(v) / len(v) / 1000:.1f} |")
PY
