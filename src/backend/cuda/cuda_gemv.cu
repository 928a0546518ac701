/* cuda_gemv.cu: the decode matmul (op matmul): y[n][n_out] = x[n][n_in] . W^T for decode rows, draft
 * blocks and the lm_head. Which kernel a weight takes is a property of the weight alone (format, bits,
 * group, n_in), never of n, so every decode row of a weight runs the same arithmetic (EXACT(batch)):
 * - bf16 (n_in % 32 == 0) and 4-bit affine with group 64 or 128 and bf16 scales: gemv_tc_kernel,
 *   tensor cores with f32-class accuracy (cuda_gemv.cuh explains the arithmetic);
 * - other 4-bit affine (group 32, f16 or f32 scales), bf16 with n_in % 8 == 0 otherwise: gemv_kernel
 *   (SIMT, a warp per output; cuda_gemv_simt.cuh);
 * - everything else (f32, f16, other bit widths): matmul_kernel (SIMT, a block per output).
 * The tensor-core kernel's split-K partials, ticket counters and split rows (more than 4 rows) live in a
 * per-backend scratch that grows on demand (cu_gemv_scratch). Weights sharing x can go out in one launch
 * (cuda_matmul_multi); a gated x (swiglu's, the attention's output gate, the GDN's gated norm) is gated where
 * the kernel stages it (cuda_glu_matmul); a residual boundary (backend.h's qnorm) is added and summed where the
 * producer finishes (cuda_resid_matmul) and normalised where the consumers stage x (cuda_norm_matmul_multi). */
#include <stdio.h>
#include <stdlib.h>

#include "cuda_gemv.cuh"

/* Generic decode kernel: one block of MM_THREADS per (output o, group of MM_ROWS rows). Thread t sums
 * inputs i = t, t + MM_THREADS, ... for each of its rows, then one fixed-order block reduction per row.
 * EXACT(batch): a row's sum depends only on MM_THREADS (fixed). */
#define MM_THREADS 256
#define MM_ROWS 8

__global__ void __launch_bounds__(MM_THREADS) matmul_kernel(const float *__restrict__ x, int n,
                                                            qweight W, float *__restrict__ y) {
    cu_pdl_enter();
    __shared__ float red[33];
    const int64_t o = blockIdx.x;
    const int r0 = blockIdx.y * MM_ROWS;
    const int64_t n_in = W.n_in;
    float acc[MM_ROWS];
#pragma unroll
    for (int r = 0; r < MM_ROWS; r++) acc[r] = 0.0f;
    for (int64_t i = threadIdx.x; i < n_in; i += MM_THREADS) {
        const float w = weight_at(W, o, i);
#pragma unroll
        for (int r = 0; r < MM_ROWS; r++)
            if (r0 + r < n) acc[r] = fmaf(w, x[(int64_t)(r0 + r) * n_in + i], acc[r]);
    }
#pragma unroll
    for (int r = 0; r < MM_ROWS; r++) {
        if (r0 + r >= n) break; /* uniform across the block */
        const float s = block_sum(acc[r], red);
        if (threadIdx.x == 0) y[(int64_t)(r0 + r) * W.n_out + o] = s;
    }
}

/* gemv_kernel (the SIMT fallback) is in cuda_gemv_simt.cuh, shared with tests/cuda/bench_gemv.cu. */

struct cu_gemv {
    float *part;
    size_t part_bytes;
    unsigned *tick;
    size_t tick_bytes;
    void *pre; /* x split once for many rows (gemv_tc_pre_bytes) */
    size_t pre_bytes;
    unsigned short *nx; /* the next norm's split rows, as the last resid_matmul left them (gemv_tc_next_ok) */
    size_t nx_bytes;
    struct { const float *x, *ss, *w; int n; } nx_for; /* the boundary nx holds (x NULL: none) */
    unsigned short *gr; /* a gated input's split rows, as the last producer told its gate left them (cu_gate_rows) */
    size_t gr_bytes;
    struct { const float *x; qglu glu; int n; int64_t K; } gr_for; /* what gr holds (x NULL: none) */
    int attr_set;
};

