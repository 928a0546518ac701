/* cuda_gdn.cu: the Gated DeltaNet ops: causal depthwise conv1d + SiLU with its kept state, the gates
 * (beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias); also as extra blocks of the conv's launch,
 * conv1d_silu_gates), and the gated delta rule (also with the conv and the gates inside it, conv_gated_delta).
 * Gated delta rule: seqs marked chunked (prompt rows) go to the chunked rule in cuda_gdn_chunked.cu
 * (when dk, dv are multiples of 32, dk <= 128); the others (decode, drafts) run the recurrent rule
 * token by token here. A seq's arithmetic depends only on its own rows: EXACT(batch), EXACT(chunk).
 * Recurrent kernel: each column j of a head's state S[h][:][j] evolves on its own; a block owns 32
 * columns (one per lane; bf16 states: 64, a pair per lane) with the k rows split over dk/32 warps (see
 * gated_delta_body). One launch for all seqs: grid (Hv, dv / 32 or 64, seq); the conv takes grid
 * (channels / 128, row tiles of 32, seq).
 * Layouts (backend.h): qkv [n][2*Hk*dk + Hv*dv]; g, beta [n][Hv]; S [Hv][dk][dv] f32 or bf16 (dims.state_bf16);
 * out [n][Hv][dv]. Floor: S read and written once per seq per launch (2 * Hv*dk*dv * 4 or 2 bytes) plus the rows. */
#include <limits.h>
#include <stdlib.h>

#include "cuda_common.cuh"

#define GDN_MAX_PER_LANE 8 /* dk <= 256 */
#define CONV_MAX_K 8

/* cuda_gdn_chunked.cu: the chunked rule for prompt seqs; _ok says whether it takes this shape */
int cuda_gdn_chunked_ok(qgdn_dims d);
qstatus cuda_gdn_chunked(qbackend *be, const float *qkv, const float *g, const float *beta, const qseq *seqs,
                         int n_seqs, float *const *S, qgdn_dims d, float *out);

/* One entry per seq, in a table the launch carries (cu_tab) so one launch covers every stream
 * (grid.z = seq). */
typedef struct seq_desc {
    int row0, n_rows;
    float *state; /* conv state or recurrent state S of this seq */
} seq_desc;
typedef struct seq_desc2 { /* conv_gated_delta's: both states */
    int row0, n_rows;
    float *state, *conv;
} seq_desc2;

/* conv: the seqs' conv states for conv_gated_delta's table (seq_desc2), else NULL (seq_desc). */
static qstatus seq_table(qbackend *be, const qseq *seqs, int n_seqs, float *const *state, cu_tab *out,
                         float *const *conv = NULL) {
    const size_t size = conv ? sizeof(seq_desc2) : sizeof(seq_desc);
    unsigned char *tab = (unsigned char *)malloc((size_t)n_seqs * size);
    if (!tab) return q_fail(Q_ENOMEM, "cuda gdn: out of memory");
    for (int s = 0; s < n_seqs; s++) {
        const seq_desc2 e = {seqs[s].row0, seqs[s].n_rows, state[s], conv ? conv[s] : NULL};
        memcpy(tab + s * size, &e, size); /* seq_desc is seq_desc2's first members */
    }
    qstatus st = cu_tab_make(be, tab, (size_t)n_seqs * size, out);
    free(tab);
    return st;
}

/* One gate element i of gdn_gates (row i / heads, head i % heads). */
__device__ __forceinline__ void gdn_gate_at(const qgdn_gates &q, int64_t i) {
    const int h = (int)(i % q.heads);
    const float u = q.a[i] + q.dt_bias[h];
    const float sp = u > 20.0f ? u : log1pf(expf(u)); /* torch softplus, threshold 20 */
    q.g[i] = -expf(q.A_log[h]) * sp;
    q.beta[i] = sigmoid_f(q.b[i]);
}

__global__ void gdn_gates_kernel(const qgdn_gates q) {
    cu_pdl_enter();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < q.n * q.heads) gdn_gate_at(q, i);
}

qstatus cuda_gdn_gates(qbackend *be, const float *a, const float *b, int64_t n, int heads, const float *A_log,
                       const float *dt_bias, float *g, float *beta) {
    const int64_t total = n * heads;
    if (total <= 0) return Q_OK;
    const qgdn_gates q = {a, b, A_log, dt_bias, g, beta, n, heads, 0};
    CU_TRY(cu_launch(gdn_gates_kernel, cu_blocks(total, 256), 256, 0, cu_stream(be), q), "gdn_gates");
    return Q_OK;
}

