#!/usr/bin/env bash
# tests/cuda/kernel_sizes.sh: each kernel of one CUDA source as sm_90a code: its size in bytes, registers and spills,
# as nvcc and readelf give them (no GPU needed). A kernel's code size is worth a look when a change slows launches
# that do not run the new code (docs/performance.md, twenty-fourth pass).
# Builds with bench_lib.sh's bench_nvcc (build-bench/kernel_sizes.cubin and its ptxas log).
# Usage: bash tests/cuda/kernel_sizes.sh [source (src/backend/cuda/cuda_gemv.cu)] [name regex (.)] [nvcc flags...]
set -eu
cd "$(dirname "$0")/../.."
src=${1:-src/backend/cuda/cuda_gemv.cu}
re=${2:-.}
shift $(( $# < 2 ? $# : 2 ))
. tests/cuda/bench_lib.sh
mkdir -p build-bench
log=build-bench/kernel_sizes.ptxas.txt
bench_nvcc kernel_sizes.cubin "$log" -DNDEBUG -Xptxas -v -cubin "$@" -- "$src" # the CMake Release build's -DNDEBUG
readelf -SW build-bench/kernel_sizes.cubin 2>/dev/null | python3 -c '
import re, sys
ptxas = open(sys.argv[1]).read().split("Compiling entry function")
regs = {}
for blk in ptxas[1:]:
    name = blk.split("\x27")[1]
    r = re.search(r"Used (\d+) registers", blk); s = re.search(r"(\d+) bytes spill stores", blk)
    regs[name] = (r.group(1) if r else "?", s.group(1) if s else "?")
rows = []
for line in sys.stdin:
    m = re.search(r"\] \.text\.(\S+)\s+PROGBITS\s+\S+\s+\S+\s+([0-9a-f]+)", line)
    if m and re.search(sys.argv[2], m.group(1)):
        rows.append((m.group(1), int(m.group(2), 16)) + regs.get(m.group(1), ("?", "?")))
print("| kernel (mangled) | code bytes | registers | spill stores |")
print("|---|---|---|---|")
for n, b, r, s in sorted(rows, key=lambda x: -x[1]):
    print(f"| {n} | {b} | {r} | {s} |")
' "$log" "$re"
