/* cuda_draw.cu: the op draw (backend.h): each row's sampled token by draw.h's rules, on the GPU, so a sampled stream
 * downloads its id instead of a vocabulary of logits and no host sorts or sums them.
 *
 * Launches over a row's chunks of DR_CHUNK columns, a block each (argmax_kernel's layout), the last block of a row (a
 * ticket) combining the chunks:
 * - draw_max_kernel: the row's largest finite logit, min-p's reference and the masses' (a maximum does not depend on
 *   the order);
 * - draw_kernel: a row over every finite logit (draw_whole_row) gets every chunk's best (score, index) by draw_score,
 *   the lowest index among equal scores, and the best of the chunks the same way; a row of top-p alone gets its mass,
 *   summed in a fixed order. A row at temperature <= 0 or without a finite logit takes argmax's rule (scores = the
 *   logits, NaNs never win, x[0] NaN gives 0).
 * - draw_pick_kernel (where a row has top-k or top-p), a block of DR_PICK threads a row: the first k of the order
 *   (k = top_k, else DR_K) by a radix select on the logits' bits (four passes of 8 bits; ties at the edge by the
 *   lowest ids, in id order), sorted in shared memory (bitonic), then draw_row's walk over them (min-p, top-p) and the
 *   draw among what is left. A top-k above DR_K, or a top-p set that does not close within the first DR_K, gives -1:
 *   the host's (qwen35.c draws_undecided).
 * The winner is the largest score whatever order the blocks and threads meet in, so the id is draw_row's on the same
 * logits; where draw_row sums masses (top-p), the sums here run in sorted order as the host's do, but a top-p set of
 * all the finite logits (no top-k) sums chunk by chunk (draw.h says what else may differ by a last bit). */
#include "cuda_common.cuh"

#define DR_THREADS 256
#define DR_CHUNK 4096

__global__ void __launch_bounds__(DR_THREADS) draw_max_kernel(const float *__restrict__ x, int n_cols,
                                                              float *__restrict__ part, unsigned *__restrict__ tick,
                                                              float *__restrict__ rmax) {
    cu_pdl_enter();
    __shared__ float sm[DR_THREADS / 32];
    __shared__ int last;
    const int row = blockIdx.x, chunk = blockIdx.y, chunks = gridDim.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float *xr = x + (int64_t)row * n_cols;
    const int i1 = min(n_cols, (chunk + 1) * DR_CHUNK);
    float m = -INFINITY; /* stays -inf where the chunk has no finite logit */
    for (int i = chunk * DR_CHUNK + threadIdx.x; i < i1; i += DR_THREADS)
        if (isfinite(xr[i])) m = fmaxf(m, xr[i]);
    m = warp_max(m);
    if (lane == 0) sm[warp] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < DR_THREADS / 32; w++) m = fmaxf(m, sm[w]);
        part[(int64_t)row * chunks + chunk] = m;
        last = cu_ticket_take(tick + row) == (unsigned)(chunks - 1);
    }
    __syncthreads();
    if (!last || warp != 0) return;
    m = -INFINITY;
    for (int c = lane; c < chunks; c += 32) m = fmaxf(m, __ldcg(part + (int64_t)row * chunks + c));
    m = warp_max(m);
    if (lane == 0) {
        rmax[row] = m;
        tick[row] = 0; /* ready for the next launch */
    }
}

