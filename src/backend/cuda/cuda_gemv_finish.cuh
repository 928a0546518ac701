/* cuda_gemv_finish.cuh: the decode matmul's split-K finish (cuda_gemv.cuh): each K slice's sums written, and the
 * last block of an (output block, row chunk) to take its ticket adds the slices' partials in slice order; with a
 * residual (resid_matmul) the sums go into it and its rows' sums of squares are left for the next norm. Included by
 * cuda_gemv.cuh; gemv_dq_kernel's cluster finish (cuda_gemv_dq.cuh) gives the same bits. */
#ifndef QUILL_CUDA_GEMV_FINISH_CUH
#define QUILL_CUDA_GEMV_FINISH_CUH

#include "cuda_split_rows.cuh"

/* The first S <= SMAX of an output's partials, load(q) for slice q, every load out first, then added in slice order.
 * gt_finish's SUM_BY_S takes one template per S for S = 2, 4, 6, 8 (gemv_tc_split's are powers of two, or dequant
 * mode's 6; any other S takes the predicated GT_MAX_SPLIT form): that loop over 16 predicated slices cost the many-row
 * finish ~110 instructions an output (ncu, session 13). The partials come from global memory (gt_sum_slices) or, in a
 * cluster finish, from the shared memory of the cluster's blocks, rank q holding slice q (gt_sum_cluster). */
template <int SMAX, typename Load> __device__ __forceinline__ float gt_sum_in_order(Load load, int S) {
    float v[SMAX];
#pragma unroll
    for (int q = 0; q < SMAX; q++) v[q] = q < S ? load(q) : 0.0f;
    float sum = v[0];
#pragma unroll
    for (int q = 1; q < SMAX; q++)
        if (q < S) sum += v[q];
    return sum;
}
template <int SMAX>
__device__ __forceinline__ float gt_sum_slices(const float *__restrict__ p, int64_t stride, int S = SMAX) {
    return gt_sum_in_order<SMAX>([&](int q) { return __ldcg(p + q * stride); }, S);
}
template <int SMAX> __device__ __forceinline__ float gt_sum_cluster(uint32_t at, int S = SMAX) {
    return gt_sum_in_order<SMAX>([&](int q) { return cu_cluster_ld(cu_cluster_map(at, q)); }, S);
}

/* ss[r][ob] of a block's rows row_first .. row_first + rows - 1 (none when rows <= 0), their squares in sq
 * (GT_OUT a row): each quarter of a row through warp_sum and the quarters added as (q0 + q1) + (q2 + q3), the
 * same whatever the row count or the finish (gt_finish, gemv_dq_kernel's cluster). */
__device__ __forceinline__ void gt_store_squares(const float *sq, int rows, int row_first, int64_t parts, int64_t ob,
                                                 float *__restrict__ ss, int lane) {
    for (int j = threadIdx.x >> 5; j < rows; j += GT_WARPS) {
        float q[GT_OUT / 32];
#pragma unroll
        for (int c = 0; c < GT_OUT / 32; c++) q[c] = warp_sum(sq[j * GT_OUT + 32 * c + lane]);
        if (lane == 0) ss[(row_first + j) * parts + ob] = (q[0] + q[1]) + (q[2] + q[3]);
    }
}

/* The residual's new value v of row r, output o, as the next norm's consumer takes it (gt_norm_after): bf16(v * w) in
 * its split rows for K = n_out. */
__device__ __forceinline__ void gt_next_store(unsigned short *__restrict__ nx, int64_t U, int64_t r, int o, float v,
                                              float w) {
    gt_split_store(nx, U, r, o, __fmul_rn(v, w));
}
/* The next norm's weight of this thread's output in the finishes' loops (output ob GT_OUT + threadIdx.x % GT_OUT
 * in every round: GT_THREADS is a multiple of GT_OUT), loaded before their barriers. */
static_assert(GT_THREADS % GT_OUT == 0, "a thread's outputs in the finish are one column");
__device__ __forceinline__ float gt_next_w(const float *__restrict__ nx_w, int64_t ob, int64_t n_out) {
    return nx_w ? __ldg(nx_w + min(ob * GT_OUT + (int64_t)(threadIdx.x % GT_OUT), n_out - 1)) : 0.0f;
}

