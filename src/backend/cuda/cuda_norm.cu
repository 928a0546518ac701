/* cuda_norm.cu: RMSNorm (zero-centred norms arrive with 1+w folded), the residual add fused with it, the GDN gated
 * RMSNorm, and the attention's head norms with their RoPE (qk_norm_rope; with the decode rows' K/V write,
 * cuda_qk_norm_rope_kv).
 * Short vectors (the per-head norms: q and k 256, GDN 128) take one warp each, longer ones one block each;
 * which is a function of the vector's length and layout only, and either sums the squares in a fixed order
 * (EXACT(batch)). Each thread reads its own elements before the reduction and writes only them after it,
 * so x == y (in place) is safe. */
#include <stdint.h>

#include <type_traits>

#include "cuda_attention.cuh"
#include "cuda_common.cuh"
#include "cuda_rope.cuh"

#define NORM_THREADS 256

/* Thread j owns elements 4 (j + NORM_THREADS i) + c, c = 0..3, and sums their squares in that order:
 * contiguous quads (a warp's four loads cover whole sectors), unrolled so that a thread's loads go out
 * together, and the same for every vector count (EXACT(batch)). */
#define NORM_EACH(e, dim, body)                                                        \
    _Pragma("unroll 4") for (int q_ = 4 * (int)threadIdx.x; q_ < (dim); q_ += 4 * NORM_THREADS) \
        _Pragma("unroll") for (int c_ = 0; c_ < 4; c_++) {                             \
            const int e = q_ + c_;                                                     \
            if (e < (dim)) { body; }                                                   \
        }

/* Rows of up to NORM_REG_DIM elements with dim % 4 == 0 and 16-byte aligned rows (every model row): the
 * same quads and the same arithmetic in the same order as NORM_EACH, but each quad is one 16-byte load and
 * the row stays in registers, and the norm weights are loaded before cu_pdl_enter (they are weights: no op
 * writes them), so their latency overlaps the op before. Bitwise the loop form's results. */
#define NORM_Q 8
#define NORM_REG_DIM (4 * NORM_Q * NORM_THREADS)

__device__ __forceinline__ float4 norm_ld4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float norm_ss4(float4 v, float ss) {
    ss = fmaf(v.x, v.x, ss);
    ss = fmaf(v.y, v.y, ss);
    ss = fmaf(v.z, v.z, ss);
    return fmaf(v.w, v.w, ss);
}
__device__ __forceinline__ float4 norm_scale4(float4 v, float scale, float4 w) {
    return make_float4(v.x * scale * w.x, v.y * scale * w.y, v.z * scale * w.z, v.w * scale * w.w);
}

/* x += r (when r) then y = rmsnorm(x) * w, one block per row, registers only. */
template <bool ADD>
__global__ void __launch_bounds__(NORM_THREADS) rmsnorm_reg_kernel(float *x, int64_t xs, const float *r,
                                                                   const float *__restrict__ w, int dim, float eps,
                                                                   float *y, int64_t ys) {
    __shared__ float red[33];
    float4 wq[NORM_Q], v[NORM_Q];
#pragma unroll
    for (int k = 0; k < NORM_Q; k++) {
        const int q = 4 * ((int)threadIdx.x + k * NORM_THREADS);
        if (q < dim) wq[k] = __ldg((const float4 *)(w + q));
    }
    cu_pdl_enter();
    float *xv = x + (int64_t)blockIdx.x * xs;
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < NORM_Q; k++) {
        const int q = 4 * ((int)threadIdx.x + k * NORM_THREADS);
        if (q >= dim) break;
        v[k] = norm_ld4(xv + q);
        if (ADD) {
            const float4 b = norm_ld4(r + (int64_t)blockIdx.x * dim + q);
            v[k] = make_float4(v[k].x + b.x, v[k].y + b.y, v[k].z + b.z, v[k].w + b.w);
            *(float4 *)(xv + q) = v[k];
        }
        ss = norm_ss4(v[k], ss);
    }
    const float scale = rsqrtf(block_sum(ss, red) / (float)dim + eps);
    float *yv = y + (int64_t)blockIdx.x * ys;
#pragma unroll
    for (int k = 0; k < NORM_Q; k++) {
        const int q = 4 * ((int)threadIdx.x + k * NORM_THREADS);
        if (q >= dim) break;
        *(float4 *)(yv + q) = norm_scale4(v[k], scale, wq[k]);
    }
}

