/* cuda_gdn.cu: the Gated DeltaNet's gated delta rule (also with the conv and the gates inside it, conv_gated_delta;
 * the conv and the gates on their own: cuda_gdn_conv.cu).
 * Gated delta rule: seqs marked chunked (prompt rows) go to the chunked rule in cuda_gdn_chunked.cu
 * (when dk, dv are multiples of 32, dk <= 128); the others (decode, drafts) run the recurrent rule
 * token by token here. A seq's arithmetic depends only on its own rows: EXACT(batch), EXACT(chunk).
 * Recurrent kernel: each column j of a head's state S[h][:][j] evolves on its own; a block owns 32
 * columns (one per lane; bf16 states: 64, a pair per lane) with the k rows split over dk/32 warps (see
 * gated_delta_body). One launch for all seqs: grid (Hv, dv / 32 or 64, seq).
 * Layouts (backend.h): qkv [n][2*Hk*dk + Hv*dv]; g, beta [n][Hv]; S [Hv][dk][dv] f32 or bf16 (dims.state_bf16);
 * out [n][Hv][dv]. Floor: S read and written once per seq per launch (2 * Hv*dk*dv * 4 or 2 bytes) plus the rows. */
#include <limits.h>
#include <stdlib.h>

#include "cuda_gdn_rows.cuh"
#include "cuda_gdn_seqs.cuh"
#include "cuda_gemv_trace.cuh"

#define GDN_MAX_PER_LANE 8 /* dk <= 256 */

/* cuda_gdn_chunked.cu: the chunked rule for prompt seqs; _ok says whether it takes this shape */
int cuda_gdn_chunked_ok(qgdn_dims d);
qstatus cuda_gdn_chunked(qbackend *be, const float *qkv, const float *g, const float *beta, const qseq *seqs,
                         int n_seqs, float *const *S, qgdn_dims d, float *out);

/* Recurrent rule: a block owns 32 CP columns j of one head's state (lane = CP adjacent columns, so every state
 * access is a coalesced row) and the k rows are split over dk/32 warps, 32 CP state values per thread in
 * registers. Per token: q and k go through shared memory (their norms are fixed-order warp sums, the same in
 * every warp); the dot products k.S[:,j] and q.S[:,j], both of the state before the token, are each thread's
 * 32-term fma chains per column, then the warps' partials summed in warp order; the output follows from them and
 * q.k without a pass over the new state (gated_delta_body). A column's arithmetic is the same whatever CP (CP 2:
 * bf16 states only, the pair of columns one 4-byte word, so a warp's load is a 128-byte line and a block's fixed
 * costs, the token's barriers and q / k loads, cover twice the state). */
/* conv_gated_delta's extras: the conv's weights [C][GDN_CONV_K], the gates' operands (their g and beta are not
 * written) and one ticket counter per (seq, k head) in the matmul's scratch (zero, and left zero). */
#define GDN_CONV_K 4
#ifndef GDN_TRACE_END /* a probe: GT_TRACE builds with 1 mark the rule's end instead (wait, dots, stores, ticket) */
#define GDN_TRACE_END 0
#endif
#ifndef GDN_FUSE_SEQS
#define GDN_FUSE_SEQS 4 /* more seqs take the two launches: the fused kernel's 128 registers cost the state streaming */
#endif
struct gdn_conv {
    const float *w;
    qgdn_gates gates;
    unsigned *tick;
#if GT_TRACE
    gt_trace_sink trace; /* tests/cuda/trace_step.sh: each block's marks (gated_delta_body) */
#endif
};

/* One channel of the conv: the window of its last GDN_CONV_K - 1 inputs, oldest first, and its weights; step() is
 * conv1d_silu_kernel's arithmetic for the next input. */