/* Rows are independent given their K-1 predecessors (no recurrence), so a seq is cut into tiles of
 * CONV_ROWS rows, one block row each: a long prompt fills the GPU. Each output is the same fma chain
 * over the same window as a row-by-row scan would give. The first tile reads the old state and, after
 * it, writes the new one (the seq's last K-1 inputs): the same thread reads, then writes, so tiles never
 * race on the state. */
#define CONV_ROWS 32

/* V consecutive floats from p (V 4: one 16-byte load; the caller checks the alignment) */
template <int V> __device__ __forceinline__ void conv_ld(const float *p, float (&o)[V]) {
    if constexpr (V == 4) {
        const float4 v = *(const float4 *)p;
        o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
    } else {
#pragma unroll
        for (int i = 0; i < V; i++) o[i] = p[i];
    }
}
template <int V> __device__ __forceinline__ void conv_st(float *p, const float (&o)[V]) {
    if constexpr (V == 4) *(float4 *)p = make_float4(o[0], o[1], o[2], o[3]);
    else {
#pragma unroll
        for (int i = 0; i < V; i++) p[i] = o[i];
    }
}

/* KT: the kernel width when known at compile time (the models' 4: the window stays in registers; with a
 * run-time width its shift indexes a local array), 0 for any width up to CONV_MAX_K. V: channels a thread (4: every
 * row, state and weight access one 16-byte load, where C % 4 == 0 and the buffers are 16-byte aligned; a channel's
 * arithmetic is the same whatever V). */
template <int KT, int V>
__global__ void conv1d_silu_kernel(const float *__restrict__ x, const __grid_constant__ cu_tab seqs,
                                   const float *__restrict__ w, int C, int K_rt, float *__restrict__ y,
                                   const qgdn_gates gates, unsigned conv_bx, int early) {
    static_assert(V == 1 || KT == 4, "4 channels a thread: the models' width 4, a channel's weights one load");
    const int K = KT ? KT : K_rt;
    if (!early || blockIdx.x >= conv_bx) cu_pdl_enter();
    if (blockIdx.x >= conv_bx) { /* the gates' blocks (cuda_conv1d_silu_gates) */
        const int64_t gb = gridDim.x - conv_bx, blk = ((int64_t)blockIdx.z * gridDim.y + blockIdx.y) * gb;
        const int64_t i = (blk + blockIdx.x - conv_bx) * blockDim.x + threadIdx.x;
        if (i < gates.n * gates.heads) gdn_gate_at(gates, i);
        return;
    }
    const int c = (blockIdx.x * blockDim.x + threadIdx.x) * V;
    const seq_desc sd = cu_tab_at<seq_desc>(seqs, blockIdx.z);
    const int row0 = sd.row0, n_rows = sd.n_rows;
    float *state = sd.state;
    const int t0 = blockIdx.y * CONV_ROWS, t1 = min(n_rows, t0 + CONV_ROWS);
    if (c >= C || t0 >= n_rows) { /* an empty seq may come with no state (as on the CPU) */
        if (early) cu_pdl_enter();
        return;
    }
    /* input at seq time tau: a row of x, or for tau < 0 the state entry K-1+tau (oldest first) */
#define CONV_IN(tau) ((tau) >= 0 ? x + (int64_t)(row0 + (tau)) * C + c : state + (int64_t)(K - 1 + (tau)) * C + c)
    /* the weights and the window's state entries first, and with early (gates.conv_settled: the op before did not
     * write the states) before the wait; x's rows after it */
    float win[CONV_MAX_K][V]; /* win[0..K-2]: the previous inputs, oldest first */
#pragma unroll
    for (int j = 0; j < CONV_MAX_K - 1; j++) {
        const int tau = t0 - (K - 1) + j;
        if (j < K - 1 && tau < 0) conv_ld<V>(CONV_IN(tau), win[j]);
        else
#pragma unroll
            for (int v = 0; v < V; v++) win[j][v] = 0.0f;
    }
    float wc[V][CONV_MAX_K];
    if constexpr (V == 4) {
#pragma unroll
        for (int v = 0; v < V; v++) {
            float wv[4];
            conv_ld<4>(w + (int64_t)(c + v) * 4, wv);
#pragma unroll
            for (int j = 0; j < CONV_MAX_K; j++) wc[v][j] = j < 4 ? wv[j] : 0.0f;
        }
    } else {
#pragma unroll
        for (int j = 0; j < CONV_MAX_K; j++) wc[0][j] = j < K ? w[(int64_t)c * K + j] : 0.0f;
    }
    if (early) cu_pdl_enter();
#pragma unroll
    for (int j = 0; j < CONV_MAX_K - 1; j++) {
        const int tau = t0 - (K - 1) + j;
        if (j < K - 1 && tau >= 0) conv_ld<V>(CONV_IN(tau), win[j]);
    }
#pragma unroll 4 /* the rows' loads go out together */
    for (int t = t0; t < t1; t++) {
        float xt[V], yt[V];
        conv_ld<V>(x + (int64_t)(row0 + t) * C + c, xt);
#pragma unroll
        for (int v = 0; v < V; v++) {
            float s = 0.0f;
#pragma unroll
            for (int j = 0; j < CONV_MAX_K - 1; j++)
                if (j < K - 1) s = fmaf(wc[v][j], win[j][v], s);
            s = fmaf(wc[v][K - 1], xt[v], s);
            yt[v] = silu_f(s);
#pragma unroll
            for (int j = 0; j < CONV_MAX_K - 2; j++)
                if (j < K - 2) win[j][v] = win[j + 1][v];
            if (K >= 2) win[K - 2][v] = xt[v];
        }
        conv_st<V>(y + (int64_t)(row0 + t) * C + c, yt);
    }
    if (blockIdx.y != 0) return;
    float nw[CONV_MAX_K][V];
#pragma unroll
    for (int j = 0; j < CONV_MAX_K - 1; j++)
        if (j < K - 1) conv_ld<V>(CONV_IN(n_rows - (K - 1) + j), nw[j]);
#undef CONV_IN
#pragma unroll
    for (int j = 0; j < CONV_MAX_K - 1; j++)
        if (j < K - 1) conv_st<V>(state + (int64_t)j * C + c, nw[j]);
}

