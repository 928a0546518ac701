#!/usr/bin/env python3
"""tests/cuda/trace_step.py: lays out the one-row decode matmul launches of a traced `quill bench` in time and says
where each decode step's time goes between and inside them (docs/performance.md, fifty-fifth pass).

usage: trace_step.py TRACE [--skip N] [--ghz F]

TRACE is the file a GT_TRACE build writes (QUILL_CUDA_TRACE; cuda_gemv_trace.cuh has the record). Steps are cut at the
lm_head's launch (the weight with the most outputs, the last matmul of a step); the first N steps (default 2, the
bench's warm-up) and any cut short are dropped. For each launch, in step order and averaged over the steps kept:
  from the previous matmul launch's end E(i-1) to this one's end E(i), through the median block's marks:
  gap     E(i-1) -> the median block passes its wait (the kernels between the two matmuls and the handover)
  stage   -> the median block has x staged (after its barrier)
  loop    -> the median block leaves its unit loop (thread 0's warp)
  finish  -> the median block is done with its split-K finish
  tail    -> the last block of the launch is done (E(i))
  lead    how long before E(i-1) the launch's first block started (its ring's loads go out then)
  TB/s    the launch's weight bytes (codes, scales, biases) over the median staged mark -> E(i)
The marks' cycles become ns at the SM clock the records give (cycles over globaltimer ns, the median block), or at
--ghz F where the last mark is not the block's end (a build whose marks were moved inside staging).
Records with n_out 0 are the fused conv + rule's blocks (cuda_gdn.cu): their launches are laid out between the matmul
launch before them (GDN in) and the one after (out_proj), from GDN in's end E: each block's start, its wait passed,
token 0's q and k staged, its gates and v made, its dot products summed (past their barrier) and its end (first,
median and last block), then the next launch's first block start and its median block's wait passed.
"""
import os
import struct
import sys
from collections import defaultdict

try:
    import numpy as np
except ImportError:  # the device machine has numpy (torch needs it); say so plainly elsewhere
    sys.exit("trace_step.py: needs numpy")

MAGIC = 0x31525451
REC = np.dtype([('g0', '<u8'), ('g4', '<u8'), ('key', '<u8'), ('c', '<u4', 4), ('smid', '<u4'), ('bid', '<u4'),
                ('grid', '<u4'), ('n_out', '<u4'), ('K', '<u4'), ('S', '<u4')])
GT_OUT = 128  # outputs a block (cuda_gemv.cuh)
LAUNCH_GAP_NS = 300_000  # a weight's blocks more than this apart in start time belong to different steps


def load(path):
    with open(path, 'rb') as f:
        magic, n, size = struct.unpack('<3I', f.read(12))
        if magic != MAGIC or size != REC.itemsize:
            sys.exit(f"trace_step.py: {path}: not a matmul trace (magic {magic:#x}, record {size} bytes)")
        r = np.frombuffer(f.read(n * size), dtype=REC)
    if len(r) != n:
        sys.exit(f"trace_step.py: {path}: {len(r)} of {n} records")
    return r