#if GT_TRACE
/* GT_TRACE builds (cuda_gemv_trace.cuh): the blocks' records go to a device buffer from the first matmul on, and to
 * the file QUILL_CUDA_TRACE names when the backend goes (magic, count, record size, then the records). A tool for
 * tests/cuda/trace_step.sh: one backend at a time, failures reported and tracing dropped. */
#define GT_TRACE_CAP (1u << 21)
static gt_trace_rec *trace_dev;
static unsigned *trace_n_dev; /* gt_trace_n's device address, for the other kernels' records (cu_gemv_trace_sink) */
static void trace_open(void) {
    if (trace_dev || !getenv("QUILL_CUDA_TRACE")) return;
    const unsigned cap = GT_TRACE_CAP, zero = 0;
    if (cudaMalloc((void **)&trace_dev, (size_t)cap * sizeof *trace_dev) != cudaSuccess ||
        cudaMemcpyToSymbol(gt_trace_buf, &trace_dev, sizeof trace_dev) != cudaSuccess ||
        cudaMemcpyToSymbol(gt_trace_cap, &cap, sizeof cap) != cudaSuccess ||
        cudaMemcpyToSymbol(gt_trace_n, &zero, sizeof zero) != cudaSuccess ||
        cudaGetSymbolAddress((void **)&trace_n_dev, gt_trace_n) != cudaSuccess) {
        fprintf(stderr, "quill: matmul trace: %s; not tracing\n", cudaGetErrorString(cudaGetLastError()));
        cudaFree(trace_dev);
        trace_dev = NULL;
    }
}
gt_trace_sink cu_gemv_trace_sink(void) {
    trace_open();
    return gt_trace_sink{trace_dev, trace_n_dev, GT_TRACE_CAP};
}
static void trace_dump(cudaStream_t stream) {
    if (!trace_dev) return;
    const char *path = getenv("QUILL_CUDA_TRACE");
    unsigned n = 0;
    gt_trace_rec *h = NULL;
    FILE *f = NULL;
    if (cudaStreamSynchronize(stream) == cudaSuccess && cudaMemcpyFromSymbol(&n, gt_trace_n, sizeof n) == cudaSuccess) {
        if (n > GT_TRACE_CAP) {
            fprintf(stderr, "quill: matmul trace: %u records, the first %u kept\n", n, GT_TRACE_CAP);
            n = GT_TRACE_CAP;
        }
        h = (gt_trace_rec *)malloc((size_t)n * sizeof *h + 1);
        if (h && cudaMemcpy(h, trace_dev, (size_t)n * sizeof *h, cudaMemcpyDeviceToHost) == cudaSuccess &&
            (f = fopen(path, "wb"))) {
            const unsigned head[3] = {GT_TRACE_MAGIC, n, (unsigned)sizeof *h};
            const bool ok = fwrite(head, sizeof head, 1, f) == 1 && fwrite(h, sizeof *h, n, f) == n;
            if (fclose(f) == 0 && ok)
                fprintf(stderr, "quill: matmul trace: %u records in %s\n", n, path);
            else
                fprintf(stderr, "quill: matmul trace: writing %s failed\n", path);
        } else {
            fprintf(stderr, "quill: matmul trace: could not write %s\n", path);
        }
    }
    free(h);
    cudaFree(trace_dev);
    trace_dev = NULL;
    const gt_trace_rec *none = NULL;
    cudaMemcpyToSymbol(gt_trace_buf, &none, sizeof none);
}
#else
static void trace_open(void) {}
static void trace_dump(cudaStream_t) {}
#endif

void cu_gemv_free(cuda_state *s) {
    if (!s || !s->gemv) return;
    trace_dump(s->stream);
    cudaFree(s->gemv->part);
    cudaFree(s->gemv->tick);
    cudaFree(s->gemv->pre);
    cudaFree(s->gemv->nx);
    cudaFree(s->gemv->gr);
    free(s->gemv);
    s->gemv = NULL;
}