/* The conv over every seq, with the gates' blocks when gates is not NULL. */
static qstatus conv_launch(qbackend *be, const float *x, const qseq *seqs, int n_seqs, float *const *state,
                           const float *w, int channels, int kernel, float *y, const qgdn_gates *gates) {
    if (kernel < 1 || kernel > CONV_MAX_K) return q_fail(Q_EINVAL, "cuda conv1d: kernel %d > %d", kernel, CONV_MAX_K);
    const int64_t n_gates = gates ? gates->n * gates->heads : 0;
    if (n_seqs <= 0) return n_gates > 0 ? cuda_gdn_gates(be, gates->a, gates->b, gates->n, gates->heads, gates->A_log,
                                                         gates->dt_bias, gates->g, gates->beta)
                                        : Q_OK;
    int max_rows = 1;
    static int env = -1; /* QUILL_CUDA_CONV_VEC=0: a channel a thread (an A/B; the same bits) */
    bool vec = kernel == 4 && channels % 4 == 0 && cu_aligned16(x) && cu_aligned16(w) && cu_aligned16(y) &&
               cu_env_on("QUILL_CUDA_CONV_VEC", &env);
    for (int s = 0; s < n_seqs; s++) {
        if (seqs[s].n_rows > max_rows) max_rows = seqs[s].n_rows;
        vec &= seqs[s].n_rows == 0 || cu_aligned16(state[s]);
    }
    cu_tab d;
    Q_TRY(seq_table(be, seqs, n_seqs, state, &d));
    dim3 grid(cu_blocks(channels / (vec ? 4 : 1), 128), cu_blocks(max_rows, CONV_ROWS), (unsigned)n_seqs);
    const unsigned conv_bx = grid.x;
    qgdn_gates q = {};
    if (n_gates > 0) {
        q = *gates;
        grid.x += (unsigned)((n_gates + 128LL * grid.y * grid.z - 1) / (128LL * grid.y * grid.z));
    }
    const auto kern = vec ? conv1d_silu_kernel<4, 4> : kernel == 4 ? conv1d_silu_kernel<4, 1>
                                                                    : conv1d_silu_kernel<0, 1>;
    CU_TRY(cu_launch(kern, grid, 128, 0, cu_stream(be), x, d, w,
                     channels, kernel, y, q, conv_bx, gates && gates->conv_settled),
           n_gates > 0 ? "conv1d_silu_gates" : "conv1d_silu");
    return Q_OK;
}

