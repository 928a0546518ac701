#!/usr/bin/env python3
"""tests/cuda/ncu_step_table.py: the per-kernel table of the last decode step in an Nsight Compute CSV
(--page raw with gpu__time_duration.sum, as tests/cuda/ncu_step.sh writes it, gzipped or not).

The step is every kernel from the last embed_kernel (a decode step's first) to the end. Prints one row per
kernel name (template arguments kept: they name the variant), its launches, microseconds and share.
With --medians: every launch in the file (any run, e.g. `ncu -k regex:...` over a whole bench), one row per
kernel name and grid, its launches and median microseconds.
Where the file also has smsp__inst_executed.sum (ncu_step.sh with METRICS=issue), each kernel's row adds its warp
instructions and DRAM bytes read, and the step's sum ends with its issue time: the instructions over four a cycle on
every SM (the schedulers' most) at the clock ncu saw, the time no kernel of today's arithmetic can beat.

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
    first = starts[-1]
    extra = issue_columns(head, units, rows[2:], ti)
    step = kernels[first:]
    total = sum(t for _, _, t in step)
    per = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for k, (name, _, t) in enumerate(step):
        p = per[name]
        p[0] += 1
        p[1] += t
        if extra:
            p[2] += extra[first + k][0]
            p[3] += extra[first + k][1]
    print(f'{len(step)} kernels, {total:.1f} us of kernel time in the step')
    if not extra:
        print('| kernel | launches | us | share |')
        print('|---|---|---|---|')
        for name, (count, t, _, _) in sorted(per.items(), key=lambda kv: -kv[1][1]):
            print(f'| {name.replace("void ", "")} | {count} | {t:.1f} | {100 * t / total:.1f} % |')
        return
    sms = extra[first][3]
    print('| kernel | launches | us | share | warp instructions (M) | DRAM read (MB) | issue us (4 a cycle) |')
    print('|---|---|---|---|---|---|---|')
    inst = sum(p[2] for p in per.values())
    dram = sum(p[3] for p in per.values())
    hz = sum(extra[k][2] * kernels[k][2] for k in range(first, len(kernels))) / total  # time-weighted
    for name, (count, t, i, d) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        print(f'| {name.replace("void ", "")} | {count} | {t:.1f} | {100 * t / total:.1f} % | {i / 1e6:.2f} | '
              f'{d / 1e6:.1f} | {i / (4 * sms * hz) * 1e6:.1f} |')
    print(f'step: {inst / 1e6:.1f} M warp instructions, {dram / 1e6:.1f} MB read from DRAM, SM clock {hz / 1e9:.3f} '
          f'GHz on {sms:.0f} SMs: issue time {inst / (4 * sms * hz) * 1e6:.1f} us at four a cycle on every SM '
          f'(kernel time {total:.1f} us)')


def issue_columns(head, units, rows, ti):
    """Per row: (warp instructions, DRAM bytes read, SM clock in Hz, SMs), or None where the file has no counts."""
    if 'smsp__inst_executed.sum' not in head:
        return None
    ii = head.index('smsp__inst_executed.sum')
    di = head.index('dram__bytes_read.sum') if 'dram__bytes_read.sum' in head else None
    fi = head.index('sm__cycles_elapsed.avg.per_second')
    si = head.index('device__attribute_multiprocessor_count') if 'device__attribute_multiprocessor_count' in head else None
    byte = {'byte': 1.0, 'Kbyte': 1e3, 'Mbyte': 1e6, 'Gbyte': 1e9}
    hertz = {'hz': 1.0, 'khz': 1e3, 'mhz': 1e6, 'ghz': 1e9, 'cycle/second': 1.0, 'cycle/nsecond': 1e9,
             'cycle/usecond': 1e6, 'cycle/msecond': 1e3}
    num = lambda v: float(v.replace(',', '')) if v else 0.0
    out = []
    for r in rows:
        if len(r) <= ti or not r[ti]:
            continue
        out.append((num(r[ii]), num(r[di]) * byte.get(units[di], 1.0) if di is not None else 0.0,
                    num(r[fi]) * hertz.get(units[fi].lower(), 1.0), num(r[si]) if si is not None else 132.0))
    return out


if __name__ == '__main__':
    main()