/* The tensor-core kernel's scratch: need_p partial floats, need_t ticket counters and need_x bytes for
 * the split rows; grows and never shrinks. New ticket counters start at zero; every call leaves them at
 * zero. (argmax's chunks take it too: ops run in stream order, so their uses never overlap.) */
qstatus cu_gemv_scratch(qbackend *be, size_t need_p, size_t need_t, size_t need_x, float **part, unsigned **tick,
                        void **pre) {
    cuda_state *s = (cuda_state *)be->impl;
    if (!s->gemv) {
        s->gemv = (struct cu_gemv *)calloc(1, sizeof *s->gemv);
        if (!s->gemv) return q_fail(Q_ENOMEM, "cuda matmul: out of memory");
    }
    struct cu_gemv *g = s->gemv;
    if (!g->attr_set) {
        CU_NOT_CAPTURING(s->stream, "matmul setup");
        CU_TRY(gemv_tc_init(), "matmul (shared memory limit)");
        trace_open();
        g->attr_set = 1;
    }
    Q_TRY(cu_grow(s, (void **)&g->part, &g->part_bytes, need_p * sizeof(float), "matmul scratch"));
    Q_TRY(cu_grow(s, &g->pre, &g->pre_bytes, need_x, "matmul split rows"));
    if (need_t * sizeof(unsigned) > g->tick_bytes) { /* a new array: all of it zeroed */
        Q_TRY(cu_grow(s, (void **)&g->tick, &g->tick_bytes, (need_t < 4096 ? 4096 : need_t) * sizeof(unsigned),
                      "matmul tickets"));
        CU_TRY(cudaMemsetAsync(g->tick, 0, g->tick_bytes, s->stream), "matmul scratch");
    }
    *part = g->part;
    *tick = g->tick;
    *pre = g->pre;
    return Q_OK;
}

static qstatus check_weight(const qweight *W) {
    if (W->fmt == QW_AFFINE) {
        if (W->bits < 2 || W->bits > 8 || W->group <= 0 || W->n_in % W->group || (W->n_in * W->bits) % 32)
            return q_fail(Q_EINVAL, "cuda matmul: bad affine weight (bits %d, group %d, n_in %lld)", W->bits, W->group,
                          (long long)W->n_in);
    }
    if (W->n_out > 2147483647LL) return q_fail(Q_EINVAL, "cuda matmul: n_out too large");
    return Q_OK;
}

/* Which SIMT decode kernel a weight takes when the tensor-core one does not: a property of the weight. */
static int gemv_chunk(const qweight *W) {
    if (W->fmt == QW_BF16 && W->n_in % 8 == 0) return 8;
    if (W->fmt == QW_AFFINE && !W->tiled && W->bits == 4 && W->n_in % 32 == 0 && W->group % 32 == 0) return 32;
    return 0;
}

/* The 16-byte loads of the tensor-core and SIMT gemv kernels. No fallback to another kernel: the
 * kernel is the weight's (EXACT(batch)). */
static qstatus check_aligned(const float *x, const qweight *W) {
    if (!cu_aligned16(x) || !cu_aligned16(W->w))
        return q_fail(Q_EINVAL, "cuda matmul: activations and weights must be 16-byte aligned");
    return Q_OK;
}

/* The checks every tensor-core call makes. */
static qstatus tc_check(const float *x, int n, const qweight *W) {
    Q_TRY(check_aligned(x, W));
    if ((int64_t)n * W->n_out > ((int64_t)1 << 40) || gemv_tc_ticks(W, n, 1, 0) > 2147483647u) /* 1 tile: the most */
        return q_fail(Q_EINVAL, "cuda matmul: %d rows x %lld outputs is too large", n, (long long)W->n_out);
    return Q_OK;
}

