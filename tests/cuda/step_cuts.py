#!/usr/bin/env python3
"""tests/cuda/step_cuts.py: cuts applied to a copy of the source tree, so that `quill bench` can time a decode step
with parts of it removed (docs/performance.md, forty-fifth pass). Every cut makes the values wrong on purpose; only the
step's time counts. Never applied to the tree that is committed: step_cuts.sh runs it on a copy.

usage: step_cuts.py TREE CUT[,CUT...]   (an empty list or "main" changes nothing)

Cuts (the one-row decode matmul is cuda_gemv.cuh's gt_block, 4-bit split mode):
  free_unit   the unit's arithmetic costs nothing: it xors its weight words, scales and one staged word into acc
              (the loads, the ring and everything around it stay)
  no_stage    the block does not stage x, nor copy it (the barrier after it stays)
  no_finish   the block does not finish its split (no partials, ticket or sum; acc kept alive by a store that
              never happens)
  no_wait     no kernel waits for the one before (cu_pdl_enter loses griddepcontrol.wait)
  ring=N      N units in flight a warp in the 4-bit one-row kernels, lean variant included (main: 8, lean 4)
  blocks=N    GT_BLOCKS_Q4 = N, the blocks a 4-bit split aims for (main: 256)
  l2pre[=N]   each warp sends the rest of its slice (N units past its ring) to L2 with one bulk prefetch before it
              waits (4-bit weights are tiled, cuda_q4_tiled.cuh, so a warp's slice is one run of bytes)
  l2post[=N]  the same right after the wait, while the block stages x (the op before's loads are done by then)
  pre=N       only the ring's first N units (and their groups' scales) go out before the wait, the rest once staging's
              loads are back, before the barrier after it (main: all D; pre=0 none): whether x's loads, issued after
              the wait, queue behind the ring's (the fifty-first pass's question, asked without the copy engine)
  wna         not a cut (the values stay right): the 4-bit one-row kernels' weight loads do not allocate in L1
              (ld.global.nc.L1::no_allocate; the tenth pass tried it on the row-major weights: +0.7 %), so that x's
              loads after the wait find the L1 less full
  xtma        not a cut (the values stay right): the one-row kernels take x by bulk copies (GT_X_TMA 1; the
              environment's QUILL_CUDA_XTMA picks the inputs, default all)

(nw_l1, the norm weights sent to L1 before the wait, was tried this way and is now in the tree: gt_block.)
"""
import os
import re
import sys

GEMV = 'src/backend/cuda/cuda_gemv.cuh'
COMMON = 'src/backend/cuda/cuda_common.cuh'
CFG = 'src/backend/cuda/cuda_gemv_cfg.cuh'

FREE_UNIT = '''    if constexpr (Q != 0 && !DQ) { /* step_cuts free_unit */
#pragma unroll
        for (int T = 0; T < NT; T++) {
            if (T >= nt) break;
            acc[T][0] = __uint_as_float(__float_as_uint(acc[T][0]) ^ w[0][0] ^ w[0][1] ^ sb[0] ^ bx[T * tx].x);
            acc[T][1] = __uint_as_float(__float_as_uint(acc[T][1]) ^ w[1][0] ^ w[1][1] ^ sb[1] ^
                                        __float_as_uint(xs[T * tX]));
        }
        return;
    }
'''

L2PRE_OLD = '''            if (4 * q < P.us) gt_sload<Q>(sb[q], P.s0, P.bb0, P.ub, 4 * q, P.us, t);
    }
'''
# L2_PREFETCH(N): the warp's N units after the ring's D (all the rest of its slice if N is 0) to L2, one bulk prefetch
L2_PREFETCH = '''    if (Q && P.wact && (threadIdx.x & 31) == 0 && P.us > D) /* step_cuts {cut} */
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\\n" ::"l"(P.p0 + D * gt_cfg<Q>::UB),
                     "r"(({n} > 0 ? min(P.us - D, {n}) : P.us - D) * gt_cfg<Q>::UB) : "memory");
'''
RING_START = '    gt_ring_start<Q, D>(P, w, sb, t);\n    /* Before the wait'
STAGED = '    __syncthreads();\n    trace.mark(1);\n\n    for (;;) {'
# RING_PART(lo, hi): the ring's units lo .. hi - 1 and the scales of the groups of 4 that start among them
RING_PART = '''    if (P.wact) {{ /* step_cuts {cut}: the ring's units {lo} .. {hi} - 1 */
#pragma unroll
        for (int d = 0; d < D; d++)
            if (d >= {lo} && d < {hi} && d < P.us)
                gt_wload<Q>(w[d], P.p0 + d * gt_cfg<Q>::UB, P.p8 + d * gt_cfg<Q>::UB);
        if constexpr (Q != 0) {{
#pragma unroll
            for (int q = 0; q < D / 4; q++)
                if (4 * q >= {lo} && 4 * q < {hi} && 4 * q < P.us)
                    gt_sload<Q>(sb[q], P.s0, P.bb0, P.ub, 4 * q, P.us, t);
        }}
    }}
'''
WLOAD_Q4 = '''        const uint4 a = __ldg((const uint4 *)q0);
        w[0][0] = a.x, w[0][1] = a.y, w[1][0] = a.z, w[1][1] = a.w;
'''
WLOAD_Q4_NA = '''        asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\\n" /* step_cuts wna */
            : "=r"(w[0][0]), "=r"(w[0][1]), "=r"(w[1][0]), "=r"(w[1][1]) : "l"(q0));
'''
WAIT = '''    wait(); /* x, the partials and the tickets are the previous ops' */
'''