struct gdn_conv_ch {
    float win[GDN_CONV_K - 1], wc[GDN_CONV_K];
    __device__ void load(const float *state, const float *w, int64_t C, int64_t c) {
#pragma unroll
        for (int j = 0; j < GDN_CONV_K - 1; j++) win[j] = state[j * C + c];
#pragma unroll
        for (int j = 0; j < GDN_CONV_K; j++) wc[j] = w[c * GDN_CONV_K + j];
    }
    __device__ float step(float xt) {
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < GDN_CONV_K - 1; j++) s = fmaf(wc[j], win[j], s);
        s = fmaf(wc[GDN_CONV_K - 1], xt, s);
#pragma unroll
        for (int j = 0; j < GDN_CONV_K - 2; j++) win[j] = win[j + 1];
        win[GDN_CONV_K - 2] = xt;
        return silu_f(s);
    }
    __device__ void store(float *state, int64_t C, int64_t c) const {
#pragma unroll
        for (int j = 0; j < GDN_CONV_K - 1; j++) state[j * C + c] = win[j];
    }
};

/* Value h (0: the low half) of a register holding two bf16 state values, as f32. */
__device__ __forceinline__ float gdn_unpack(uint32_t v, int h) { return __uint_as_float(h ? v & 0xffff0000u : v << 16); }

template <bool CONV> __device__ __forceinline__ seq_desc2 gdn_seq_at(const cu_tab &t, int i) {
    if constexpr (CONV) return cu_tab_at<seq_desc2>(t, i);
    const seq_desc e = cu_tab_at<seq_desc>(t, i);
    return seq_desc2{e.row0, e.n_rows, e.state, NULL};
}

/* CONV (conv_gated_delta): qkv is the conv's input; each block runs the conv for the channels it reads (its k head's
 * q and k, thread i channel i; its 32 v columns, in every warp) and the gates of its head, as conv1d_silu_gates
 * would, so the values are bitwise theirs. The v state is read and written by its one block; a k head's q and k
 * states are read by all (Hv / Hk) x (dv / 32) blocks of its heads, and the last of them to take the ticket (after
 * every one has read them) writes them. The ticket goes out as soon as the block's threads have used the windows they
 * read (the first token's conv), so its round trip overlaps the rule (docs/performance.md, thirty-sixth pass). */
/* ROWS: the gated norm's rows for out_proj as each token's outputs are made (cuda_gdn_rows.cuh; dv = 128, the grid's
 * x the B blocks of a head, one cluster). */