qstatus cuda_matmul(qbackend *be, const float *x, int n, const qweight *W, float *y) {
    if (n <= 0) return Q_OK;
    Q_TRY(check_weight(W));
    const int kind = gemv_tc_kind(W);
    if (kind >= 0) return cuda_matmul_multi(be, x, n, 1, &W, &y);
    const int ch = gemv_chunk(W);
    if (ch) {
        Q_TRY(check_aligned(x, W));
        dim3 grid(cu_blocks(W->n_out, GV_WARPS), cu_blocks(n, GV_ROWS));
        CU_TRY(cu_launch(ch == 8 ? gemv_kernel<8> : gemv_kernel<32>, grid, GV_WARPS * 32, 0, cu_stream(be), x, n, *W,
                         y),
               "matmul (gemv)");
        return Q_OK;
    }
    dim3 grid((unsigned)W->n_out, cu_blocks(n, MM_ROWS));
    CU_TRY(cu_launch(matmul_kernel, grid, MM_THREADS, 0, cu_stream(be), x, n, *W, y), "matmul");
    return Q_OK;
}

/* The residual boundary's split rows (gemv_tc_next_ok): a producer (ex->ss) that knows its consumers' norm weight
 * (ex->nx_w) writes them into the scratch's nx as it finishes, and the boundary's consumer (ex->norm, from_resid) of
 * the same x, n, sums of squares and weight reads them instead of a split launch. Anything else forgets nx: one
 * boundary at a time (a batch with two decode ranges splits the first one's rows itself). QUILL_CUDA_NORM_ROWS=0
 * always splits (an A/B in one build; the bits are the same). */
static int next_rows_on(void) {
    static int on = -1;
    return cu_env_on("QUILL_CUDA_NORM_ROWS", &on);
}
static qstatus next_norm_rows(qbackend *be, const float *x, int n, const qweight *W, float *y, int kind, gt_extra *ex) {
    cuda_state *s = (cuda_state *)be->impl;
    struct cu_gemv *g = s->gemv;
    if (ex->norm) {
        const qnorm *nm = ex->norm;
        if (nm->from_resid && g->nx_for.x == x && g->nx_for.n == n && g->nx_for.ss == nm->ss && g->nx_for.w == nm->w &&
            kind != 0 && gdq_wgmma(n, ex->bf16x))
            ex->xs_ready = g->nx;
        return Q_OK;
    }
    if (!ex->ss) return Q_OK;
    g->nx_for.x = NULL; /* this launch writes the residual rows */
    if (!ex->nx_w || !next_rows_on() || !gemv_tc_next_ok(kind, W, n, ex->bf16x)) {
        ex->nx_w = NULL;
        return Q_OK;
    }
    Q_TRY(cu_grow(s, (void **)&g->nx, &g->nx_bytes, gemv_tc_next_bytes(W, n), "matmul next norm rows"));
    ex->nx = g->nx;
    g->nx_for.x = y, g->nx_for.ss = ex->ss, g->nx_for.w = ex->nx_w, g->nx_for.n = n;
    return Q_OK;
}

/* A gated input's boundary (cu_gate_rows): in dequant mode the op that makes x and knows the gate its consumer reads it
 * through leaves the gated x as split rows (gr) as it writes x: the gated delta rule for out_proj's gated norm
 * (qgdn_dims.out_norm, cuda_gdn_rows.cuh), the attention's combine for o_proj's output gate (attention_gated), the
 * MLP's gate + up for the down projection's silu GLU (qnorm glu_pair: glu_pair_rows). A glu_matmul / resid_matmul of
 * the same x, gate and n reads them instead of a split launch; any decode matmul launch forgets gr.
 * QUILL_CUDA_GNORM_ROWS=0 / QUILL_CUDA_ATT_ROWS=0 / QUILL_CUDA_GLU_ROWS=0 always split after that producer (A/Bs in
 * one build; the bits are the same). */
