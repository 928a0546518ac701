/* cuda_gdn_conv.cu: the Gated DeltaNet's causal depthwise conv1d + SiLU with its kept state, and the gates
 * (beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias); also as extra blocks of the conv's launch,
 * conv1d_silu_gates). The conv takes grid (channels / 128, row tiles of 32, seq); the gated delta rule
 * (cuda_gdn.cu) may run the conv itself (conv_gated_delta). Layouts (backend.h): x, y [n][channels]; w
 * [channels][K]; state[s] [K-1][channels]; a, b, g, beta [n][heads]. */
#include "cuda_gdn_seqs.cuh"

#define CONV_MAX_K 8

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

