#!/usr/bin/env python3
"""tests/cuda/ncu_sass_mix.py: where a kernel's instructions and stall samples go, from the per-instruction
CSV that tests/cuda/ncu_decode.sh writes ($OUT/ncu_decode_sass.csv, the first profiled kernel).

Instructions are split by how often a warp runs them: "ring" (at least 1.5 times a warp: the unit loop,
unrolled over a ring turn) and "once" (the block's setup, staging and split-K finish). Prints per-warp
counts by opcode for both, and each stall reason's samples by (part, opcode).

Usage: python3 tests/cuda/ncu_sass_mix.py CSV WARPS [UNITS]
  WARPS: warps the launch ran (blocks x 8); UNITS: 512-byte weight units it read (for per-unit figures)."""
import collections
import csv
import sys


def num(text):
    try:
        return int(text)
    except ValueError:
        return 0


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    rows = list(csv.reader(open(sys.argv[1])))
    warps = float(sys.argv[2])
    units = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    head = rows[1]
    col = {h: i for i, h in enumerate(head)}
    stalls = [h for h in head if h.startswith("stall_") and "Not Issued" not in h]
    executed = collections.defaultdict(collections.Counter)
    samples = collections.defaultdict(collections.Counter)
    total = 0
    for r in rows[2:]:
        if r and r[0] == "Kernel Name":
            break  # the next kernel's table
        if len(r) < len(head) or not r[col["Source"]].strip():
            continue
        words = r[col["Source"]].split()
        op = (words[1] if words[0].startswith("@") else words[0]).split(".")[0]
        e = num(r[col["Instructions Executed"]])
        part = "ring" if e / warps >= 1.5 else "once"
        executed[part][op] += e
        total += e
        for h in stalls:
            samples[h][(part, op)] += num(r[col[h]])
    print(f"warp-instructions {total}, {total / warps:.1f} a warp" +
          (f", {total / units:.1f} a unit" if units else ""))
    for part in ("ring", "once"):
        n = sum(executed[part].values())
        top = ", ".join(f"{op} {c / warps:.1f}" for op, c in executed[part].most_common(14))
        print(f"{part}: {n / warps:.1f} a warp ({100.0 * n / total:.1f} %): {top}")
    all_samples = sum(sum(c.values()) for c in samples.values())
    for h, c in sorted(samples.items(), key=lambda kv: -sum(kv[1].values())):
        n = sum(c.values())
        if n:
            top = ", ".join(f"{p} {op} {k}" for (p, op), k in c.most_common(4))
            print(f"{h:24s} {100.0 * n / all_samples:5.1f} %  {top}")


if __name__ == "__main__":
    main()