/* part: [rows][chunks] (score, index, mass) as four doubles; rmass: [rows], a top-p row's mass. */
__global__ void __launch_bounds__(DR_THREADS) draw_kernel(const float *__restrict__ x, int n_cols,
                                                          const __grid_constant__ cu_tab d,
                                                          const float *__restrict__ rmax, double *__restrict__ part,
                                                          unsigned *__restrict__ tick, double *__restrict__ rmass,
                                                          int32_t *__restrict__ out) {
    cu_pdl_enter();
    __shared__ double ss[DR_THREADS / 32], sm[DR_THREADS / 32];
    __shared__ int si[DR_THREADS / 32];
    __shared__ int last;
    const int row = blockIdx.x, chunk = blockIdx.y, chunks = gridDim.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float *xr = x + (int64_t)row * n_cols;
    const qdraw dr = cu_tab_at<qdraw>(d, row);
    const float mx = rmax[row];
    const bool greedy = !(dr.temperature > 0.0) || mx == -INFINITY, whole = draw_whole_row(&dr);
    const bool mass = !greedy && dr.top_k == 0 && dr.top_p < 1.0; /* top-p over every finite logit */
    const int i1 = min(n_cols, (chunk + 1) * DR_CHUNK);
    double bs = 0.0, ms = 0.0;
    int bi = -1;
    for (int i = chunk * DR_CHUNK + threadIdx.x; i < i1; i += DR_THREADS) {
        const float v = xr[i];
        if (greedy) {
            if (v == v) am_take(bs, bi, (double)v, i);
        } else if (mass) {
            if (isfinite(v)) ms += exp(((double)v - (double)mx) / dr.temperature);
        } else if (whole && isfinite(v) && (double)v - (double)mx >= dr.min_rel &&
                   (bi < 0 || (double)v / dr.temperature + DRAW_G_MAX >= bs)) { /* else it cannot win: no noise */
            am_take(bs, bi, draw_score(v, dr.temperature, dr.key, i), i);
        }
    }
    am_warp(bs, bi);
    ms = warp_sum(ms);
    if (lane == 0) ss[warp] = bs, si[warp] = bi, sm[warp] = ms;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < DR_THREADS / 32; w++) am_take(bs, bi, ss[w], si[w]), ms += sm[w];
        double *p = part + 4 * ((int64_t)row * chunks + chunk);
        p[0] = bs, p[1] = (double)bi, p[2] = ms;
        last = cu_ticket_take(tick + row) == (unsigned)(chunks - 1);
    }
    __syncthreads();
    if (!last || warp != 0) return;
    bs = 0.0, bi = -1, ms = 0.0;
    for (int c = lane; c < chunks; c += 32) {
        const double *p = part + 4 * ((int64_t)row * chunks + c);
        am_take(bs, bi, __ldcg(p), (int)__ldcg(p + 1));
        ms += __ldcg(p + 2);
    }
    am_warp(bs, bi);
    ms = warp_sum(ms);
    if (lane == 0) {
        out[row] = greedy && (xr[0] != xr[0] || bi < 0) ? 0 : bi; /* a row draw_pick_kernel takes: its answer later */
        rmass[row] = ms;
        tick[row] = 0;
    }
}

#define DR_K 1024    /* the candidates a row's pick sorts: top-k up to it, top-p where it closes within it */
#define DR_PICK 1024 /* threads of draw_pick_kernel: one candidate each */

/* A finite float's bits as an unsigned that orders as the float does. */
__device__ __forceinline__ unsigned dr_bits(float v) {
    const unsigned u = __float_as_uint(v);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}
/* a comes before b in the order: the larger logit, the lower id on ties (draw.c's before). */
__device__ __forceinline__ bool dr_before(float la, int ia, float lb, int ib) {
    return la > lb || (la == lb && ia < ib);
}

/* f(v, i) for every logit of the row, this thread's share: four float4 loads in flight a turn where the row is
 * 16-byte aligned (one load at a time left the pick's passes waiting on L2), then the rest one by one. */
template <typename F> __device__ __forceinline__ void dr_scan(const float *__restrict__ xr, int n_cols, F f) {
    const int n4 = ((uintptr_t)xr & 15) == 0 ? n_cols / 4 : 0;
    const float4 *x4 = (const float4 *)xr;
    for (int b = threadIdx.x; b < n4; b += 4 * DR_PICK) {
        float4 q[4];
#pragma unroll
        for (int u = 0; u < 4; u++) q[u] = b + u * DR_PICK < n4 ? x4[b + u * DR_PICK] : make_float4(NAN, NAN, NAN, NAN);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int i = 4 * (b + u * DR_PICK);
            if (i < 4 * n4) f(q[u].x, i), f(q[u].y, i + 1), f(q[u].z, i + 2), f(q[u].w, i + 3);
        }
    }
    for (int i = 4 * n4 + threadIdx.x; i < n_cols; i += DR_PICK) f(xr[i], i);
}

/* The first k of row's finite logits in the order, in cl / ci [0, *count) (k = the row's top_k, else DR_K; all of
 * them where fewer): the k-th's bits by radix select, those above it, then those equal to it in id order up to k;
 * *m: the finite logits there are. Logits below lo, known to be under the k-th, are passed over (no count, no add).
 * Then sorted (bitonic over DR_K slots, the rest empty). */