def replace_once(text, old, new, cut):
    if text.count(old) != 1:
        sys.exit(f'step_cuts: {cut}: the text to replace is not in the tree once')
    return text.replace(old, new)


def apply(tree, cut, files):
    name, _, arg = cut.partition('=')
    g = files.setdefault(GEMV, open(os.path.join(tree, GEMV)).read())
    if name == 'free_unit':
        anchor = '    typedef gt_cfg<Q> C;\n    uint32_t a[2][2 * C::KSU];\n'
        files[GEMV] = replace_once(g, anchor, anchor + FREE_UNIT, cut)
    elif name == 'no_stage':
        for call in ('if (h2) gt_stage<Q, IN, 4, false, false, SH2>(x, job.in,',
                     'if (!h2) gt_stage<Q, IN, 4, false, false, SH>(', 'gt_copy_x<Q, IN>(',
                     'gt_stage<Q, IN, 4, false, true, SH>('):
            g = replace_once(g, '            ' + call, '            if (0) ' + call, cut)
        files[GEMV] = g
    elif name == 'no_finish':
        m = re.search(r'            gt_finish<Q, NT, Q != 0, 4, DQ>\(acc, n, P\.W, P\.y, P\.part, P\.tick, P\.S, P\.s, '
                      r'P\.row0[^;]*;', g)
        if not m:
            sys.exit(f'step_cuts: {cut}: gt_block\'s finish not found')
        keep = ('            if (__float_as_uint(acc[0][0]) == 0x7f7f1234u && __float_as_uint(acc[0][1]) == 1u) '
                'P.y[0] = 0.0f; /* step_cuts no_finish */')
        files[GEMV] = g[:m.start()] + keep + g[m.end():]
    elif name == 'no_wait':
        c = files.setdefault(COMMON, open(os.path.join(tree, COMMON)).read())
        files[COMMON] = replace_once(c, '    asm volatile("griddepcontrol.wait;\\n" ::: "memory");\n', '', cut)
    elif name == 'ring' and arg.isdigit():
        c = files.setdefault(CFG, open(os.path.join(tree, CFG)).read())
        files[CFG] = replace_once(c, '#define GT_DEPTH_Q4 8 ', f'#define GT_DEPTH_Q4 {arg} ', cut)
        files[GEMV] = replace_once(g, 'constexpr int D = Q && MINB >= GT_LEAN_BLOCKS ? 4 : C::DEPTH;',
                                   f'constexpr int D = Q && MINB >= GT_LEAN_BLOCKS ? {arg} : C::DEPTH;', cut)
    elif name == 'pre' and arg.isdigit():
        g = replace_once(g, RING_START, RING_PART.format(cut=cut, lo=0, hi=arg) + RING_START.split('\n')[1], cut)
        files[GEMV] = replace_once(g, STAGED, RING_PART.format(cut=cut, lo=arg, hi='D') + STAGED, cut)
    elif name == 'wna':
        files[GEMV] = replace_once(g, WLOAD_Q4, WLOAD_Q4_NA, cut)
    elif name == 'xtma':
        files[GEMV] = replace_once(g, '#define GT_X_TMA 0\n', '#define GT_X_TMA 1\n', cut)
    elif name == 'blocks' and arg.isdigit():
        files[GEMV] = replace_once(g, '#define GT_BLOCKS_Q4 256 ', f'#define GT_BLOCKS_Q4 {arg} ', cut)
    elif name in ('l2pre', 'l2post') and (not arg or arg.isdigit()):
        code = L2_PREFETCH.format(cut=cut, n=int(arg or 0))
        if name == 'l2pre':
            files[GEMV] = replace_once(g, L2PRE_OLD, L2PRE_OLD + code, cut)
        else:
            files[GEMV] = replace_once(g, WAIT, WAIT + code, cut)
    else:
        sys.exit(f'step_cuts: unknown cut {cut!r}')


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    tree, cuts = sys.argv[1], [c for c in sys.argv[2].split(',') if c and c != 'main']
    files = {}
    for cut in cuts:
        apply(tree, cut, files)
    for path, text in files.items():
        with open(os.path.join(tree, path), 'w') as f:
            f.write(text)


if __name__ == '__main__':
    main()