static int gate_rows_on(int producer) {
    static int on[3] = {-1, -1, -1};
    static const char *const knob[3] = {"QUILL_CUDA_GNORM_ROWS", "QUILL_CUDA_ATT_ROWS", "QUILL_CUDA_GLU_ROWS"};
    return cu_env_on(knob[producer], &on[producer]);
}
qstatus cu_gate_rows(qbackend *be, int producer, const float *x, const qglu *glu, int n, int64_t K,
                     unsigned short **rows) {
    cuda_state *s = (cuda_state *)be->impl;
    *rows = NULL;
    if (s->gemv) s->gemv->gr_for.x = NULL;
    int mode = 0;
    if (!x || !glu || !gate_rows_on(producer) || cu_decode_precision(&mode) != Q_OK || !gdq_wgmma(n, mode) || K % 64 ||
        glu->dim <= 0 || K % glu->dim)
        return Q_OK; /* (a bad precision fails where the matmul reads it) */
    float *part = NULL;
    unsigned *tick = NULL;
    void *pre = NULL;
    Q_TRY(cu_gemv_scratch(be, 0, 0, 0, &part, &tick, &pre)); /* the matmul's state, made on first use */
    struct cu_gemv *g = s->gemv;
    Q_TRY(cu_grow(s, (void **)&g->gr, &g->gr_bytes, gt_split_rows_bytes(K, n), "gated input rows"));
    g->gr_for.x = x, g->gr_for.glu = *glu, g->gr_for.n = n, g->gr_for.K = K;
    *rows = g->gr;
    return Q_OK;
}
static void gate_rows_take(qbackend *be, const float *x, int n, int count, const qweight *const *W, int kind,
                           gt_extra *ex) {
    struct cu_gemv *g = ((cuda_state *)be->impl)->gemv;
    const qglu *gl = ex->glu, *was = &g->gr_for.glu;
    if (gl && g->gr_for.x == x && gl->g == was->g && gl->g_stride == was->g_stride && gl->dim == was->dim &&
        gl->act == was->act && gl->norm_w == was->norm_w && gl->norm_eps == was->norm_eps && n == g->gr_for.n &&
        count == 1 && W[0]->n_in == g->gr_for.K && kind != 0 && gdq_wgmma(n, ex->bf16x))
        ex->xs_ready = g->gr;
    g->gr_for.x = NULL;
}
/* The MLP's gate + up (qnorm glu_pair) as a producer of gated rows: the pair's launch (gemv_tc_glu_rows_ok) leaves
 * bf16(silu(gate) up) as the down projection's split rows as it finishes (gt_job gx). */
static qstatus glu_pair_rows(qbackend *be, int n, int count, const qweight *const *W, float *const *y, int kind,
                             gt_extra *ex) {
    if (!ex->norm || !ex->norm->glu_pair || count != 2 || !gemv_tc_glu_rows_ok(kind, W, n, ex->bf16x)) return Q_OK;
    const qglu act = {y[0], W[0]->n_out, (int)W[0]->n_out, QGLU_SILU, NULL, 0.0f}; /* the model's down projection's */
    return cu_gate_rows(be, CU_ROWS_GLU, y[1], &act, n, W[0]->n_out, &ex->gx);
}

/* One tensor-core launch of count weights of `kind` (checked by the caller), with its scratch; x as
 * QUILL_DECODE_PRECISION asks. */