__device__ void dr_first_k(const float *__restrict__ xr, int n_cols, int k, float lo, float *cl, int *ci,
                           unsigned *hist, int *count, int *m) {
    __shared__ unsigned s_prefix;
    __shared__ int s_need, s_base, s_eq;
    const int tid = threadIdx.x;
    unsigned prefix = 0, mask = 0;
    int need = k, all = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        if (tid < 256) hist[tid] = 0;
        __syncthreads();
        unsigned run_bin = 256u, run = 0; /* a run of one bin goes in as one add: logits crowd a few bins */
        dr_scan(xr, n_cols, [&](float v, int) {
            if (!isfinite(v) || v < lo || (dr_bits(v) & mask) != prefix) return;
            const unsigned bin = (dr_bits(v) >> shift) & 255u;
            if (bin != run_bin) {
                if (run) atomicAdd(&hist[run_bin], run);
                run_bin = bin, run = 0;
            }
            run++;
        });
        if (run) atomicAdd(&hist[run_bin], run);
        __syncthreads();
        if (tid == 0) {
            unsigned acc = 0;
            int b = 255;
            if (shift == 24) {
                for (int j = 0; j < 256; j++) acc += hist[j];
                *m = (int)acc, acc = 0;
            }
            if (shift == 24 && *m <= need) {
                s_need = -1; /* every finite logit is a candidate */
            } else {
                for (; b > 0 && acc + hist[b] < (unsigned)need; b--) acc += hist[b];
                s_need = need - (int)acc;
                s_prefix = prefix | (unsigned)b << shift;
            }
        }
        __syncthreads();
        if (s_need < 0) { all = 1; break; }
        need = s_need, prefix = s_prefix, mask |= 255u << shift;
    }
    if (tid == 0) *count = 0, s_base = 0, s_eq = 0;
    __syncthreads();
    dr_scan(xr, n_cols, [&](float v, int i) { /* the ones above the k-th (or every finite one) */
        if (v < lo) return;
        if (isfinite(v) && (all || dr_bits(v) > prefix)) {
            const int j = atomicAdd(count, 1);
            cl[j] = v, ci[j] = i;
        } else if (isfinite(v) && dr_bits(v) == prefix) { /* the k-th's equals, from the top slot down */
            const int e = atomicAdd(&s_eq, 1);
            if (e < need) cl[DR_K - 1 - e] = v, ci[DR_K - 1 - e] = i;
        }
    });
    __syncthreads();
    if (!all && s_eq <= need) { /* no tie past the k-th (the usual case): every equal one is in */
        const float el = tid < s_eq ? cl[DR_K - 1 - tid] : 0.0f; /* (the two ranges may overlap) */
        const int ei = tid < s_eq ? ci[DR_K - 1 - tid] : 0;
        __syncthreads();
        if (tid < s_eq) cl[*count + tid] = el, ci[*count + tid] = ei;
        __syncthreads();
        if (tid == 0) *count += s_eq;
        all = 1;
    }
    for (int t0 = 0; !all && t0 < n_cols; t0 += DR_PICK) { /* ties past it: the lowest ids first */
        const int i = t0 + tid;
        const bool eq = i < n_cols && isfinite(xr[i]) && dr_bits(xr[i]) == prefix;
        const unsigned ballot = __ballot_sync(0xffffffffu, eq);
        __syncthreads(); /* hist (the warps' counts) is free */
        if ((tid & 31) == 0) hist[tid >> 5] = __popc(ballot);
        __syncthreads();
        int before = s_base + __popc(ballot & ((1u << (tid & 31)) - 1u));
        for (int w = 0; w < (tid >> 5); w++) before += (int)hist[w];
        if (eq && before < need) {
            const int j = atomicAdd(count, 1);
            cl[j] = xr[i], ci[j] = i;
        }
        __syncthreads();
        if (tid == 0)
            for (int w = 0; w < DR_PICK / 32; w++) s_base += (int)hist[w];
        __syncthreads();
        if (s_base >= need) break;
    }
    __syncthreads();
    if (tid >= *count) cl[tid] = -INFINITY, ci[tid] = 0x7fffffff; /* empty slots sort last */
    for (int size = 2; size <= DR_K; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            __syncthreads();
            const int j = tid ^ stride;
            if (j > tid) {
                const bool first = (tid & size) == 0; /* this pair in the order, or reversed */
                if (dr_before(cl[j], ci[j], cl[tid], ci[tid]) == first) {
                    const float tl = cl[tid];
                    const int ti = ci[tid];
                    cl[tid] = cl[j], ci[tid] = ci[j], cl[j] = tl, ci[j] = ti;
                }
            }
        }
    __syncthreads();
}