template <bool CONV, bool SB, int CP = 1, bool ROWS = false>
__device__ __forceinline__ void gated_delta_body(const float *__restrict__ qkv, const float *__restrict__ g,
                                                 const float *__restrict__ beta, const cu_tab &seqs, const qgdn_dims &d,
                                                 float *__restrict__ out, const gdn_conv &cv, const gdn_rows &rw, int h,
                                                 int by, int z) {
    /* GT_TRACE builds, CONV: thread 0's marks, cycles from the start: the wait passed, token 0's q and k staged, its
     * gates and v made, its dot products summed (past their barrier); the record at the end (cuda_gemv_trace.cuh) */
    GT_TRACER(trace);
    if constexpr (CONV) trace.start();
    /* the states' loads before the wait where the caller says the op before did not write them (d.states_settled) */
    const bool early = d.states_settled;
    if (!early) cu_pdl_enter();
    static_assert(CP == 1 || (CP == 2 && SB && !CONV), "column pairs: bf16 states, the plain rule");
    __shared__ float sq[32 * GDN_MAX_PER_LANE], sk[32 * GDN_MAX_PER_LANE];
    __shared__ float part[GDN_MAX_PER_LANE][32 * CP], partq[GDN_MAX_PER_LANE][32 * CP]; /* the warps' k.S, q.S */
    __shared__ __align__(16) float sqn[32 * GDN_MAX_PER_LANE], skn[32 * GDN_MAX_PER_LANE]; /* q qn, k kn */
    __shared__ int writer;
    __shared__ float rows_qs[ROWS ? 2 * 8 * CP : 1]; /* gdn_rows_token's quad sums */
    const seq_desc2 sd = gdn_seq_at<CONV>(seqs, z);
    const int row0 = sd.row0, n_rows = sd.n_rows;
    float *S = sd.state;
    if (n_rows == 0) { /* an empty seq may come with no state (as on the CPU) */
        if (early) cu_pdl_enter();
        return;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = d.k_dim / 32;
    const int j = (by * 32 + lane) * CP, k0 = warp * 32;
    const bool col = j < d.v_dim; /* lanes past dv hold zeros and write nothing (CP 2: dv is even) */
    const int hk = h / (d.n_v_heads / d.n_k_heads);
    const int64_t width = 2LL * d.n_k_heads * d.k_dim + (int64_t)d.n_v_heads * d.v_dim;
    const float qscale = rsqrtf((float)d.k_dim);
    /* the thread's 32 state values, f32 or (SB: d.state_bf16) bf16, rounded again after every token as a stored state
     * (an instance each: the bf16 branches cost the f32 kernel 14 registers) */
    const int64_t s_off = (int64_t)h * d.k_dim * d.v_dim + (int64_t)k0 * d.v_dim + j;
    float *Sh = S + s_off;
    __nv_bfloat16 *Sb = (__nv_bfloat16 *)S + s_off;
    /* SB: the values stay bf16 between tokens, two to a register (CP 1: sp[i] holds rows c = 2i low, 2i + 1 high;
     * CP 2: sp[c] holds row c of columns j low, j + 1 high, as stored), so the kernel holds half the registers and
     * more blocks stream states at once; a token unpacks them (s * decay twice, the same bits each time) and packs
     * the rounded new state */
    float s[SB ? 1 : 32];
    uint32_t sp[SB ? 16 * CP : 1];
    if constexpr (CP == 2) { /* every lane loads (past dv: the last pair), then takes 0, as below */
        const uint32_t *Sr = (const uint32_t *)((const unsigned short *)S + (s_off - j + (col ? j : d.v_dim - 2)));
        uint32_t raw[32];
#pragma unroll
        for (int c = 0; c < 32; c++) raw[c] = Sr[(int64_t)c * (d.v_dim / 2)];
#pragma unroll
        for (int c = 0; c < 32; c++) sp[c] = col ? raw[c] : 0u;
    } else if constexpr (SB) {
        /* every lane loads (a lane past dv a valid column, then takes 0), with no branch: behind `col ? load : 0` the
         * compiler waited for each pair of loads before the next pair, 16 round trips (ncu, 64 streams: 92 us a
         * launch against f32's 77) */
        const unsigned short *Sr = (const unsigned short *)S + (s_off - j + (col ? j : d.v_dim - 1));
        unsigned short raw[32];
#pragma unroll
        for (int c = 0; c < 32; c++) raw[c] = Sr[(int64_t)c * d.v_dim];
#pragma unroll
        for (int i = 0; i < 16; i++) sp[i] = col ? (uint32_t)raw[2 * i] | (uint32_t)raw[2 * i + 1] << 16 : 0u;
    } else {
#pragma unroll
        for (int c = 0; c < 32; c++) s[c] = col ? Sh[(int64_t)c * d.v_dim] : 0.0f;
    }
    if (!CONV && early) cu_pdl_enter(); /* q, k, v and the gates are the op before's */
    /* CONV: thread i's q and k channels, the lane's v channel (blockDim.x == dk) */
    const int64_t cq = (int64_t)hk * d.k_dim + threadIdx.x, ck = cq + (int64_t)d.n_k_heads * d.k_dim;
    const int64_t cvj = 2LL * d.n_k_heads * d.k_dim + (int64_t)h * d.v_dim + (col ? j : 0);
    gdn_conv_ch wq, wk, wv;
    unsigned ticket = 0; /* CONV, thread 0: the readers of this k head's q and k states before this block */
    float neg_ea = 0.0f, dt_bias = 0.0f; /* CONV: the head's gate weights, -exp(A_log) and dt_bias */
    if constexpr (CONV) { /* the states and weights (before the wait where early; the gate weights always: no op
                           * writes them, and the weight stream has likely pushed them out of L2 since the last step) */
        neg_ea = -expf(cv.gates.A_log[h]), dt_bias = cv.gates.dt_bias[h];
        wq.load(sd.conv, cv.w, width, cq), wk.load(sd.conv, cv.w, width, ck), wv.load(sd.conv, cv.w, width, cvj);
        if (early) cu_pdl_enter();
        trace.mark(0);
    }
    for (int t = 0; t < n_rows; t++) {
        const float *row = qkv + (int64_t)(row0 + t) * width;
        const float *qh = row + (int64_t)hk * d.k_dim, *kh = row + (int64_t)(d.n_k_heads + hk) * d.k_dim;
        const int64_t gi = (int64_t)(row0 + t) * d.n_v_heads + h;
        float a_in = 0.0f, b_in = 0.0f, v_in = 0.0f; /* CONV: the token's gate inputs and v input, loaded with q, k */
        if constexpr (CONV) a_in = cv.gates.a[gi], b_in = cv.gates.b[gi], v_in = row[cvj];
        __syncthreads(); /* the previous token is done with sq, sk and part */
        if constexpr (CONV) sq[threadIdx.x] = wq.step(row[cq]), sk[threadIdx.x] = wk.step(row[ck]);
        else
            for (int i = threadIdx.x; i < d.k_dim; i += blockDim.x) sq[i] = qh[i], sk[i] = kh[i];
        __syncthreads();
        if (CONV && t == 0 && !GDN_TRACE_END) trace.mark(1);
        if (CONV && t == 0 && threadIdx.x == 0) /* every thread has used the q and k windows it read */
            ticket = cu_ticket_arrive(cv.tick + (int64_t)blockIdx.z * d.n_k_heads + hk);
        float qq = 0.0f, kk = 0.0f, kq = 0.0f; /* every warp: the same fixed-order sums */
        for (int c = 0; c < n_warps; c++) {
            const float a = sq[lane + 32 * c], b = sk[lane + 32 * c];
            qq = fmaf(a, a, qq);
            kk = fmaf(b, b, kk);
        }
        const float qn = rsqrtf(warp_sum(qq) + 1e-6f) * qscale, kn = rsqrtf(warp_sum(kk) + 1e-6f);
        /* (q qn) . (k kn) over the head's rows, for o below (the same products as sqn and skn) */
        for (int c = 0; c < n_warps; c++) kq = fmaf(sq[lane + 32 * c] * qn, sk[lane + 32 * c] * kn, kq);
        kq = warp_sum(kq);
        /* the warp's own 32 rows of q qn and k kn, made once (the same products every thread made for itself) */
        sqn[k0 + lane] = sq[k0 + lane] * qn, skn[k0 + lane] = sk[k0 + lane] * kn;
        __syncwarp();
        float decay, b, vj[CP];
        if constexpr (CONV) { /* gdn_gate_at's arithmetic; v through its conv (every lane: the window moves) */
            const float u = a_in + dt_bias;
            const float sp = u > 20.0f ? u : log1pf(expf(u));
            decay = expf(neg_ea * sp), b = sigmoid_f(b_in);
            const float v = wv.step(v_in);
            vj[0] = col ? v : 0.0f;
            if (t == 0 && !GDN_TRACE_END) trace.mark(2);
        } else {
            decay = expf(g[gi]), b = beta[gi];
#pragma unroll
            for (int e = 0; e < CP; e++)
                vj[e] = col ? row[2LL * d.n_k_heads * d.k_dim + (int64_t)h * d.v_dim + j + e] : 0.0f;
        }
        /* SB: half x of register r holds row c of column e (the packing above) */
        auto row_of = [](int r, int x) { return CP == 1 ? 2 * r + x : r; };
        auto col_of = [](int x) { return CP == 1 ? 0 : x; };
        /* One pass over the old state S for both products: with S' = decay S + k delta^T (delta = beta (v - k.S')
         * and k.S' = decay k.S before the update), q.S' = decay q.S + (q.k) delta, so the output needs no second
         * pass over the new state and no second reduction (three barriers a token, not five). */
        float dk[CP], dq[CP];
#pragma unroll
        for (int e = 0; e < CP; e++) dk[e] = 0.0f, dq[e] = 0.0f;
        if constexpr (SB) { /* every column's chains in row order */
#pragma unroll
            for (int r = 0; r < 16 * CP; r++)
#pragma unroll
                for (int x = 0; x < 2; x++) {
                    const int c = row_of(r, x), e = col_of(x);
                    const float sv = gdn_unpack(sp[r], x);
                    dk[e] = fmaf(sv, skn[k0 + c], dk[e]);
                    dq[e] = fmaf(sv, sqn[k0 + c], dq[e]);
                }
        } else {
#pragma unroll
            for (int c = 0; c < 32; c++) {
                dk[0] = fmaf(s[c], skn[k0 + c], dk[0]);
                dq[0] = fmaf(s[c], sqn[k0 + c], dq[0]);
            }
        }
#pragma unroll
        for (int e = 0; e < CP; e++) part[warp][CP * lane + e] = dk[e], partq[warp][CP * lane + e] = dq[e];
        __syncthreads();
        if (CONV && t == 0) trace.mark(GDN_TRACE_END ? 1 : 3);
        float delta[CP], o[CP];
#pragma unroll
        for (int e = 0; e < CP; e++) {
            float kS = 0.0f, qS = 0.0f; /* the warps' partials in warp order */
            for (int w = 0; w < n_warps; w++) kS += part[w][CP * lane + e], qS += partq[w][CP * lane + e];
            delta[e] = b * (vj[e] - decay * kS);
            o[e] = 0.0f;
            if (warp == 0 && col)
                out[((int64_t)(row0 + t) * d.n_v_heads + h) * d.v_dim + j + e] = o[e] = fmaf(delta[e], kq, decay * qS);
        }
        /* S' = decay S + k delta^T, rounded to a stored bf16 pair where SB */
        if constexpr (SB) {
#pragma unroll
            for (int r = 0; r < 16 * CP; r++) {
                float nw[2];
#pragma unroll
                for (int x = 0; x < 2; x++) {
                    const int c = row_of(r, x), e = col_of(x);
                    nw[x] = fmaf(skn[k0 + c], delta[e], gdn_unpack(sp[r], x) * decay);
                }
                const __nv_bfloat162 p = __floats2bfloat162_rn(nw[0], nw[1]); /* .x low */
                sp[r] = *(const uint32_t *)&p;
            }
        } else {
#pragma unroll
            for (int c = 0; c < 32; c++) s[c] = fmaf(skn[k0 + c], delta[0], s[c] * decay);
        }
        if constexpr (ROWS) gdn_rows_token<CP>(rw, o, rows_qs, t, row0 + t, h, j, d.n_v_heads, warp, lane);
    }
    if constexpr (ROWS) cu_cluster_sync_relaxed(); /* the other blocks are done reading this one's quad sums */
    if (col) {
#pragma unroll
        for (int c = 0; c < 32; c++) {
            if constexpr (CP == 2) ((uint32_t *)Sb)[(int64_t)c * (d.v_dim / 2)] = sp[c];
            else if constexpr (SB)
                ((unsigned short *)Sb)[(int64_t)c * d.v_dim] = (unsigned short)(sp[c / 2] >> 16 * (c & 1));
            else Sh[(int64_t)c * d.v_dim] = s[c];
        }
    }
    if constexpr (CONV) {
        if (warp == 0 && col) wv.store(sd.conv, width, cvj);
        if (GDN_TRACE_END) trace.mark(2);
        if (threadIdx.x == 0) {
            writer = ticket == (unsigned)(d.n_v_heads / d.n_k_heads) * gridDim.y - 1; /* the last reader */
            if (writer) {
                cu_fence_acquire();
                cv.tick[(int64_t)blockIdx.z * d.n_k_heads + hk] = 0; /* ready for the next call (recomputed: a pointer
                                                                      * kept across the loop spilled 16 bytes) */
            }
            if (GDN_TRACE_END) trace.mark(3);
        }
        __syncthreads();
        if (writer) wq.store(sd.conv, width, cq), wk.store(sd.conv, width, ck);
#if GT_TRACE /* key: the seq's state (a layer); n_out 0: a rule's record; K the head, S the column block */
        trace.write_to(cv.trace, S, 0, h, by, blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z),
                       gridDim.x * gridDim.y * gridDim.z);
#endif
    }
}