static qstatus tc_launch(qbackend *be, const float *x, int n, int count, const qweight *const *W, float *const *y,
                         int kind, gt_extra ex) {
    Q_TRY(cu_decode_precision(&ex.bf16x));
    const int nt = gemv_tc_job_tiles(kind, n, count, W, ex.bf16x); /* the launch's: each weight's tickets its own */
    size_t off_p[GT_JOB], off_t[GT_JOB], need_p = 0, need_t = 0;
    for (int i = 0; i < count; i++) {
        Q_TRY(tc_check(x, n, W[i]));
        off_p[i] = need_p, off_t[i] = need_t;
        need_p += gemv_tc_part_floats(W[i], n);
        need_t += gemv_tc_ticks(W[i], n, nt, ex.bf16x);
    }
    float *part = NULL, *parts[GT_JOB];
    unsigned *tick = NULL, *ticks[GT_JOB];
    void *pre = NULL;
    Q_TRY(cu_gemv_scratch(be, need_p, need_t, gemv_tc_pre_bytes(W[0], n, ex.bf16x), &part, &tick, &pre));
    for (int i = 0; i < count; i++) parts[i] = part + off_p[i], ticks[i] = tick + off_t[i];
    Q_TRY(next_norm_rows(be, x, n, W[0], y[0], kind, &ex));
    gate_rows_take(be, x, n, count, W, kind, &ex); /* before a producer records its own */
    Q_TRY(glu_pair_rows(be, n, count, W, y, kind, &ex));
    CU_TRY(gemv_tc_launch_multi(kind, x, n, count, W, y, parts, ticks, pre, cu_stream(be), ex),
           "matmul (tensor-core gemv)");
    return Q_OK;
}

/* A gate of x for W (op `op`): its vectors must tile n_in. It goes into the tensor-core kernels' staging where
 * the weight and the layout allow (gemv_tc_glu_ok); else cuda_glu (cuda_gated_rmsnorm with a norm) gates x in
 * place and *glu becomes NULL (the plain product follows). Either way the same bits. */
static qstatus glu_prepare(qbackend *be, const char *op, float *x, const qglu **glu, int n, const qweight *W) {
    const qglu *g = *glu;
    if (!g) return Q_OK;
    if (g->dim <= 0 || W->n_in % g->dim)
        return q_fail(Q_EINVAL, "cuda %s: gate vectors of %d for n_in %lld", op, g->dim, (long long)W->n_in);
    if (gemv_tc_kind(W) >= 0 && gemv_tc_glu_ok(*g, W)) return Q_OK;
    *glu = NULL;
    const int64_t n_vec = (int64_t)n * (W->n_in / g->dim);
    if (g->norm_w) { /* g_stride == dim (backend.h) */
        if (g->g_stride != g->dim || g->act != QGLU_SILU)
            return q_fail(Q_EINVAL, "cuda %s: a gated norm takes silu gates laid out as x", op);
        return cuda_gated_rmsnorm(be, x, g->g, g->norm_w, n_vec, g->dim, g->norm_eps, x);
    }
    return cuda_glu(be, x, g, n_vec);
}

qstatus cuda_glu_matmul(qbackend *be, float *x, const qglu *glu, int n, const qweight *W, float *y) {
    if (n <= 0) return Q_OK;
    Q_TRY(check_weight(W));
    Q_TRY(glu_prepare(be, "glu_matmul", x, &glu, n, W));
    return glu ? tc_launch(be, x, n, 1, &W, &y, gemv_tc_kind(W), {glu, NULL, NULL, 0}) : cuda_matmul(be, x, n, W, y);
}

/* y = x . W^T in like's K slices (like: a weight of W's kind and n_in): where W's rows are copies of like's rows (the
 * head sketch's candidates), each output is bitwise that row's output of a matmul of like. W may be what the op just
 * before wrote (a plain launch: gt_extra fresh). */
qstatus cuda_matmul_like(qbackend *be, const float *x, int n, const qweight *W, float *y, const qweight *like) {
    if (n <= 0) return Q_OK;
    Q_TRY(check_weight(W));
    const int kind = gemv_tc_kind(W);
    if (kind < 0 || kind != gemv_tc_kind(like) || W->n_in != like->n_in)
        return q_fail(Q_EINVAL, "cuda matmul_like: weights of one tensor-core kind and n_in only");
    gt_extra ex = gt_extra();
    ex.split = gemv_tc_split(like, kind), ex.fresh = 1;
    return tc_launch(be, x, n, 1, &W, &y, kind, ex);
}

/* Weights of one tensor-core kind go out in one launch (each keeping its own split, partials and
 * tickets, so its outputs are bitwise those of its own launch); any other mix, one matmul each. */