/* The same for any row (the loop form: each element read where it is used, in NORM_EACH's order). x, r
 * and y never alias across threads' elements (x == y in place is safe: a thread writes only its own). */
template <bool ADD>
__global__ void __launch_bounds__(NORM_THREADS) rmsnorm_loop_kernel(float *x, int64_t xs, const float *r,
                                                                    const float *__restrict__ w, int dim, float eps,
                                                                    float *y, int64_t ys) {
    cu_pdl_enter();
    __shared__ float red[33];
    float *xv = x + (int64_t)blockIdx.x * xs;
    const float *rv = ADD ? r + (int64_t)blockIdx.x * dim : NULL;
    float ss = 0.0f;
    if (ADD) {
        NORM_EACH(e, dim, const float v = xv[e] + rv[e]; xv[e] = v; ss = fmaf(v, v, ss));
    } else {
        NORM_EACH(e, dim, ss = fmaf(xv[e], xv[e], ss));
    }
    const float scale = rsqrtf(block_sum(ss, red) / (float)dim + eps);
    float *yv = y + (int64_t)blockIdx.x * ys;
    NORM_EACH(e, dim, yv[e] = xv[e] * scale * w[e]);
}

/* Vectors of up to NORM_WARP_DIM elements (dim % 4 == 0, 16-byte aligned rows): one warp each, 8 per block
 * (a block per 128-element vector left 7 of its 8 warps idle: gated_rmsnorm ran at a quarter of the
 * memory rate). Lane l owns quad 4 (l + 32 k) of part k; each part's squares go through the warp's xor tree
 * and the parts are added as block_sum's tree adds warps 0..3, so the bits are the block kernels' (their
 * thread j is lane j % 32 of part j / 32). */
#define NORM_WARP_DIM 512
#define NORM_WQ (NORM_WARP_DIM / 128)

/* The lane's quads of the norm weights w (loaded before the programmatic wait: weights). */
__device__ __forceinline__ void norm_warp_weights(const float *__restrict__ w, int dim, int lane,
                                                  float4 (&wq)[NORM_WQ]) {
#pragma unroll
    for (int k = 0; k < NORM_WQ; k++) {
        const int q = 4 * (lane + 32 * k);
        if (q < dim) wq[k] = __ldg((const float4 *)(w + q));
    }
}

/* The lane's quads of the vector xv into v, and rmsnorm(xv) * w into o (quads past dim untouched). */
__device__ __forceinline__ void norm_warp_vec(const float *xv, int dim, float eps, const float4 (&wq)[NORM_WQ],
                                              int lane, float4 (&v)[NORM_WQ], float4 (&o)[NORM_WQ]) {
    float p[NORM_WQ];
#pragma unroll
    for (int k = 0; k < NORM_WQ; k++) {
        const int q = 4 * (lane + 32 * k);
        p[k] = 0.0f;
        if (128 * k >= dim) continue; /* uniform */
        float ss = 0.0f;
        if (q < dim) v[k] = norm_ld4(xv + q), ss = norm_ss4(v[k], 0.0f);
        p[k] = warp_sum(ss);
    }
    static_assert(NORM_WQ == 4, "the parts' tree below is block_sum's for 4 warps");
    const float scale = rsqrtf(((p[0] + p[2]) + (p[1] + p[3])) / (float)dim + eps);
#pragma unroll
    for (int k = 0; k < NORM_WQ; k++)
        if (4 * (lane + 32 * k) < dim) o[k] = norm_scale4(v[k], scale, wq[k]);
}

/* GATED: y = rmsnorm(x) * w * silu(z), z laid out as x (the GDN gate). */
template <bool GATED>
__global__ void __launch_bounds__(NORM_THREADS)
    norm_warp_kernel(const float *x, int64_t xs, const float *__restrict__ z, const float *__restrict__ w,
                     int64_t n_vec, int dim, float eps, float *y, int64_t ys) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * (NORM_THREADS / 32) + (threadIdx.x >> 5);
    float4 wq[NORM_WQ], v[NORM_WQ], o[NORM_WQ];
    norm_warp_weights(w, dim, lane, wq);
    cu_pdl_enter();
    if (row >= n_vec) return; /* whole warps */
    norm_warp_vec(x + row * xs, dim, eps, wq, lane, v, o);
    float *yv = y + row * ys;