/* ROWS: the grid's x and y swapped (a head's blocks one cluster, gdn_rows_token). */
template <bool CONV, bool SB, bool ROWS = false>
__global__ void __launch_bounds__(GDN_MAX_PER_LANE * 32)
gated_delta_kernel(const float *__restrict__ qkv, const float *__restrict__ g, const float *__restrict__ beta,
                   const __grid_constant__ cu_tab seqs, qgdn_dims d, float *__restrict__ out, const gdn_conv cv,
                   const gdn_rows rw) {
    gated_delta_body<CONV, SB, 1, ROWS>(qkv, g, beta, seqs, d, out, cv, rw, ROWS ? blockIdx.y : blockIdx.x,
                                        ROWS ? blockIdx.x : blockIdx.y, blockIdx.z);
}
/* The bf16-state rule budgeted for 5 blocks of 256 threads an SM (48 registers): 10 of the 128-thread blocks of dk = 128
 * stream states at once instead of 8 (QUILL_CUDA_GDN_SB_MINB=1 takes the one above: an A/B, the same bits). */
__global__ void __launch_bounds__(GDN_MAX_PER_LANE * 32, 5)
gated_delta_sb_lean_kernel(const float *__restrict__ qkv, const float *__restrict__ g, const float *__restrict__ beta,
                           const __grid_constant__ cu_tab seqs, qgdn_dims d, float *__restrict__ out, const gdn_conv cv,
                           const gdn_rows rw) {
    gated_delta_body<false, true>(qkv, g, beta, seqs, d, out, cv, rw, blockIdx.x, blockIdx.y, blockIdx.z);
}
/* The bf16-state rule with column pairs (CP 2), budgeted for MINB blocks of 256 threads an SM: 2 (128 registers, 4
 * of the 128-thread blocks of dk = 128 an SM) or 3 (80 registers, 6 blocks, no spills). The instances differ
 * only in their registers, so a launch takes either by its seq count and a row's bits do not change (gdn_pairs). */