#ifndef GT_TICKET_ACQREL
#define GT_TICKET_ACQREL 1
#endif
/* Writes the slice's sums and, with S > 1, the last block of (output block, row chunk) to arrive
 * sums the S partials in the order s = 0..S-1 and resets the ticket. With ss (op resid_matmul) y is the
 * residual: the sums are added to it (y = y + sum, as add_rmsnorm adds), and the block that writes them
 * (the last, or with S = 1 each, reading its values back) leaves ss[r][ob], the sum of squares of row r's
 * QNORM_PART new values: the squares go to the dynamic shared memory (the main loop is done with it: every
 * path passes a barrier first; the launch sizes it, GT_SS_SMEM), then each quarter of a row through warp_sum
 * and the quarters added as (q0 + q1) + (q2 + q3), the same whatever the row count. (A warp_sum per row inside
 * the partials' loop cost the 64-row producers ~4 us a call, session 12.) */
static_assert(GT_OUT == QNORM_PART, "a block's outputs are one part of the residual's sums of squares");
#define GT_SS_SMEM(rows) ((size_t)GT_OUT * (rows) * sizeof(float)) /* the squares of a block's rows */
/* sc: gt_norm_after's row scales (shared, [row - row0]), or NULL; nx, nx_w: the job's (with ss).
 * cl (RT = 4, S > 1): the launch puts this weight's S slices of the tile in one thread block cluster, slice s at rank s
 * (gt_job's cl), and the slices' sums meet in shared memory instead of partials and a ticket: each block leaves its
 * sums past the squares' room (GT_CL_SMEM), and after the cluster's barrier the slice-0 block adds the S of them in
 * slice order (gt_sum_cluster: the bits of the partials' sum) and writes what the ticket's last block would; a second,
 * relaxed barrier keeps every block's shared memory until it has read them. No L2 round trips for the ticket's atomic
 * and the partials' loads. */
