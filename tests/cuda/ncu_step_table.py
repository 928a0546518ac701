#!/usr/bin/env python3
"""tests/cuda/ncu_step_table.py: the per-kernel table of the last decode step in an Nsight Compute CSV
(--page raw with gpu__time_duration.sum, as tests/cuda/ncu_step.sh writes it, gzipped or not).

The step is every kernel from the last embed_kernel (a decode step's first) to the end. Prints one row per
kernel name (template arguments kept: they name the variant), its launches, microseconds and share.
With --medians: every launch in the file (any run, e.g. `ncu -k regex:...` over a whole bench), one row per
kernel name and grid, its launches and median microseconds.

Usage: python3 tests/cuda/ncu_step_table.py [--medians] CSV[.gz]"""
import collections
import csv
import gzip
import statistics
import sys


def main():
    medians = len(sys.argv) == 3 and sys.argv[1] == '--medians'
    if len(sys.argv) != 2 and not medians:
        sys.exit(__doc__)
    path = sys.argv[-1]
    opener = gzip.open if path.endswith('.gz') else open
    with opener(path, 'rt') as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    head, units = rows[0], rows[1]
    ti, ni = head.index('gpu__time_duration.sum'), head.index('Kernel Name')
    scale = {'ns': 1e-3, 'nsecond': 1e-3, 'us': 1.0, 'usecond': 1.0, 'ms': 1e3, 'msecond': 1e3}[units[ti]]
    gi = head.index('Grid Size') if 'Grid Size' in head else None
    kernels = [(r[ni].split('(')[0], r[gi] if gi is not None else '', float(r[ti].replace(',', '')) * scale)
               for r in rows[2:] if len(r) > ti and r[ti]]
    if medians:
        by = collections.defaultdict(list)
        for name, grid, t in kernels:
            by[(name.replace('void ', ''), grid)].append(t)
        print('| kernel | grid | launches | median us |')
        print('|---|---|---|---|')
        for (name, grid), ts in sorted(by.items(), key=lambda kv: -sum(kv[1])):
            print(f'| {name} | {grid} | {len(ts)} | {statistics.median(ts):.1f} |')
        return
    starts = [i for i, (name, _, _) in enumerate(kernels) if name == 'embed_kernel']
    if not starts:
        sys.exit('no embed_kernel: not a decode run')
    step = kernels[starts[-1]:]
    total = sum(t for _, _, t in step)
    per = collections.defaultdict(lambda: [0, 0.0])
    for name, _, t in step:
        per[name][0] += 1
        per[name][1] += t
    print(f'{len(step)} kernels, {total:.1f} us of kernel time in the step')
    print('| kernel | launches | us | share |')
    print('|---|---|---|---|')
    for name, (count, t) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        print(f'| {name.replace("void ", "")} | {count} | {t:.1f} | {100 * t / total:.1f} % |')


if __name__ == '__main__':
    main()