template <int MINB, bool ROWS = false>
__global__ void __launch_bounds__(GDN_MAX_PER_LANE * 32, MINB)
gated_delta_sb_pairs_kernel(const float *__restrict__ qkv, const float *__restrict__ g, const float *__restrict__ beta,
                            const __grid_constant__ cu_tab seqs, qgdn_dims d, float *__restrict__ out,
                            const gdn_conv cv, const gdn_rows rw) {
    gated_delta_body<false, true, 2, ROWS>(qkv, g, beta, seqs, d, out, cv, rw, ROWS ? blockIdx.y : blockIdx.x,
                                           ROWS ? blockIdx.x : blockIdx.y, blockIdx.z);
}

/* The bf16-state rule's kernel: 0 the lean one (a column a lane), else the column pairs' MINB.
 * QUILL_CUDA_GDN_SB_PAIRS=0 takes the lean kernel, =2 or =3 that MINB at every seq count (A/Bs; the same bits).
 * Measured (9B, 4-bit, dequant mode, docs/performance.md twenty-sixth pass): MINB 2 the faster at 16 streams, 3 at
 * 64. */
static int gdn_pairs(int n_seqs) {
    static int env = -1;
    const int v = cu_env_int("QUILL_CUDA_GDN_SB_PAIRS", &env, 1, 0, 3);
    return v != 1 ? v : n_seqs <= 16 ? 2 : 3;
}