#pragma unroll
    for (int k = 0; k < NORM_WQ; k++) {
        const int q = 4 * (lane + 32 * k);
        if (q >= dim) break;
        if (GATED) {
            const float4 g = __ldg((const float4 *)(z + row * xs + q));
            o[k] = make_float4(o[k].x * silu_f(g.x), o[k].y * silu_f(g.y), o[k].z * silu_f(g.z), o[k].w * silu_f(g.w));
        }
        *(float4 *)(yv + q) = o[k];
    }
}

/* The attention's q and k head norms and their RoPE in one launch (op qk_norm_rope): warp v < n * n_q takes q
 * vector v (from qx, heads qs apart, into q), the rest the k vectors in place. The norm is norm_warp_kernel's
 * and the rotation rope_kernel's (cuda_rope.cuh), so the bits are those of the four launches it replaces.
 * The rotated pairs (j, j + half) sit in part 0 (rot_dim <= 128, half % 4 == 0): lane l < half / 4 holds
 * quad j = 4l.., lane l + half / 4 its partners.
 * KV (attention_gated's qk where every row is a decode row, rows[r] row r's): the k warps also write their head into
 * row r's K cache at its position, and n * n_kv more warps the V heads, as kv_write_rows_kernel would (the attention's
 * K/V write, one launch fewer a layer). */
template <bool KV> using qk_rows = std::conditional_t<KV, cu_tab, int>; /* none without KV: no 2 KB of parameters */
template <typename T, bool KV>
__global__ void __launch_bounds__(NORM_THREADS)
    qk_norm_rope_kernel(const float *qx, int64_t qs, const float *__restrict__ qw, float *q, float *k,
                        const float *__restrict__ kw, int n, int n_q, int n_kv, int dim, float eps, int half,
                        const int32_t *__restrict__ pos, const rope_freqs f, const float *v,
                        const __grid_constant__ qk_rows<KV> rows) {
    const int lane = threadIdx.x & 31;
    const int64_t vec = (int64_t)blockIdx.x * (NORM_THREADS / 32) + (threadIdx.x >> 5), nqv = (int64_t)n * n_q;
    const int64_t nkv = (int64_t)n * n_kv;
    const bool is_q = vec < nqv;
    const int64_t kv = vec - nqv;
    float4 wq[NORM_WQ], x[NORM_WQ], o[NORM_WQ];
    if constexpr (KV) {
        if (kv >= nkv) { /* a V head: its row as it is into the cache */
            cu_pdl_enter();
            const int64_t vi = kv - nkv;
            if (vi >= nkv) return; /* whole warps */
            const int h = (int)(vi % n_kv);
            const att_row rw = cu_tab_at<att_row>(rows, (int)(vi / n_kv));
            T *row = kv_row<T>(rw.vc, rw.pos, n_kv, dim);
#pragma unroll
            for (int c = 0; c < NORM_WQ; c++)
                if (4 * (lane + 32 * c) < dim) o[c] = norm_ld4(v + vi * dim + 4 * (lane + 32 * c));
            kv_write_head_quads(o, row, n_kv, dim, h);
            if (h == 0) kv_q8_pad(kv_row<T>(rw.kc, rw.pos, n_kv, dim), row, n_kv, dim, lane, 32);
            return;
        }
    }
    norm_warp_weights(is_q ? qw : kw, dim, lane, wq);
    cu_pdl_enter();
    if (kv >= nkv) return; /* whole warps */
    norm_warp_vec(is_q ? qx + vec * qs : k + kv * dim, dim, eps, wq, lane, x, o);
    const int h4 = half / 4;
    float4 t = o[0]; /* the partner lane's quad */
    const int src = lane < h4 ? lane + h4 : lane - h4;
    t.x = __shfl_sync(0xffffffffu, t.x, src), t.y = __shfl_sync(0xffffffffu, t.y, src);
    t.z = __shfl_sync(0xffffffffu, t.z, src), t.w = __shfl_sync(0xffffffffu, t.w, src);
    if (lane < 2 * h4) {
        const float p = (float)pos[is_q ? vec / n_q : kv / n_kv];
        const int j = 4 * (lane % h4);
        float4 x1 = lane < h4 ? o[0] : t, x2 = lane < h4 ? t : o[0]; /* both lanes of a pair rotate it */
        rope_rotate(x1.x, x2.x, p, f, j);
        rope_rotate(x1.y, x2.y, p, f, j + 1);
        rope_rotate(x1.z, x2.z, p, f, j + 2);
        rope_rotate(x1.w, x2.w, p, f, j + 3);
        o[0] = lane < h4 ? x1 : x2;
    }
    float *yv = is_q ? q + vec * dim : k + kv * dim;
#pragma unroll
    for (int c = 0; c < NORM_WQ; c++)
        if (4 * (lane + 32 * c) < dim) *(float4 *)(yv + 4 * (lane + 32 * c)) = o[c];
    if constexpr (KV) {
        if (!is_q) {
            const att_row rw = cu_tab_at<att_row>(rows, (int)(kv / n_kv));
            kv_write_head_quads(o, kv_row<T>(rw.kc, rw.pos, n_kv, dim), n_kv, dim, (int)(kv % n_kv));
        }
    }
}