/* cmax: [rows][chunks], the chunks' largest finite logits (draw_max_kernel's). */
__global__ void __launch_bounds__(DR_PICK) draw_pick_kernel(const float *__restrict__ x, int n_cols,
                                                            const __grid_constant__ cu_tab d,
                                                            const float *__restrict__ rmax,
                                                            const float *__restrict__ cmax, int chunks,
                                                            const double *__restrict__ rmass,
                                                            int32_t *__restrict__ out) {
    cu_pdl_enter();
    __shared__ float cl[DR_K];
    __shared__ int ci[DR_K];
    __shared__ double ce[DR_K], ss[DR_PICK / 32];
    __shared__ unsigned hist[256];
    __shared__ int count, m, kept, undecided;
    __shared__ int si[DR_PICK / 32];
    const int row = blockIdx.x, tid = threadIdx.x;
    const qdraw dr = cu_tab_at<qdraw>(d, row);
    const float mx = rmax[row];
    if (!(dr.temperature > 0.0) || mx == -INFINITY || draw_whole_row(&dr)) return; /* draw_kernel's answer stands */
    if (dr.top_k > DR_K) {
        if (tid == 0) out[row] = -1;
        return;
    }
    const float *xr = x + (int64_t)row * n_cols;
    const int k = dr.top_k > 0 ? dr.top_k : DR_K;
    /* the k-th largest of the chunks' maxima is k logits' value or less: nothing below it is among the first k */
    __shared__ float lo;
    if (tid == 0) lo = -INFINITY;
    __syncthreads();
    if (k <= chunks && tid < chunks) {
        const float *cm = cmax + (int64_t)row * chunks, v = cm[tid];
        int rank = 0;
        for (int c = 0; c < chunks; c++) rank += cm[c] > v || (cm[c] == v && c < tid);
        if (rank == k - 1) lo = v;
    }
    __syncthreads();
    dr_first_k(xr, n_cols, k, lo, cl, ci, hist, &count, &m);
    if (tid < count) ce[tid] = exp(((double)cl[tid] - (double)mx) / dr.temperature);
    __syncthreads();
    if (tid == 0) { /* draw_row's walk, in order: min-p, then top-p's share */
        double total = rmass[row], cum = 0.0;
        if (dr.top_k > 0) {
            total = 0.0;
            for (int j = 0; j < count && dr.top_p < 1.0; j++) total += ce[j];
        }
        int n = 0, closed = dr.top_k > 0 || count == m;
        for (; n < count && (double)cl[n] - (double)mx >= dr.min_rel; n++)
            if (dr.top_p < 1.0 && (cum += ce[n]) >= dr.top_p * total) {
                n++, closed = 1;
                break;
            }
        if (n < count) closed = 1; /* min-p cut it, or top-p closed */
        kept = n, undecided = !closed;
    }
    __syncthreads();
    if (undecided) {
        if (tid == 0) out[row] = -1;
        return;
    }
    double bs = 0.0;
    int bi = -1;
    if (tid < kept) bs = draw_score(cl[tid], dr.temperature, dr.key, ci[tid]), bi = ci[tid];
    am_warp(bs, bi);
    if ((tid & 31) == 0) ss[tid >> 5] = bs, si[tid >> 5] = bi;
    __syncthreads();
    if (tid == 0) {
        for (int w = 1; w < DR_PICK / 32; w++) am_take(bs, bi, ss[w], si[w]);
        out[row] = bi;
    }
}

qstatus cuda_draw(qbackend *be, const float *x, int n_rows, int n_cols, const qdraw *d, int32_t *out) {
    if (n_cols <= 0 || n_rows < 0 || n_cols > 65535 * DR_CHUNK || (n_rows > 0 && !d))
        return q_fail(Q_EINVAL, "cuda draw: %d rows of %d", n_rows, n_cols);
    if (n_rows == 0) return Q_OK;
    const unsigned chunks = cu_blocks(n_cols, DR_CHUNK);
    /* floats of scratch: rmax [rows], the chunks' maxima, rmass [rows doubles], the chunks' (score, index, mass) */
    const size_t rows = (size_t)n_rows, off_max = (rows + 1) / 2 * 2, off_mass = off_max + (chunks * rows + 1) / 2 * 2;
    const size_t off_draw = off_mass + 2 * rows;
    float *part = NULL;
    unsigned *tick = NULL;
    void *pre = NULL;
    /* the decode matmul's scratch, as argmax's: ops run in stream order, so their uses never overlap */
    Q_TRY(cu_gemv_scratch(be, off_draw + 8 * chunks * rows, rows, 0, &part, &tick, &pre));
    cu_tab t;
    Q_TRY(cu_tab_make(be, d, rows * sizeof *d, &t));
    const dim3 grid((unsigned)n_rows, chunks);
    double *rmass = (double *)(part + off_mass);
    CU_TRY(cu_launch(draw_max_kernel, grid, DR_THREADS, 0, cu_stream(be), x, n_cols, part + off_max, tick, part),
           "draw (max)");
    CU_TRY(cu_launch(draw_kernel, grid, DR_THREADS, 0, cu_stream(be), x, n_cols, t, (const float *)part,
                     (double *)(part + off_draw), tick, rmass, out),
           "draw");
    int pick = 0;
    for (int r = 0; r < n_rows; r++) pick |= d[r].temperature > 0.0 && !draw_whole_row(&d[r]);
    if (pick)
        CU_TRY(cu_launch(draw_pick_kernel, (unsigned)n_rows, DR_PICK, 0, cu_stream(be), x, n_cols, t,
                         (const float *)part, (const float *)(part + off_max), (int)chunks, (const double *)rmass, out),
               "draw (top-k, top-p)");
    return Q_OK;
}