def weight_bytes(blocks):
    """The codes, scales and biases a launch reads: each (n_out, K, S) shape's weights counted from its blocks."""
    total = 0.0
    shapes = defaultdict(int)
    for n_out, K, S in zip(blocks['n_out'], blocks['K'], blocks['S']):
        shapes[(int(n_out), int(K), int(S))] += 1
    for (n_out, K, S), count in shapes.items():
        per_weight = S * -(-n_out // GT_OUT)
        total += max(1, round(count / per_weight)) * n_out * K * (0.5 + 4 / 64)
    return total


def launches(r):
    """Each launch: its records, split from the same weight's other launches by the gap in their start times."""
    out = []
    for key in np.unique(r['key']):
        rk = r[r['key'] == key]
        rk = rk[np.argsort(rk['g0'], kind='stable')]
        cuts = np.nonzero(np.diff(rk['g0'].astype(np.int64)) > LAUNCH_GAP_NS)[0] + 1
        out.extend(np.split(rk, cuts))
    out.sort(key=lambda b: int(b['g0'].min()))
    return out


def pop_opt(args, name, conv, default):
    """The value after option `name` in args, converted (both taken out of args), or default where it is absent."""
    if name not in args:
        return default
    i = args.index(name)
    value = conv(args[i + 1])
    del args[i:i + 2]
    return value


def main():
    args = sys.argv[1:]
    skip = pop_opt(args, '--skip', int, 2)
    ghz_given = pop_opt(args, '--ghz', float, None)
    if len(args) != 1 or (ghz_given is not None and ghz_given <= 0):
        sys.exit(__doc__)
    r = load(args[0])
    rule, r = r[r['n_out'] == 0], r[r['n_out'] > 0]
    if len(r) == 0:
        sys.exit("trace_step.py: no records (was the build made with GT_TRACE=1, QUILL_CUDA_TRACE set?)")
    span = (r['g4'] - r['g0']).astype(np.float64)
    long_ = span > 5000
    ghz = float(np.median(r['c'][long_, 3] / span[long_])) if long_.any() else 1.0
    g0s = np.unique(r['g0'])
    res = int(np.min(np.diff(g0s))) if len(g0s) > 1 else 0
    print(f"{len(r)} block records; SM clock {ghz:.3f} GHz (cycles over globaltimer ns)"
          + (f", {ghz_given:.3f} GHz as given" if ghz_given else "")
          + f"; globaltimer's finest step seen {res} ns")
    ghz = ghz_given or ghz

    L = launches(r)
    head_n = int(r['n_out'].max())
    steps, cur = [], []
    for b in L:
        cur.append(b)
        if int(b['n_out'].max()) == head_n:
            steps.append(cur)
            cur = []
    steps = steps[skip:]
    if not steps:
        sys.exit("trace_step.py: no whole steps after the warm-up")
    n_launch = max(len(s) for s in steps)
    steps = [s for s in steps if len(s) == n_launch]
    print(f"{len(steps)} steps of {n_launch} matmul launches kept (the first {skip} dropped)")

    cols = ['gap', 'stage', 'loop', 'finish', 'tail']
    rows = defaultdict(lambda: defaultdict(list))
    step_ms = []
    for s in steps:
        prev_end = None
        first_start = float(s[0]['g0'].min())
        for i, b in enumerate(s):
            g0 = b['g0'].astype(np.float64)
            marks = [np.median(g0 + b['c'][:, k] / ghz) for k in range(4)]
            end = float(b['g4'].max())
            if prev_end is None:
                prev_end = float(g0.min())  # the step's first launch: from its own first block
            seq = [prev_end] + marks + [end]
            d = rows[i]
            for c, a, z in zip(cols, seq[:-1], seq[1:]):
                d[c].append(z - a)
            nbytes = weight_bytes(b)
            d['lead'].append(prev_end - float(g0.min()))
            d['blocks'].append(len(b))
            d['bytes'].append(nbytes)
            d['tbs'].append(nbytes / max(end - marks[1], 1.0) / 1000.0)
            d['shape'] = f"{int(b['n_out'][0])}x{int(b['K'][0])}/{int(b['S'][0])}"
            if len(np.unique(b['n_out'])) > 1 or len(np.unique(b['K'])) > 1:
                d['shape'] += '+'
            prev_end = end
        step_ms.append((prev_end - first_start) / 1e6)

    print(f"matmul launches of a step, first block start to the head's end: median {np.median(step_ms):.3f} ms")
    print()
    print("| # | weight (n_out x K / S, + more in the job) | blocks | lead us | gap us | stage us | loop us | finish us "
          "| tail us | to E us | TB/s over staged -> E |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    tot = defaultdict(float)
    kinds = defaultdict(lambda: defaultdict(float))  # the same by weight shape: each kind's launches summed over a step
    for i in range(n_launch):
        d = rows[i]
        m = {c: float(np.mean(d[c])) / 1000.0 for c in cols + ['lead']}
        allc = sum(m[c] for c in cols)
        for c in cols:
            tot[c] += m[c]
        tot['bytes'] += float(np.mean(d['bytes']))
        k = kinds[d['shape']]
        k['n'] += 1
        for c in cols:
            k[c] += m[c]
        k['bytes'] += float(np.mean(d['bytes']))
        print(f"| {i} | {d['shape']} | {int(np.mean(d['blocks']))} | {m['lead']:.2f} | {m['gap']:.2f} | {m['stage']:.2f} "
              f"| {m['loop']:.2f} | {m['finish']:.2f} | {m['tail']:.2f} | {allc:.2f} | {np.mean(d['tbs']):.2f} |")
    all_us = sum(tot[c] for c in cols)
    print()
    print("| where a step's matmul span goes | us | share |")
    print("|---|---|---|")
    for c in cols:
        print(f"| {c} | {tot[c]:.1f} | {100 * tot[c] / all_us:.1f} % |")
    print(f"| all | {all_us:.1f} | weights {tot['bytes'] / 1e9:.3f} GB: {tot['bytes'] / all_us / 1e6:.2f} TB/s |")

    print()
    print("| weight | launches | gap us | stage us | loop us | finish us | tail us | a launch: to E us | "
          "TB/s over to E |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape, k in sorted(kinds.items(), key=lambda kv: -sum(kv[1][c] for c in cols)):
        allc = sum(k[c] for c in cols)
        print(f"| {shape} | {int(k['n'])} | {k['gap']:.1f} | {k['stage']:.1f} | {k['loop']:.1f} | {k['finish']:.1f} "
              f"| {k['tail']:.1f} | {allc / k['n']:.2f} | {k['bytes'] / allc / 1e6:.2f} |")
    if len(rule):
        rule_table(rule, L, (float(steps[0][0]['g0'].min()), float(steps[-1][-1]['g4'].max())), ghz)


RULE_MARKS = ['start', 'wait passed', "token 0's q and k staged", 'its gates and v made', 'its dot products summed',
              'end']
if os.environ.get('GDN_TRACE_END') == '1':  # the probe build's marks (cuda_gdn.cu; trace_step.sh sets it)
    RULE_MARKS = ['start', 'wait passed', 'its dot products summed', 'state and v window stores issued',
                  "the ticket's value used", 'end']


def rule_table(rule, L, kept, ghz):
    """The conv + rule launches of the kept steps, each from the end E of the matmul launch before it (us)."""
    starts = np.array([float(b['g0'].min()) for b in L])
    got = defaultdict(list)
    for rb in launches(rule):
        t0 = float(rb['g0'].min())
        i = int(np.searchsorted(starts, t0)) - 1  # the matmul launch that started last before this one
        if not kept[0] <= t0 <= kept[1] or i < 0 or i + 1 >= len(L):
            continue
        E = float(L[i]['g4'].max())
        g0 = rb['g0'].astype(np.float64)
        at = [g0] + [g0 + rb['c'][:, k] / ghz for k in range(4)] + [rb['g4'].astype(np.float64)]
        for name, t in zip(RULE_MARKS, at):
            got[name].append((t.min() - E, np.median(t) - E, t.max() - E))
        nx = L[i + 1]
        got['next'].append((float(nx['g0'].min()) - E, float(np.median(nx['g0'] + nx['c'][:, 0] / ghz)) - E))
    if not got:
        return
    n = len(got['next'])
    print()
    print(f"| the conv + rule ({n} launches; us from the end E of the matmul before it) | first block | median block "
          "| last block |")
    print("|---|---|---|---|")
    for name in RULE_MARKS:
        a = np.mean(np.array(got[name]), axis=0) / 1000.0
        print(f"| {name} | {a[0]:.2f} | {a[1]:.2f} | {a[2]:.2f} |")
    a = np.mean(np.array(got['next']), axis=0) / 1000.0
    print(f"| the next matmul launch: its first block's start; its median block's wait passed | {a[0]:.2f} | {a[1]:.2f} "
          "| |")


if __name__ == '__main__':
    main()