/* Whether rows of x (stride xs), r (stride dim) and y (stride ys) take rmsnorm_reg_kernel. */
static bool norm_reg_ok(const float *x, int64_t xs, const float *r, const float *w, int dim, const float *y,
                        int64_t ys) {
    return dim <= NORM_REG_DIM && dim % 4 == 0 && xs % 4 == 0 && ys % 4 == 0 &&
           cu_aligned16(x) && cu_aligned16(r) && cu_aligned16(w) && cu_aligned16(y);
}

/* x += r (ADD) then y = rmsnorm(x) * w per vector, in registers where the rows allow. */
template <bool ADD>
static qstatus norm_launch(qbackend *be, float *x, int64_t xs, const float *r, const float *w, int64_t n_vec, int dim,
                           float eps, float *y, int64_t ys, const char *op) {
    if (n_vec <= 0) return Q_OK;
    if (n_vec > 2147483647LL) return q_fail(Q_EINVAL, "cuda %s: too many vectors", op);
    if (!ADD && dim <= NORM_WARP_DIM && norm_reg_ok(x, xs, r, w, dim, y, ys)) {
        CU_TRY(cu_launch(norm_warp_kernel<false>, (unsigned)((n_vec + 7) / 8), NORM_THREADS, 0, cu_stream(be), x, xs,
                         (const float *)NULL, w, n_vec, dim, eps, y, ys),
               op);
        return Q_OK;
    }
    CU_TRY(cu_launch(norm_reg_ok(x, xs, r, w, dim, y, ys) ? rmsnorm_reg_kernel<ADD> : rmsnorm_loop_kernel<ADD>,
                     (unsigned)n_vec, NORM_THREADS, 0, cu_stream(be), x, xs, r, w, dim, eps, y, ys),
           op);
    return Q_OK;
}

qstatus cuda_rmsnorm(qbackend *be, const float *x, int64_t x_stride, const float *w, int64_t n_vec, int dim,
                     float eps, float *y, int64_t y_stride) {
    /* x is only read without ADD */
    return norm_launch<false>(be, (float *)x, x_stride, NULL, w, n_vec, dim, eps, y, y_stride, "rmsnorm");
}

qstatus cuda_add_rmsnorm(qbackend *be, float *x, const float *r, const float *w, int64_t n_vec, int dim, float eps,
                         float *y) {
    return norm_launch<true>(be, x, dim, r, w, n_vec, dim, eps, y, dim, "add_rmsnorm");
}

__global__ void __launch_bounds__(NORM_THREADS) gated_rmsnorm_kernel(const float *x, const float *__restrict__ z,
                                                                     const float *__restrict__ w, int dim, float eps,
                                                                     float *y) {
    cu_pdl_enter();
    __shared__ float red[33];
    const int64_t base = (int64_t)blockIdx.x * dim;
    float ss = 0.0f;
    NORM_EACH(e, dim, ss = fmaf(x[base + e], x[base + e], ss));
    const float scale = rsqrtf(block_sum(ss, red) / (float)dim + eps);
    NORM_EACH(e, dim, y[base + e] = x[base + e] * scale * w[e] * silu_f(z[base + e]));
}

qstatus cuda_gated_rmsnorm(qbackend *be, const float *x, const float *z, const float *w, int64_t n_vec,
                           int dim, float eps, float *y) {
    if (n_vec <= 0) return Q_OK;
    if (n_vec > 2147483647LL) return q_fail(Q_EINVAL, "cuda gated_rmsnorm: too many vectors");
    if (dim <= NORM_WARP_DIM && norm_reg_ok(x, dim, z, w, dim, y, dim)) {
        CU_TRY(cu_launch(norm_warp_kernel<true>, (unsigned)((n_vec + 7) / 8), NORM_THREADS, 0, cu_stream(be), x,
                         (int64_t)dim, z, w, n_vec, dim, eps, y, (int64_t)dim),
               "gated_rmsnorm");
        return Q_OK;
    }
    CU_TRY(cu_launch(gated_rmsnorm_kernel, (unsigned)n_vec, NORM_THREADS, 0, cu_stream(be), x, z, w, dim, eps, y),
           "gated_rmsnorm");
    return Q_OK;
}