qstatus cuda_matmul_multi(qbackend *be, const float *x, int n, int count, const qweight *const *W, float *const *y) {
    if (n <= 0) return Q_OK;
    if (count < 1 || count > GT_JOB) return q_fail(Q_EINVAL, "cuda matmul_multi: %d weights (1..%d)", count, GT_JOB);
    const int kind = gemv_tc_kind(W[0]);
    int same = kind >= 0;
    for (int i = 0; i < count; i++) {
        Q_TRY(check_weight(W[i]));
        if (W[i]->n_in != W[0]->n_in) return q_fail(Q_EINVAL, "cuda matmul_multi: weights of different n_in");
        same &= gemv_tc_kind(W[i]) == kind;
    }
    if (!same) {
        for (int i = 0; i < count; i++) Q_TRY(cuda_matmul(be, x, n, W[i], y[i]));
        return Q_OK;
    }
    return tc_launch(be, x, n, count, W, y, kind, {});
}

/* backend.h's group_weights: the group's splits where gemv_tc_group_splits finds its launch one wave. */
qstatus cuda_group_weights(qbackend *be, int count, qweight *const *W) {
    (void)be;
    int S[GT_JOB];
    if (count < 1 || count > GT_JOB) return q_fail(Q_EINVAL, "cuda group_weights: %d weights (1..%d)", count, GT_JOB);
    for (int i = 0; i < count; i++) Q_TRY(check_weight(W[i]));
    if (gemv_tc_group_splits(count, W, S))
        for (int i = 0; i < count; i++) W[i]->split = S[i];
    return Q_OK;
}

/* The residual boundary (backend.h's qnorm): the tensor-core kernels do it as they finish (the producer: the
 * block that writes an output block's sums adds them into the residual and sums the squares) and as they stage
 * x (the consumers). */
int cuda_norm_fusable(const qweight *W) {
    return gemv_tc_kind(W) >= 0 && W->n_out <= 2147483647LL;
}

qstatus cuda_resid_matmul(qbackend *be, float *xin, const qglu *glu, int n, const qweight *W, float *x, float *ss,
                          const float *next_w) {
    if (n <= 0) return Q_OK;
    Q_TRY(check_weight(W));
    if (!cuda_norm_fusable(W))
        return q_fail(Q_EINVAL, "cuda resid_matmul: a %lldx%lld weight of this format cannot be fused",
                      (long long)W->n_out, (long long)W->n_in);
    Q_TRY(glu_prepare(be, "resid_matmul", xin, &glu, n, W));
    gt_extra ex = gt_extra();
    ex.glu = glu, ex.ss = ss, ex.nx_w = next_w && cu_aligned16(next_w) ? next_w : NULL;
    return tc_launch(be, xin, n, 1, &W, &x, gemv_tc_kind(W), ex);
}

qstatus cuda_norm_matmul_multi(qbackend *be, const float *x, const qnorm *nm, int n, int count,
                               const qweight *const *W, float *const *y) {
    if (n <= 0) return Q_OK;
    if (count < 1 || count > GT_JOB)
        return q_fail(Q_EINVAL, "cuda norm_matmul_multi: %d weights (1..%d)", count, GT_JOB);
    if (!gemv_tc_norm_ok(*nm)) return q_fail(Q_EINVAL, "cuda norm_matmul_multi: norm weights must be 16-byte aligned");
    const int kind = gemv_tc_kind(W[0]);
    for (int i = 0; i < count; i++) {
        Q_TRY(check_weight(W[i]));
        if (W[i]->n_in != W[0]->n_in || !cuda_norm_fusable(W[i]) || gemv_tc_kind(W[i]) != kind)
            return q_fail(Q_EINVAL, "cuda norm_matmul_multi: weights of one tensor-core kind and n_in only");
    }
    return tc_launch(be, x, n, count, W, y, kind, {NULL, nm, NULL, 0});
}