qstatus cuda_gated_delta(qbackend *be, const float *qkv, const float *g, const float *beta, const qseq *seqs,
                         int n_seqs, float *const *S, qgdn_dims dims, float *out) {
    if (dims.k_dim % 32 || dims.k_dim > 32 * GDN_MAX_PER_LANE || dims.n_k_heads <= 0 ||
        dims.n_v_heads % dims.n_k_heads)
        return q_fail(Q_EINVAL, "cuda gated_delta: dk %d, heads %d/%d not supported", dims.k_dim, dims.n_v_heads,
                      dims.n_k_heads);
    const qglu *gn = dims.out_norm;
    dims.out_norm = NULL; /* a host pointer: the kernels' copies go without it */
    if (n_seqs <= 0) return Q_OK;
    /* prompt seqs (chunked = 1) run the chunked rule (cuda_gdn_chunked.cu) where the shape allows;
     * the recurrent kernel below then sees them as empty */
    int n_chunked = 0;
    if (cuda_gdn_chunked_ok(dims))
        for (int s = 0; s < n_seqs; s++) n_chunked += seqs[s].chunked && seqs[s].n_rows > 0;
    if (n_chunked > 0) {
        Q_TRY(cuda_gdn_chunked(be, qkv, g, beta, seqs, n_seqs, S, dims, out));
        if (n_chunked == n_seqs) return Q_OK;
    }
    cu_tab d;
    if (n_chunked == 0) {
        Q_TRY(seq_table(be, seqs, n_seqs, S, &d));
    } else {
        qseq *rec = (qseq *)malloc((size_t)n_seqs * sizeof *rec);
        if (!rec) return q_fail(Q_ENOMEM, "cuda gdn: out of memory");
        for (int s = 0; s < n_seqs; s++) {
            rec[s] = seqs[s];
            if (seqs[s].chunked) rec[s].n_rows = 0;
        }
        qstatus st = seq_table(be, rec, n_seqs, S, &d);
        free(rec);
        Q_TRY(st);
    }
    static int minb = -1; /* QUILL_CUDA_GDN_SB_MINB=1: the bf16-state kernel unbudgeted (an A/B; the same bits) */
    const bool lean = cu_env_int("QUILL_CUDA_GDN_SB_MINB", &minb, 5, 1, 1) != 1;
    const int pairs = dims.state_bf16 && lean && dims.v_dim % 2 == 0 ? gdn_pairs(n_seqs) : 0;
    const unsigned B = cu_blocks(dims.v_dim, pairs ? 64 : 32); /* a head's blocks */
    /* out_proj's gated norm rows where dequant mode's consumer takes them (cu_gate_rows) and the kernel can make
     * them: the recurrent rule on every row, heads of 128, f32 states or column pairs */
    gdn_rows rw = {};
    const bool gn_ok = gn && gn->norm_w && gn->act == QGLU_SILU && gn->dim == GDN_ROWS_DV && gn->g_stride == gn->dim;
    const int rows = gn_ok && n_chunked == 0 && dims.v_dim == GDN_ROWS_DV && (pairs || !dims.state_bf16)
                         ? cu_seq_rows_covered(seqs, n_seqs) : -1;
    Q_TRY(cu_gate_rows(be, CU_ROWS_GNORM, rows > 0 ? out : NULL, gn, rows, (int64_t)dims.n_v_heads * dims.v_dim,
                       &rw.xs));
    if (rw.xs) {
        rw.z = gn->g, rw.w = gn->norm_w, rw.eps = gn->norm_eps;
        const auto kr = !dims.state_bf16 ? gated_delta_kernel<false, false, true>
                        : pairs == 3     ? gated_delta_sb_pairs_kernel<3, true>
                                         : gated_delta_sb_pairs_kernel<2, true>;
        CU_TRY(cu_launch_ex(cu_pdl_on(), (int)B, kr, dim3(B, (unsigned)dims.n_v_heads, (unsigned)n_seqs), dims.k_dim,
                            0, cu_stream(be), qkv, g, beta, d, dims, out, gdn_conv{}, rw),
               "gated_delta (gated norm rows)");
        return Q_OK;
    }
    dim3 grid((unsigned)dims.n_v_heads, B, (unsigned)n_seqs);
    const auto kern = !dims.state_bf16 ? gated_delta_kernel<false, false>
                      : pairs == 3     ? gated_delta_sb_pairs_kernel<3>
                      : pairs          ? gated_delta_sb_pairs_kernel<2>
                      : lean           ? gated_delta_sb_lean_kernel
                                       : gated_delta_kernel<false, true>;
    CU_TRY(cu_launch(kern, grid, dims.k_dim, 0, cu_stream(be), qkv, g, beta, d, dims, out, gdn_conv{}, rw),
           "gated_delta");
    return Q_OK;
}