#define GT_CL_SMEM(rows) (2 * GT_SS_SMEM(rows)) /* the squares, then the sums */
template <int Q, int NT, bool SUM_BY_S, int RT = 4, bool DQ = false>
__device__ __forceinline__ void gt_finish(const float (&acc)[NT][4], int n, const qweight &W, float *__restrict__ y,
                                          float *__restrict__ part, unsigned *__restrict__ tick, int S, int s, int row0,
                                          int nt, int64_t ob, int64_t o0, bool wact, int lane, int bx, int *last,
                                          float *__restrict__ ss, const float *sc = nullptr,
                                          unsigned short *__restrict__ nx = nullptr, const float *nx_w = nullptr,
                                          bool cl = false) {
    extern __shared__ uint4 gt_smem[];
    float *sq = (float *)gt_smem; /* ss: [row - row0][GT_OUT] */
    float *sums = sq + GT_OUT * RT * NT; /* cl: [row - row0][GT_OUT] */
    cl = RT == 4 && cl && S > 1;
    float *dst = cl ? sums - (int64_t)row0 * GT_OUT - ob * GT_OUT : S > 1 ? part + (int64_t)s * n * W.n_out : y;
    const int64_t ld = cl ? GT_OUT : W.n_out; /* dst's row stride */
    const bool add = ss && S == 1; /* one slice: its sums go straight into the residual */
    const bool scaled = sc && S == 1; /* one slice: its sums are the row's */
    const int g = lane >> 2, t = lane & 3;
    const float nwv = ss ? gt_next_w(nx_w, ob, W.n_out) : 0.0f;
    if (cl) __syncthreads(); /* every warp is done with the staged x the sums go over */
    if (wact && RT == 8) { /* acc[T] = {og, og, og8, og8} x rows {8T + 2t, 8T + 2t + 1} (gt_unit) */
#pragma unroll
        for (int T = 0; T < NT; T++) {
            if (T >= nt) break;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int r = row0 + 8 * T + 2 * t + (c & 1);
                const int64_t o = o0 + g + (c >> 1) * 8;
                float *d = dst + (int64_t)r * W.n_out + o;
                if (r < n && o < W.n_out)
                    d[0] = add ? d[0] + acc[T][c] : scaled ? __fmul_rn(acc[T][c], sc[r - row0]) : acc[T][c];
            }
        }
    } else if (wact) {
#pragma unroll
        for (int T = 0; T < NT; T++) {
            if (T >= nt) break;
            const int r = row0 + 4 * T + t;
            const bool fold = Q && !DQ; /* a folded unit's sums, else a chain's hi + lo columns */
            float v0 = fold ? acc[T][0] : acc[T][0] + acc[T][1], v1 = fold ? acc[T][1] : acc[T][2] + acc[T][3];
            float *d = dst + (int64_t)r * ld + o0 + g;
            if (r < n) {
                if (scaled) v0 = __fmul_rn(v0, sc[r - row0]), v1 = __fmul_rn(v1, sc[r - row0]);
                if (o0 + g < W.n_out) d[0] = add ? d[0] + v0 : v0;
                if (o0 + g + 8 < W.n_out) d[8] = add ? d[8] + v1 : v1;
            }
        }
    }
    if (S == 1) {
        if (!ss) return;
        __syncthreads(); /* the block's new values are written (read back below) and the shared memory is free */
    } else if (cl) {
        if (threadIdx.x == 0) *last = s == 0;
        cu_cluster_sync();
        if (s != 0) {
            cu_cluster_sync_relaxed(); /* the slice-0 block is done reading this one's sums */
            return;
        }
    } else {
        /* One ordering point, in the thread that takes the ticket: the barrier orders every thread's partial
         * before it and release is cumulative (PTX memory model), so the block's partials are visible before
         * its ticket; acquire orders the last block's reads (after the second barrier) after everyone's
         * partials. GT_TICKET_ACQREL 0: a sequentially consistent fence on each side instead (MEMBAR.SC.GPU;
         * a fence in every thread was 9 % of a small matmul's samples, ncu). */
        __syncthreads();
        if (threadIdx.x == 0) {
#if GT_TICKET_ACQREL
            *last = cu_ticket_take(tick + bx) == (unsigned)(S - 1);
#else
            __threadfence();
            *last = atomicAdd(&tick[bx], 1u) == (unsigned)(S - 1);
            __threadfence();
#endif
        }
        __syncthreads();
        if (!*last) return;
        if (threadIdx.x == 0) tick[bx] = 0; /* ready for the next call */
    }
    const int rows_here = min(RT * NT, n - row0);
    for (int i = threadIdx.x; i < GT_OUT * rows_here; i += GT_THREADS) {
        const int64_t o = ob * GT_OUT + (i % GT_OUT), r = row0 + i / GT_OUT;
        float v = 0.0f;
        if (o < W.n_out) {
            const int64_t idx = r * W.n_out + o, stride = (int64_t)n * W.n_out;
            if (S == 1) {
                v = y[idx];
            } else {
                const float res = ss ? y[idx] : 0.0f;
                const float *pp = part + idx;
                if (cl) { /* item i is row row0 + i / GT_OUT, output i % GT_OUT of the block: sums[i] */
                    const uint32_t at = cu_smem_addr(sums + i);
                    v = S == 2 ? gt_sum_cluster<2>(at) : S == 4 ? gt_sum_cluster<4>(at) : gt_sum_cluster<8>(at, S);
                } else if (SUM_BY_S) /* many rows, 4-bit one row; the bf16 one-row kernels keep the loop (head +8 % else) */
                    v = S == 2 ? gt_sum_slices<2>(pp, stride) : S == 4 ? gt_sum_slices<4>(pp, stride)
                        : S == 6 ? gt_sum_slices<6>(pp, stride) : S == 8 ? gt_sum_slices<8>(pp, stride)
                        : gt_sum_slices<GT_MAX_SPLIT>(pp, stride, S);
                else
                    v = gt_sum_slices<GT_MAX_SPLIT>(pp, stride, S);
                if (ss) v = res + v;
                else if (sc) v = __fmul_rn(v, sc[r - row0]);
                y[idx] = v;
            }
            if (nx) gt_next_store(nx, W.n_out / 64, r, (int)o, v, nwv);
        }
        if (ss) sq[i] = v * v;
    }
    if (cl) cu_cluster_sync_relaxed(); /* every block's sums are read */
    if (!ss) return;
    __syncthreads();
    gt_store_squares(sq, rows_here, row0, (W.n_out + GT_OUT - 1) / GT_OUT, ob, ss, lane);
}

#endif