/* Whether qk_norm_rope_kernel takes these rows (norm_warp_kernel's rows, the rotated dims in part 0). */
static bool qk_fused_ok(const float *qx, int64_t qx_stride, const float *q_w, const float *q, const float *k,
                        const float *k_w, int64_t n_vec, int dim, int rot_dim) {
    return rot_dim >= 8 && rot_dim % 8 == 0 && rot_dim <= 128 && rot_dim <= dim && dim <= NORM_WARP_DIM &&
           n_vec <= 2147483647LL && norm_reg_ok(qx, qx_stride, NULL, q_w, dim, q, dim) &&
           norm_reg_ok(k, dim, NULL, k_w, dim, k, dim);
}

/* rmsnorm of the q heads (from qx) and of the k heads (in place), then rope on both, in one launch where the
 * shapes allow, else as those four ops. */
qstatus cuda_qk_norm_rope(qbackend *be, const float *qx, int64_t qx_stride, const float *q_w, float *q, float *k,
                          const float *k_w, int n, int n_q, int n_kv, int dim, float eps, int rot_dim,
                          const int32_t *pos, float theta) {
    if (n <= 0) return Q_OK;
    const int64_t n_vec = (int64_t)n * (n_q + n_kv);
    if (!qk_fused_ok(qx, qx_stride, q_w, q, k, k_w, n_vec, dim, rot_dim)) {
        Q_TRY(cuda_rmsnorm(be, qx, qx_stride, q_w, (int64_t)n * n_q, dim, eps, q, dim));
        Q_TRY(cuda_rmsnorm(be, k, dim, k_w, (int64_t)n * n_kv, dim, eps, k, dim));
        Q_TRY(cuda_rope(be, q, n, n_q, dim, rot_dim, pos, theta));
        return cuda_rope(be, k, n, n_kv, dim, rot_dim, pos, theta);
    }
    CU_TRY(cu_launch(qk_norm_rope_kernel<float, false>, (unsigned)((n_vec + 7) / 8), NORM_THREADS, 0, cu_stream(be),
                     qx, qx_stride, q_w, q, k, k_w, n, n_q, n_kv, dim, eps, rot_dim / 2, pos,
                     rope_freqs_make(theta, rot_dim), (const float *)NULL, 0),
           "qk_norm_rope");
    return Q_OK;
}

/* qk_norm_rope and the K/V write of n decode rows (rows: row r's att_row, r = 0 .. n - 1) in one launch. *done is
 * false, and nothing is launched, where the shapes do not take it. */
qstatus cuda_qk_norm_rope_kv(qbackend *be, const qqk_prep *qk, float *q, float *k, const float *v, int n, int n_q,
                             int n_kv, int dim, const cu_tab &rows, qwfmt kv_fmt, bool *done) {
    const int64_t n_vec = (int64_t)n * (n_q + 2 * n_kv);
    *done = n > 0 && dim % 4 == 0 && cu_aligned16(v) && (kv_fmt != QW_Q8 || dim % 16 == 0) &&
            qk_fused_ok(qk->qx, qk->qx_stride, qk->q_w, q, k, qk->k_w, n_vec, dim, qk->rot_dim);
    if (!*done) return Q_OK;
    decltype(&qk_norm_rope_kernel<float, true>) kern =
        kv_fmt == QW_F32 ? qk_norm_rope_kernel<float, true>
        : kv_fmt == QW_BF16 ? qk_norm_rope_kernel<kv_bf16, true> : qk_norm_rope_kernel<kv_q8, true>;
    CU_TRY(cu_launch(kern, (unsigned)((n_vec + 7) / 8), NORM_THREADS, 0, cu_stream(be), qk->qx, qk->qx_stride, qk->q_w,
                     q, k, qk->k_w, n, n_q, n_kv, dim, qk->eps, qk->rot_dim / 2, qk->pos,
                     rope_freqs_make(qk->theta, qk->rot_dim), v, rows),
           "qk_norm_rope with the K/V write");
    return Q_OK;
}