qstatus cuda_conv1d_silu(qbackend *be, const float *x, const qseq *seqs, int n_seqs, float *const *state,
                         const float *w, int channels, int kernel, float *y) {
    return conv_launch(be, x, seqs, n_seqs, state, w, channels, kernel, y, NULL);
}

/* conv1d_silu and gdn_gates in one launch: the conv's grid gains gate_bx blocks along x, and gate block
 * (bx, y, z) takes 128 gate elements by the flat index ((z * grid.y + y) * gate_bx + bx) * 128 + thread
 * (every element once, whatever the conv's row tiles and seqs). */
qstatus cuda_conv1d_silu_gates(qbackend *be, const float *x, const qseq *seqs, int n_seqs, float *const *state,
                               const float *w, int channels, int kernel, float *y, const qgdn_gates *gates) {
    return conv_launch(be, x, seqs, n_seqs, state, w, channels, kernel, y, gates);
}

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
#ifndef GDN_FUSE_SEQS
#define GDN_FUSE_SEQS 4 /* more seqs take the two launches: the fused kernel's 128 registers cost the state streaming */
#endif
struct gdn_conv {
    const float *w;
    qgdn_gates gates;
    unsigned *tick;
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
 * every one has read them) writes them. */
template <bool CONV, bool SB, int CP = 1>
__device__ __forceinline__ void gated_delta_body(const float *__restrict__ qkv, const float *__restrict__ g,
                                                 const float *__restrict__ beta, const cu_tab &seqs, const qgdn_dims &d,
                                                 float *__restrict__ out, const gdn_conv &cv, int h, int by, int z) {
    /* the states' loads before the wait where the caller says the op before did not write them (d.states_settled) */
    const bool early = d.states_settled;
    if (!early) cu_pdl_enter();
    static_assert(CP == 1 || (CP == 2 && SB && !CONV), "column pairs: bf16 states, the plain rule");
    __shared__ float sq[32 * GDN_MAX_PER_LANE], sk[32 * GDN_MAX_PER_LANE];
    __shared__ float part[GDN_MAX_PER_LANE][32 * CP], partq[GDN_MAX_PER_LANE][32 * CP]; /* the warps' k.S, q.S */
    __shared__ __align__(16) float sqn[32 * GDN_MAX_PER_LANE], skn[32 * GDN_MAX_PER_LANE]; /* q qn, k kn */
    __shared__ int writer;
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
    if constexpr (CONV) { /* the states and weights (before the wait where early) */
        wq.load(sd.conv, cv.w, width, cq), wk.load(sd.conv, cv.w, width, ck), wv.load(sd.conv, cv.w, width, cvj);
        if (early) cu_pdl_enter();
    }
    for (int t = 0; t < n_rows; t++) {
        const float *row = qkv + (int64_t)(row0 + t) * width;
        const float *qh = row + (int64_t)hk * d.k_dim, *kh = row + (int64_t)(d.n_k_heads + hk) * d.k_dim;
        __syncthreads(); /* the previous token is done with sq, sk and part */
        if constexpr (CONV) sq[threadIdx.x] = wq.step(row[cq]), sk[threadIdx.x] = wk.step(row[ck]);
        else
            for (int i = threadIdx.x; i < d.k_dim; i += blockDim.x) sq[i] = qh[i], sk[i] = kh[i];
        __syncthreads();
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
        const int64_t gi = (int64_t)(row0 + t) * d.n_v_heads + h;
        float decay, b, vj[CP];
        if constexpr (CONV) { /* gdn_gate_at's arithmetic; v through its conv (every lane: the window moves) */
            const qgdn_gates &q = cv.gates;
            const float u = q.a[gi] + q.dt_bias[h];
            const float sp = u > 20.0f ? u : log1pf(expf(u));
            decay = expf(-expf(q.A_log[h]) * sp), b = sigmoid_f(q.b[gi]);
            const float v = wv.step(row[cvj]);
            vj[0] = col ? v : 0.0f;
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
        float delta[CP];
#pragma unroll
        for (int e = 0; e < CP; e++) {
            float kS = 0.0f, qS = 0.0f; /* the warps' partials in warp order */
            for (int w = 0; w < n_warps; w++) kS += part[w][CP * lane + e], qS += partq[w][CP * lane + e];
            delta[e] = b * (vj[e] - decay * kS);
            if (warp == 0 && col)
                out[((int64_t)(row0 + t) * d.n_v_heads + h) * d.v_dim + j + e] = fmaf(delta[e], kq, decay * qS);
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
    }
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
        if (threadIdx.x == 0) { /* every thread read its q and k states before the loop's barriers */
            const unsigned readers = (unsigned)(d.n_v_heads / d.n_k_heads) * gridDim.y;
            unsigned *tk = cv.tick + (int64_t)blockIdx.z * d.n_k_heads + hk;
            writer = cu_ticket_take(tk) == readers - 1;
            if (writer) *tk = 0; /* ready for the next call */
        }
        __syncthreads();
        if (writer) wq.store(sd.conv, width, cq), wk.store(sd.conv, width, ck);
    }
}

template <bool CONV, bool SB>
__global__ void __launch_bounds__(GDN_MAX_PER_LANE * 32)
gated_delta_kernel(const float *__restrict__ qkv, const float *__restrict__ g, const float *__restrict__ beta,
                   const __grid_constant__ cu_tab seqs, qgdn_dims d, float *__restrict__ out, const gdn_conv cv) {
    gated_delta_body<CONV, SB>(qkv, g, beta, seqs, d, out, cv, blockIdx.x, blockIdx.y, blockIdx.z);
}
/* The bf16-state rule budgeted for 5 blocks of 256 threads an SM (48 registers): 10 of the 128-thread blocks of dk = 128
 * stream states at once instead of 8 (QUILL_CUDA_GDN_SB_MINB=1 takes the one above: an A/B, the same bits). */
__global__ void __launch_bounds__(GDN_MAX_PER_LANE * 32, 5)
gated_delta_sb_lean_kernel(const float *__restrict__ qkv, const float *__restrict__ g, const float *__restrict__ beta,
                           const __grid_constant__ cu_tab seqs, qgdn_dims d, float *__restrict__ out, const gdn_conv cv) {
    gated_delta_body<false, true>(qkv, g, beta, seqs, d, out, cv, blockIdx.x, blockIdx.y, blockIdx.z);
}
/* The bf16-state rule with column pairs (CP 2), budgeted for MINB blocks of 256 threads an SM: 2 (128 registers, 4
 * of the 128-thread blocks of dk = 128 an SM) or 3 (80 registers, 6 blocks, no spills). The instances differ
 * only in their registers, so a launch takes either by its seq count and a row's bits do not change (gdn_pairs). */
template <int MINB>
__global__ void __launch_bounds__(GDN_MAX_PER_LANE * 32, MINB)
gated_delta_sb_pairs_kernel(const float *__restrict__ qkv, const float *__restrict__ g, const float *__restrict__ beta,
                            const __grid_constant__ cu_tab seqs, qgdn_dims d, float *__restrict__ out,
                            const gdn_conv cv) {
    gated_delta_body<false, true, 2>(qkv, g, beta, seqs, d, out, cv, blockIdx.x, blockIdx.y, blockIdx.z);
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
    dim3 grid((unsigned)dims.n_v_heads, cu_blocks(dims.v_dim, pairs ? 64 : 32), (unsigned)n_seqs);
    const auto kern = !dims.state_bf16 ? gated_delta_kernel<false, false>
                      : pairs == 3     ? gated_delta_sb_pairs_kernel<3>
                      : pairs          ? gated_delta_sb_pairs_kernel<2>
                      : lean           ? gated_delta_sb_lean_kernel
                                       : gated_delta_kernel<false, true>;
    CU_TRY(cu_launch(kern, grid, dims.k_dim, 0, cu_stream(be), qkv, g, beta, d, dims, out,
                     gdn_conv{}),
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
    Q_TRY(cu_gemv_scratch(be, 0, (size_t)n_seqs * (size_t)dims.n_k_heads, 0, &part, &tick, &pre));
    cu_tab d;
    Q_TRY(seq_table(be, seqs, n_seqs, S, &d, conv_state));
    const gdn_conv cv = {conv_w, *gates, tick};
    dim3 grid((unsigned)dims.n_v_heads, cu_blocks(dims.v_dim, 32), (unsigned)n_seqs);
    const auto kern = dims.state_bf16 ? gated_delta_kernel<true, true> : gated_delta_kernel<true, false>;
    CU_TRY(cu_launch(kern, grid, dims.k_dim, 0, cu_stream(be), x, (const float *)NULL,
                     (const float *)NULL, d, dims, out, cv),
           "conv_gated_delta");
    return Q_OK;
}