/* conv1d_silu_gates then gated_delta, in one launch where every seq runs the recurrent rule and the conv's width is
 * GDN_CONV_K (gated_delta_kernel CONV: y, g and beta are then not written); else the two ops. */
qstatus cuda_conv_gated_delta(qbackend *be, const float *x, const qseq *seqs, int n_seqs, float *const *conv_state,
                              const float *conv_w, int kernel, float *y, const qgdn_gates *gates, float *const *S,
                              qgdn_dims dims, float *out) {
    const int C = 2 * dims.n_k_heads * dims.k_dim + dims.n_v_heads * dims.v_dim;
    static int env = -1, most = -1; /* QUILL_CUDA_GDN_FUSE=0: never; QUILL_CUDA_GDN_FUSE_SEQS=N: up to N seqs (A/Bs; the same
                                     * bits) */
    int fused = kernel == GDN_CONV_K && gates->heads == dims.n_v_heads &&
                n_seqs <= cu_env_int("QUILL_CUDA_GDN_FUSE_SEQS", &most, GDN_FUSE_SEQS, 1, INT_MAX) &&
                cu_env_on("QUILL_CUDA_GDN_FUSE", &env);
    for (int s = 0; s < n_seqs; s++) fused &= !seqs[s].chunked;
    if (!fused || n_seqs <= 0) {
        Q_TRY(cuda_conv1d_silu_gates(be, x, seqs, n_seqs, conv_state, conv_w, C, kernel, y, gates));
        return cuda_gated_delta(be, y, gates->g, gates->beta, seqs, n_seqs, S, dims, out);
    }
    if (dims.k_dim % 32 || dims.k_dim > 32 * GDN_MAX_PER_LANE || dims.n_k_heads <= 0 ||
        dims.n_v_heads % dims.n_k_heads)
        return q_fail(Q_EINVAL, "cuda conv_gated_delta: dk %d, heads %d/%d not supported", dims.k_dim,
                      dims.n_v_heads, dims.n_k_heads);
    float *part = NULL;
    unsigned *tick = NULL;
    void *pre = NULL;
    unsigned short *no_rows = NULL;
    Q_TRY(cu_gate_rows(be, CU_ROWS_GNORM, NULL, NULL, 0, 0, &no_rows)); /* out_proj splits its input itself */
    dims.out_norm = NULL;
    Q_TRY(cu_gemv_scratch(be, 0, (size_t)n_seqs * (size_t)dims.n_k_heads, 0, &part, &tick, &pre));
    cu_tab d;
    Q_TRY(seq_table(be, seqs, n_seqs, S, &d, conv_state));
    gdn_conv cv = {conv_w, *gates, tick};
#if GT_TRACE
    cv.trace = cu_gemv_trace_sink();
#endif
    dim3 grid((unsigned)dims.n_v_heads, cu_blocks(dims.v_dim, 32), (unsigned)n_seqs);
    const auto kern = dims.state_bf16 ? gated_delta_kernel<true, true> : gated_delta_kernel<true, false>;
    CU_TRY(cu_launch(kern, grid, dims.k_dim, 0, cu_stream(be), x, (const float *)NULL,
                     (const float *)NULL, d, dims, out, cv, gdn_rows{}),
           "conv_gated_delta");
    return Q_OK;
}
