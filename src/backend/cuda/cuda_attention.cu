/* cuda_attention.cu: partial NeoX RoPE, and causal GQA attention over a stream's K/V cache.
 * Layouts (backend.h): q, out [n][n_q][dim]; k, v [n][n_kv][dim]; caches [ctx] rows of f32, bf16 or q8
 * (cuda_kv.cuh: every kernel that touches a cache is a template on its element type T).
 * Decode rows: see attention_decode_rows (one launch for all streams, keys split by position).
 * Prompt seqs: a kernel writes the seq's new k/v rows into its caches, then the tensor-core flash
 * kernel (cuda_flash_prefill.cu) runs where it supports the shape; elsewhere one block per
 * (row, q head) runs ATT_WARPS warps; warp w takes keys w, w + ATT_WARPS, ... <= the row's position
 * with an online softmax (running max, sum, and a dim-vector held dim/32 per lane); the warps'
 * partial results merge in a fixed order. EXACT(batch): a row's result depends only on its own
 * query and its stream's cache. Requires dim % 32 == 0 and dim <= 32 * ATT_MAX_PER_LANE.
 * Floor: decode rows read the stream's K/V bytes once (GQA-packed: a block serves the query heads
 * of one kv head); the prompt path's flash kernel packs them too. */
#include "cuda_flash_prefill.h"
#include "cuda_attention.cuh"
#include "cuda_rope.cuh"
#include "cuda_split_rows.cuh"

#define ATT_WARPS 4
#define ATT_MAX_PER_LANE 8 /* dim <= 256 */

__global__ void rope_kernel(float *x, int n_heads, int head_dim, int half, const int32_t *__restrict__ pos,
                            rope_freqs f) {
    cu_pdl_enter();
    const int r = blockIdx.x;
    const float p = (float)pos[r];
    for (int t = threadIdx.x; t < n_heads * half; t += blockDim.x) {
        const int h = t / half, j = t % half;
        float *xh = x + ((int64_t)r * n_heads + h) * head_dim;
        float x1 = xh[j], x2 = xh[j + half];
        rope_rotate(x1, x2, p, f, j);
        xh[j] = x1;
        xh[j + half] = x2;
    }
}

qstatus cuda_rope(qbackend *be, float *x, int n, int n_heads, int head_dim, int rot_dim, const int32_t *pos,
                  float theta) {
    if (n <= 0) return Q_OK;
    if (rot_dim % 2 || rot_dim > head_dim || rot_dim / 2 > ROPE_MAX_PAIRS)
        return q_fail(Q_EINVAL, "cuda rope: rot_dim %d (head_dim %d)", rot_dim, head_dim);
    CU_TRY(cu_launch(rope_kernel, n, 128, 0, cu_stream(be), x, n_heads, head_dim, rot_dim / 2, pos,
                     rope_freqs_make(theta, rot_dim)),
           "rope");
    return Q_OK;
}

/* Prompt rows: block r writes row row0 + r at position pos0 + r. */
template <typename T>
__global__ void kv_write_kernel(const float *__restrict__ k, const float *__restrict__ v, int row0, int pos0,
                                int n_kv, int dim, T *kc, T *vc) {
    cu_pdl_enter();
    const int r = blockIdx.x;
    const int64_t width = (int64_t)n_kv * dim, at = (pos0 + r) * kv_stride<T>(n_kv, dim);
    kv_write_row(k + (row0 + r) * width, v + (row0 + r) * width, kc + at, vc + at, n_kv, dim);
}

/* One key's step of the online softmax for one query head: its score s and the lane's per values of its V
 * row vr update the running max m, sum l and the lane's part of the weighted V sum acc. */
__device__ __forceinline__ void att_online(float s, const float (&vr)[ATT_MAX_PER_LANE], int per,
                                           float (&acc)[ATT_MAX_PER_LANE], float &m, float &l) {
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), e = expf(s - m_new);
    l = l * corr + e;
#pragma unroll
    for (int c = 0; c < ATT_MAX_PER_LANE; c++)
        if (c < per) acc[c] = acc[c] * corr + e * vr[c];
    m = m_new;
}

/* The block's ATT_WARPS warps attend one query head (qr, dim values) to the keys [start, end) of kv
 * head kvh: warp w takes keys start + w, start + w + ATT_WARPS, ... with an online softmax (running
 * max m, sum l, and a dim-vector held dim/32 per lane); the warps' results merge in warp order.
 * Writes out[i] = sum_j e^(s_j - M) v_j[i], divided by L when normalise; ml (if not NULL) gets (M, L). */
template <typename T>
__device__ void block_attend(const float *__restrict__ qr, const T *__restrict__ kc,
                             const T *__restrict__ vc, int start, int end, int n_kv, int kvh, int dim,
                             float scale, bool normalise, float *__restrict__ out, float *__restrict__ ml) {
    __shared__ float part_m[ATT_WARPS], part_l[ATT_WARPS];
    __shared__ float part_acc[ATT_WARPS][ATT_MAX_PER_LANE * 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, per = dim / 32;
    float qv[ATT_MAX_PER_LANE], acc[ATT_MAX_PER_LANE];
#pragma unroll
    for (int c = 0; c < ATT_MAX_PER_LANE; c++) {
        qv[c] = c < per ? qr[lane + 32 * c] : 0.0f;
        acc[c] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const int64_t stride = kv_stride<T>(n_kv, dim);
    for (int j = start + warp; j < end; j += ATT_WARPS) {
        const T *kr = kc + j * stride, *kj = kr + (int64_t)kvh * dim;
        const float ks = kv_scale(kr, n_kv, dim, kvh);
        float d = 0.0f;
#pragma unroll
        for (int c = 0; c < ATT_MAX_PER_LANE; c++)
            if (c < per) d = fmaf(qv[c], kv_value<T>(kv_get(kj + lane + 32 * c), ks), d);
        const T *vr0 = vc + j * stride, *vj = vr0 + (int64_t)kvh * dim;
        const float vsc = kv_scale(vr0, n_kv, dim, kvh);
        float vr[ATT_MAX_PER_LANE];
#pragma unroll
        for (int c = 0; c < ATT_MAX_PER_LANE; c++) vr[c] = c < per ? kv_value<T>(kv_get(vj + lane + 32 * c), vsc) : 0.0f;
        att_online(warp_sum(d) * scale, vr, per, acc, m, l);
    }
    if (lane == 0) {
        part_m[warp] = m;
        part_l[warp] = l;
    }
#pragma unroll
    for (int c = 0; c < ATT_MAX_PER_LANE; c++)
        if (c < per) part_acc[warp][lane + 32 * c] = acc[c];
    __syncthreads();
    float M = part_m[0];
    for (int w = 1; w < ATT_WARPS; w++) M = fmaxf(M, part_m[w]);
    float L = 0.0f;
    for (int w = 0; w < ATT_WARPS; w++) L += part_l[w] * expf(part_m[w] - M); /* empty warps: exp(-inf) = 0 */
    if (ml && threadIdx.x == 0) {
        ml[0] = M;
        ml[1] = L;
    }
    for (int i = threadIdx.x; i < dim; i += ATT_WARPS * 32) {
        float o = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) o += part_acc[w][i] * expf(part_m[w] - M);
        out[i] = normalise ? o / L : o;
    }
}

template <typename T>
__global__ void __launch_bounds__(ATT_WARPS * 32)
attention_kernel(const float *__restrict__ q, int row0, int pos0, const T *__restrict__ kc,
                 const T *__restrict__ vc, int n_q, int n_kv, int dim, float scale, float *__restrict__ out) {
    cu_pdl_enter();
    const int r = blockIdx.x, h = blockIdx.y;
    const int64_t at = ((int64_t)(row0 + r) * n_q + h) * dim;
    block_attend(q + at, kc, vc, 0, pos0 + r + 1, n_kv, h / (n_q / n_kv), dim, scale, true, out + at, NULL);
}

/* Decode rows (seqs not marked chunked): every row of every such seq in one launch, the keys split
 * into fixed ranges of ATT_SPLIT positions (flash-decoding) so a long context fills the GPU. A row's
 * splits depend only on its position, and the partial results merge in split order, so its result
 * depends on nothing else in the batch (EXACT(batch)); draft rows and serial decode rows run the same
 * arithmetic (EXACT(draft)). */

template <typename T>
__global__ void kv_write_rows_kernel(const float *__restrict__ k, const float *__restrict__ v,
                                     const __grid_constant__ cu_tab rows, int n_kv, int dim) {
    cu_pdl_enter();
    const att_row rw = cu_tab_at<att_row>(rows, blockIdx.x);
    const int64_t width = (int64_t)n_kv * dim;
    kv_write_row(k + rw.row * width, v + rw.row * width, kv_row<T>(rw.kc, rw.pos, n_kv, dim),
                 kv_row<T>(rw.vc, rw.pos, n_kv, dim), n_kv, dim);
}

/* part: [row][head][split][2 + dim] = (max, sum, unnormalised output) over the split's keys.
 * GQA-packed: a block takes up to ATT_GROUP query heads that share one kv head (grid.y = kv head x
 * groups of ATT_GROUP), so each key and value row is read once for all of them; warp w takes keys
 * start + w, start + w + ATT_SPLIT_WARPS, ... with an online softmax per head, and the warps' results merge
 * in warp order. A lane holds dim/32 elements of each row: with VEC = 16 / sizeof(T) (4 f32 or 8 bf16, when
 * dim % (32 VEC) == 0) VEC adjacent ones per 32 VEC (one 16-byte load), else every 32nd. The next key's K and
 * V rows load while the current key is used (raw, widened at use, so the load never waits), and the 4 heads'
 * dot products reduce over the warp together (att_dot4: 10 shuffles, not 20). The queries sit in shared
 * memory: in registers they left no room for the rows in flight. */
#define ATT_SPLIT_WARPS 8 /* 32 keys per warp: enough warps in flight to hide each key's load */

/* Element c of a lane's share of a row. */
template <int VEC> __device__ __forceinline__ int att_elem(int c, int lane) {
    return 32 * VEC * (c / VEC) + VEC * lane + c % VEC;
}

/* A lane's share of one K or V row as loaded (per / VEC 16-byte chunks when VEC > 1, else per elements
 * of T), widened to f32 only where it is used: a load of a row ahead never makes the warp wait. */
template <int VEC, typename T> struct att_slot {
    uint4 ch[VEC > 1 ? ATT_MAX_PER_LANE / VEC : 1];
    T e[VEC > 1 ? 1 : ATT_MAX_PER_LANE];
    float s; /* q8: the head's scale */
};

/* Head kvh's row of position row `row`. */
template <int VEC, typename T>
__device__ __forceinline__ void att_slot_load(att_slot<VEC, T> &r, const T *__restrict__ row, int n_kv, int dim,
                                              int kvh, int lane, int per) {
    const T *p = row + (int64_t)kvh * dim;
    if constexpr (sizeof(T) == 1) r.s = kv_scale(row, n_kv, dim, kvh);
    if constexpr (VEC > 1) {
#pragma unroll
        for (int cv = 0; cv < ATT_MAX_PER_LANE / VEC; cv++)
            if (VEC * cv < per) r.ch[cv] = __ldg((const uint4 *)(p + 32 * VEC * cv + VEC * lane));
    } else {
#pragma unroll
        for (int c = 0; c < ATT_MAX_PER_LANE; c++)
            if (c < per) r.e[c] = p[32 * c + lane];
    }
}

template <int VEC, typename T>
__device__ __forceinline__ void att_slot_get(const att_slot<VEC, T> &r, float (&x)[ATT_MAX_PER_LANE], int per) {
    if constexpr (VEC > 1) {
#pragma unroll
        for (int cv = 0; cv < ATT_MAX_PER_LANE / VEC; cv++) {
            if (VEC * cv < per) kv_widen16<T>(r.ch[cv], x + VEC * cv);
            else
#pragma unroll
                for (int e = 0; e < VEC; e++) x[VEC * cv + e] = 0.0f;
        }
    } else {
#pragma unroll
        for (int c = 0; c < ATT_MAX_PER_LANE; c++) x[c] = c < per ? kv_value<T>(kv_widen(r.e[c]), r.s) : 0.0f;
    }
}

/* d[h]: this lane's part of head h's dot product; on return, the warp's sum for head h in every lane (a
 * fixed order: halves exchange heads, then quarters, then a butterfly over the 8 lanes of a head). */
__device__ __forceinline__ void att_dot4(float (&d)[4], int lane) {
    const unsigned F = 0xffffffffu;
    const bool h16 = lane & 16, h8 = lane & 8;
    const float a = (h16 ? d[2] : d[0]) + __shfl_xor_sync(F, h16 ? d[0] : d[2], 16);
    const float b = (h16 ? d[3] : d[1]) + __shfl_xor_sync(F, h16 ? d[1] : d[3], 16);
    float c = (h8 ? b : a) + __shfl_xor_sync(F, h8 ? a : b, 8); /* head 2 h16 + h8, over 4 lanes */
    c += __shfl_xor_sync(F, c, 4);
    c += __shfl_xor_sync(F, c, 2);
    c += __shfl_xor_sync(F, c, 1);
#pragma unroll
    for (int h = 0; h < 4; h++) d[h] = __shfl_sync(F, c, 8 * h);
}

/* One key's scores for the group's heads (d[hh], every lane). sq: the queries in shared memory,
 * sq[(hh * ATT_MAX_PER_LANE / 4 + c4) * 32 + lane] = the lane's elements 4 c4 .. 4 c4 + 3 of head hh. */
__device__ __forceinline__ void att_scores(const float4 *sq, const float (&kr)[ATT_MAX_PER_LANE], int per, int lane,
                                           float (&d)[ATT_GROUP]) {
#pragma unroll
    for (int hh = 0; hh < ATT_GROUP; hh++) {
        d[hh] = 0.0f;
#pragma unroll
        for (int c4 = 0; c4 < ATT_MAX_PER_LANE / 4; c4++) {
            if (4 * c4 >= per) break;
            const float4 qq = sq[(hh * (ATT_MAX_PER_LANE / 4) + c4) * 32 + lane];
            d[hh] = fmaf(qq.x, kr[4 * c4], d[hh]);
            if (4 * c4 + 1 < per) d[hh] = fmaf(qq.y, kr[4 * c4 + 1], d[hh]);
            if (4 * c4 + 2 < per) d[hh] = fmaf(qq.z, kr[4 * c4 + 2], d[hh]);
            if (4 * c4 + 3 < per) d[hh] = fmaf(qq.w, kr[4 * c4 + 3], d[hh]);
        }
    }
    att_dot4(d, lane);
}

/* The online softmax and V accumulation of one key with scores d. */
__device__ __forceinline__ void att_accumulate(const float (&d)[ATT_GROUP], const float (&vr)[ATT_MAX_PER_LANE],
                                               float scale, int per, float (&acc)[ATT_GROUP][ATT_MAX_PER_LANE],
                                               float (&m)[ATT_GROUP], float (&l)[ATT_GROUP]) {
#pragma unroll
    for (int hh = 0; hh < ATT_GROUP; hh++) att_online(d[hh] * scale, vr, per, acc[hh], m[hh], l[hh]);
}

template <int VEC, typename T>
__global__ void __launch_bounds__(ATT_SPLIT_WARPS * 32, 2)
attention_split_kernel(const float *__restrict__ q, const __grid_constant__ cu_tab rows, int n_q, int n_kv, int dim,
                       float scale, int max_splits, float *__restrict__ part, float *__restrict__ out1) {
    cu_pdl_enter();
    __shared__ float part_m[ATT_SPLIT_WARPS][ATT_GROUP], part_l[ATT_SPLIT_WARPS][ATT_GROUP];
    __shared__ float part_acc[ATT_SPLIT_WARPS][ATT_GROUP][ATT_MAX_PER_LANE * 32];
    __shared__ float4 sq[ATT_GROUP * ATT_MAX_PER_LANE / 4 * 32];
    const att_row rw = cu_tab_at<att_row>(rows, blockIdx.x);
    const int G = n_q / n_kv, groups = (G + ATT_GROUP - 1) / ATT_GROUP;
    const int kvh = blockIdx.y / groups, g0 = (blockIdx.y % groups) * ATT_GROUP;
    const int h0 = kvh * G + g0, nh = min(ATT_GROUP, G - g0);
    const int split = blockIdx.z, start = split * ATT_SPLIT, end = min(rw.pos + 1, start + ATT_SPLIT);
    if (start > rw.pos) return; /* whole block */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, per = dim / 32;
    float *sqf = (float *)sq;
    for (int i = threadIdx.x; i < ATT_GROUP * ATT_MAX_PER_LANE * 32; i += ATT_SPLIT_WARPS * 32) {
        const int e = i & 3, ln = (i >> 2) & 31, c4 = (i >> 7) % (ATT_MAX_PER_LANE / 4);
        const int hh = i / (ATT_MAX_PER_LANE * 32), c = 4 * c4 + e;
        sqf[i] = hh < nh && c < per ? q[((int64_t)rw.row * n_q + h0 + hh) * dim + att_elem<VEC>(c, ln)] : 0.0f;
    }
    float acc[ATT_GROUP][ATT_MAX_PER_LANE], m[ATT_GROUP], l[ATT_GROUP];
#pragma unroll
    for (int hh = 0; hh < ATT_GROUP; hh++) {
#pragma unroll
        for (int c = 0; c < ATT_MAX_PER_LANE; c++) acc[hh][c] = 0.0f;
        m[hh] = -INFINITY, l[hh] = 0.0f;
    }
    __syncthreads();
    const int64_t kstride = kv_stride<T>(n_kv, dim);
    const T *kc = (const T *)rw.kc, *vc = (const T *)rw.vc;
    /* Key j's rows are in the slots ks, vs; each slot takes the next key's row (j + W) as soon as key j is
     * done with it: K after the scores, V after the accumulation. (Two keys ahead, or steps of 2-4 keys with
     * one softmax correction each, spilled or ran slower on the H200: docs/performance.md, session 5.) */
    att_slot<VEC, T> ks, vs;
    int j = start + warp;
    if (j < end)
        att_slot_load(ks, kc + j * kstride, n_kv, dim, kvh, lane, per),
            att_slot_load(vs, vc + j * kstride, n_kv, dim, kvh, lane, per);
    for (; j < end; j += ATT_SPLIT_WARPS) {
        const int jn = j + ATT_SPLIT_WARPS;
        float r[ATT_MAX_PER_LANE], d[ATT_GROUP];
        att_slot_get(ks, r, per);
        att_scores(sq, r, per, lane, d);
        if (jn < end) att_slot_load(ks, kc + jn * kstride, n_kv, dim, kvh, lane, per);
        att_slot_get(vs, r, per);
        att_accumulate(d, r, scale, per, acc, m, l);
        if (jn < end) att_slot_load(vs, vc + jn * kstride, n_kv, dim, kvh, lane, per);
    }
#pragma unroll
    for (int hh = 0; hh < ATT_GROUP; hh++) {
        if (lane == 0) part_m[warp][hh] = m[hh], part_l[warp][hh] = l[hh];
#pragma unroll
        for (int c = 0; c < ATT_MAX_PER_LANE; c++)
            if (c < per) part_acc[warp][hh][att_elem<VEC>(c, lane)] = acc[hh][c];
    }
    __syncthreads();
    for (int hh = 0; hh < nh; hh++) {
        float M = part_m[0][hh];
        for (int w = 1; w < ATT_SPLIT_WARPS; w++) M = fmaxf(M, part_m[w][hh]);
        float L = 0.0f;
        for (int w = 0; w < ATT_SPLIT_WARPS; w++) L += part_l[w][hh] * expf(part_m[w][hh] - M); /* empty warps: 0 */
        float *o = part + (((int64_t)blockIdx.x * n_q + h0 + hh) * max_splits + split) * (dim + 2);
        float *o1 = out1 ? out1 + ((int64_t)rw.row * n_q + h0 + hh) * dim : NULL; /* one split: the output */
        if (threadIdx.x == 0 && !o1) o[0] = M, o[1] = L;
        for (int i = threadIdx.x; i < dim; i += ATT_SPLIT_WARPS * 32) {
            float v = 0.0f;
            for (int w = 0; w < ATT_SPLIT_WARPS; w++) v += part_acc[w][hh][i] * expf(part_m[w][hh] - M);
            if (o1) o1[i] = att_one_split(v, L);
            else o[2 + i] = v;
        }
    }
}

/* The combine: a block per (row, head, 32 PL dims), each thread PL consecutive dims of them. PL is chosen per
 * launch (att_comb_pl) and changes no arithmetic: a dim's sum is the same whatever block or thread takes it.
 * The block stages every split's (m_s, l_s) in shared memory, takes the max M (any order gives the same value),
 * then e_s = exp(m_s - M); warp w sums splits w, w + W, ... of its thread's dims in that order (loads of
 * ATT_COMB_UNROLL splits in flight), the warps' sums add in warp order, and L = sum l_s e_s is a fixed strided
 * sum and butterfly. A fixed order for a given number of splits, so a row's result depends only on its position
 * (EXACT(batch)). Why PL: many rows of few splits (64 streams at 512 positions, 3 splits) took 25 us a layer at
 * PL 1, 8,192 blocks of 256 threads each repeating the block's setup and barriers for 32 dims; one row of many
 * splits (32k) needs the dims spread (PL 1: at one block per (row, head) it took 15 us a layer, a chain of L2
 * latencies on 16 SMs). Dynamic shared memory: att_combine_smem (all of it there, in whole 16-byte quads:
 * compute-sanitizer once flagged a read past a small table with a static array beside it). */
#define ATT_COMB_WARPS 8
#define ATT_COMB_UNROLL 8 /* splits a warp loads before it sums them */
#define ATT_COMB_MAX_SPLITS 5000 /* l_s and m_s / e_s in 41 KB of shared memory: positions to 1,280,000 */
#define ATT_COMB_MAX_PL 8 /* dims a thread: head dims to 256 in one block */
#define ATT_COMB_MIN_BLOCKS 256 /* the largest PL that still gives about two blocks an SM */
#define ATT_COMB_PAD(n) (((n) + 3) & ~3)
static size_t att_combine_smem(int max_splits, int pl) {
    return (32 + 2 * (size_t)ATT_COMB_PAD(max_splits) + (size_t)ATT_COMB_WARPS * 32 * pl) * sizeof(float);
}
static int att_comb_pl(int n_rows, int n_q, int dim, int max_splits) {
    int pl = ATT_COMB_MAX_PL;
    while (pl > 1 && (dim % (32 * pl) || (int64_t)n_rows * n_q * (dim / (32 * pl)) < ATT_COMB_MIN_BLOCKS ||
                      att_combine_smem(max_splits, pl) > 48 * 1024)) /* the default limit; PL 1 fits it */
        pl /= 2;
    return pl;
}
/* The output gate's split rows (attention_gated): the combine also leaves o_proj's input, glu_act(g) * out rounded to
 * bf16 as gemv_split_kernel's GLU staging makes it, in dequant mode's split rows for K = n_q dim (cu_gate_rows). */
struct att_gate {
    const float *g; /* vector (row, head)'s gate at g[(row n_q + head) g_stride + d] */
    int64_t g_stride;
    int act;
    unsigned short *xs; /* NULL: none */
};
template <int PL>
__global__ void __launch_bounds__(ATT_COMB_WARPS * 32)
attention_combine_kernel(const __grid_constant__ cu_tab rows, int n_q, int dim, int max_splits,
                         const float *__restrict__ part, float *__restrict__ out, const att_gate ag) {
    /* red[32], l_s, e_s (ATT_COMB_PAD(max_splits) each; e_s holds m_s until it is known), sums[W][32 PL] */
    extern __shared__ float4 comb4[];
    float *red = (float *)comb4, *ls = red + 32, *es = ls + ATT_COMB_PAD(max_splits);
    float *sums = es + ATT_COMB_PAD(max_splits);
    cu_pdl_enter();
    const att_row rw = cu_tab_at<att_row>(rows, blockIdx.x);
    const int h = blockIdx.y, n_splits = rw.pos / ATT_SPLIT + 1, d0 = blockIdx.z * 32 * PL;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t stride = dim + 2;
    const float *p = part + ((int64_t)blockIdx.x * n_q + h) * max_splits * stride;
    /* a thread's dim of the gate, loaded now so that its latency hides behind the splits' (at the end it was the
     * block's last round trip) */
    static_assert(32 * ATT_COMB_MAX_PL <= ATT_COMB_WARPS * 32, "a thread a dim of the block's at the end");
    const bool mine = threadIdx.x < 32 * PL;
    const float gate = ag.xs && mine ? __ldg(ag.g + ((int64_t)rw.row * n_q + h) * ag.g_stride + d0 + threadIdx.x) : 0.0f;
    float m = -INFINITY;
    for (int s = threadIdx.x; s < n_splits; s += blockDim.x) {
        const float2 ml = __ldcg((const float2 *)(p + s * stride)); /* stride is even: 8-byte aligned */
        es[s] = ml.x, ls[s] = ml.y, m = fmaxf(m, ml.x);
    }
    m = warp_max(m);
    if (lane == 0) red[warp] = m;
    __syncthreads();
    float M = red[0];
    for (int w = 1; w < ATT_COMB_WARPS; w++) M = fmaxf(M, red[w]);
    float lsum = 0.0f;
    for (int s = threadIdx.x; s < n_splits; s += blockDim.x) {
        const float e = expf(es[s] - M); /* the same thread wrote m_s there */
        es[s] = e;
        lsum += ls[s] * e;
    }
    lsum = warp_sum(lsum);
    __syncthreads(); /* es complete; every warp is past its read of red */
    if (lane == 0) red[warp] = lsum;
    float o[PL] = {};
    const float *pd = p + 2 + d0 + lane * PL; /* 8-byte aligned with PL even (stride and d0 are) */
    for (int s0 = warp; s0 < n_splits; s0 += ATT_COMB_UNROLL * ATT_COMB_WARPS) {
        float x[ATT_COMB_UNROLL][PL]; /* the loads of UNROLL splits first, then their sums in order */
#pragma unroll
        for (int u = 0; u < ATT_COMB_UNROLL; u++) {
            const int s = s0 + u * ATT_COMB_WARPS;
#pragma unroll
            for (int k = 0; k < PL; k += PL > 1 ? 2 : 1) {
                if constexpr (PL > 1) {
                    const float2 v = s < n_splits ? __ldcg((const float2 *)(pd + s * stride + k)) : make_float2(0, 0);
                    x[u][k] = v.x, x[u][k + 1] = v.y;
                } else {
                    x[u][k] = s < n_splits ? __ldcg(pd + s * stride + k) : 0.0f;
                }
            }
        }
#pragma unroll
        for (int u = 0; u < ATT_COMB_UNROLL; u++) {
            const int s = s0 + u * ATT_COMB_WARPS;
            if (s < n_splits)
#pragma unroll
                for (int k = 0; k < PL; k++) o[k] = fmaf(x[u][k], es[s], o[k]);
        }
    }
#pragma unroll
    for (int k = 0; k < PL; k++) sums[warp * 32 * PL + lane * PL + k] = o[k];
    __syncthreads();
    float L = red[0];
    for (int w = 1; w < ATT_COMB_WARPS; w++) L += red[w];
    if (mine) {
        const int i = threadIdx.x;
        float v = sums[i];
        for (int w = 1; w < ATT_COMB_WARPS; w++) v += sums[w * 32 * PL + i];
        const float y = v / L;
        out[((int64_t)rw.row * n_q + h) * dim + d0 + i] = y;
        if (ag.xs)
            gt_split_store(ag.xs, (int64_t)n_q * dim / 64, rw.row, h * dim + d0 + i,
                           __fmul_rn(glu_act(gate, ag.act), y));
    }
}
static cudaError_t att_combine_launch(cudaStream_t st, const cu_tab &tab, int n_rows, int n_q, int dim,
                                      int max_splits, const float *part, float *out, const att_gate &ag) {
    const int pl = att_comb_pl(n_rows, n_q, dim, max_splits);
    void (*k)(const cu_tab, int, int, int, const float *, float *, const att_gate) =
        pl == 8 ? attention_combine_kernel<8> : pl == 4 ? attention_combine_kernel<4>
        : pl == 2 ? attention_combine_kernel<2> : attention_combine_kernel<1>;
    return cu_launch(k, dim3((unsigned)n_rows, (unsigned)n_q, (unsigned)(dim / (32 * pl))), ATT_COMB_WARPS * 32,
                     att_combine_smem(max_splits, pl), st, tab, n_q, dim, max_splits, part, out, ag);
}

/* The split kernel for element type T: 16-byte row loads where dim allows (att_slot_load). */
template <typename T>
static void (*att_split_for(int dim))(const float *, const cu_tab, int, int, int, float, int, float *, float *) {
    constexpr int V = sizeof(T) == 1 ? 1 : 16 / sizeof(T); /* q8: a code a lane (kv_widen16 is f32 / bf16's) */
    return dim % (32 * V) == 0 ? attention_split_kernel<V, T> : attention_split_kernel<1, T>;
}

/* attention_gated's qk as qk_norm_rope, on the rows of every seq. */
static qstatus att_qk_apply(qbackend *be, const qqk_prep *qk, float *q, float *k, const qseq *seqs, int n_seqs,
                            int n_q, int n_kv, int dim) {
    int n = 0;
    for (int s = 0; s < n_seqs; s++)
        if (seqs[s].n_rows > 0 && seqs[s].row0 + seqs[s].n_rows > n) n = seqs[s].row0 + seqs[s].n_rows;
    return cuda_qk_norm_rope(be, qk->qx, qk->qx_stride, qk->q_w, q, k, qk->k_w, n, n_q, n_kv, dim, qk->eps,
                             qk->rot_dim, qk->pos, qk->theta);
}

/* gate: attention_gated's; the combine leaves the gated rows where every row is a decode row (rows 0 .. n_rows - 1)
 * and runs (more than one split), the gate is a plain one on heads and dequant mode's matmul takes them. qk:
 * attention_gated's, applied here first; where every row is a decode row, in order, with the K/V write in one launch
 * (cuda_qk_norm_rope_kv). */
template <typename T>
static qstatus attention_decode_rows(qbackend *be, float *q, float *k, const float *v, const qseq *seqs, int n_seqs,
                                     void *const *k_cache, void *const *v_cache, int n_q, int n_kv, int dim,
                                     float scale, float *out, const qglu *gate, const qqk_prep *qk) {
    int n_rows = 0, max_pos = 0, chunked = 0;
    for (int s = 0; s < n_seqs; s++)
        if (!seqs[s].chunked) {
            n_rows += seqs[s].n_rows;
            if (seqs[s].pos0 + seqs[s].n_rows - 1 > max_pos) max_pos = seqs[s].pos0 + seqs[s].n_rows - 1;
        } else {
            chunked += seqs[s].n_rows > 0;
        }
    att_gate ag = {};
    const int max_splits = max_pos / ATT_SPLIT + 1;
    const bool rows = gate && !gate->norm_w && gate->dim == dim && !chunked && max_splits > 1 && n_rows > 0 &&
                      cu_seq_rows_covered(seqs, n_seqs) == n_rows;
    Q_TRY(cu_gate_rows(be, CU_ROWS_ATT, rows ? out : NULL, gate, n_rows, (int64_t)n_q * dim, &ag.xs));
    if (ag.xs) ag.g = gate->g, ag.g_stride = gate->g_stride, ag.act = gate->act;
    if (n_rows == 0) return qk ? att_qk_apply(be, qk, q, k, seqs, n_seqs, n_q, n_kv, dim) : Q_OK;
    if (max_splits > ATT_COMB_MAX_SPLITS)
        return q_fail(Q_EINVAL, "cuda attention: position %d is past the decode kernel's %d", max_pos,
                      ATT_COMB_MAX_SPLITS * ATT_SPLIT);
    att_row *tab = (att_row *)malloc((size_t)n_rows * sizeof *tab);
    if (!tab) return q_fail(Q_ENOMEM, "cuda attention: out of memory");
    int i = 0;
    bool in_order = !chunked; /* every batch row a decode row, row i tab[i], and 16-byte aligned caches */
    for (int s = 0; s < n_seqs; s++) {
        if (seqs[s].chunked) continue;
        in_order &= seqs[s].n_rows == 0 || (cu_aligned16(k_cache[s]) && cu_aligned16(v_cache[s]));
        for (int r = 0; r < seqs[s].n_rows; r++, i++) {
            tab[i] = (att_row){k_cache[s], v_cache[s], seqs[s].pos0 + r, seqs[s].row0 + r, seqs[s].pos0};
            in_order &= tab[i].row == i;
        }
    }
    cu_tab dtab;
    qstatus st = cu_tab_make(be, tab, (size_t)n_rows * sizeof *tab, &dtab);
    free(tab);
    Q_TRY(st);
    bool kv_done = false;
    if (qk && in_order && cuda_qk_kv_on())
        Q_TRY(cuda_qk_norm_rope_kv(be, qk, q, k, v, n_rows, n_q, n_kv, dim, dtab, kv_fmt_of<T>(), &kv_done));
    if (qk && !kv_done) Q_TRY(att_qk_apply(be, qk, q, k, seqs, n_seqs, n_q, n_kv, dim));
    float *part = NULL;
    Q_TRY(cu_att_scratch(be, (size_t)n_rows * n_q * max_splits * (dim + 2) * sizeof(float), &part));
    if (!kv_done)
        CU_TRY(cu_launch(kv_write_rows_kernel<T>, n_rows, 256, 0, cu_stream(be), k, v, dtab, n_kv, dim),
               "attention kv write (decode)");
    const int groups = n_kv * ((n_q / n_kv + ATT_GROUP - 1) / ATT_GROUP);
    const dim3 grid((unsigned)n_rows, (unsigned)groups, (unsigned)max_splits);
    float *out1 = max_splits == 1 ? out : NULL; /* every row in one split: no combine (att_one_split) */
    cudaError_t e = cudaErrorNotSupported;
    if (sizeof(T) < 4 && cuda_att_tc_on()) /* bf16 and q8 caches: tensor cores where the head dim allows */
        e = (sizeof(T) == 2 ? cuda_att_split_tc : cuda_att_split_tc8)(grid, cu_stream(be), q, dtab, n_q, n_kv, dim,
                                                                      scale, max_splits, part, out1);
    if (e == cudaErrorNotSupported)
        e = cu_launch(att_split_for<T>(dim), grid, ATT_SPLIT_WARPS * 32, 0, cu_stream(be), q, dtab, n_q, n_kv, dim,
                      scale, max_splits, part, out1);
    CU_TRY(e, "attention (decode split)");
    if (!out1)
        CU_TRY(att_combine_launch(cu_stream(be), dtab, n_rows, n_q, dim, max_splits, part, out, ag),
               "attention (decode combine)");
    return Q_OK;
}

template <typename T>
static qstatus attention_typed(qbackend *be, float *q, float *k, const float *v, const qseq *seqs, int n_seqs,
                               void *const *k_cache, void *const *v_cache, int n_q, int n_kv, int dim, float scale,
                               float *out, const qglu *gate, const qqk_prep *qk) {
    Q_TRY(attention_decode_rows<T>(be, q, k, v, seqs, n_seqs, k_cache, v_cache, n_q, n_kv, dim, scale, out, gate,
                                   qk));
    for (int s = 0; s < n_seqs; s++) { /* prompt seqs: the K/V write, then one attention launch each */
        const qseq *sq = &seqs[s];
        if (sq->n_rows <= 0 || !sq->chunked) continue;
        T *kc = (T *)k_cache[s], *vc = (T *)v_cache[s];
        CU_TRY(cu_launch(kv_write_kernel<T>, sq->n_rows, 256, 0, cu_stream(be), k, v, sq->row0, sq->pos0, n_kv, dim,
                         kc, vc),
               "attention kv write");
        if (cuda_flash_supported(n_q, n_kv, dim)) { /* tensor cores, GQA-packed (cuda_flash_prefill.cu) */
            Q_TRY(cuda_flash_prefill(be, q, sq->row0, sq->n_rows, sq->pos0, kc, vc,
                                     kv_fmt_of<T>(),
                                     n_q, n_kv, dim, scale, cuda_flash_precision(), out));
            continue;
        }
        dim3 grid((unsigned)sq->n_rows, (unsigned)n_q); /* other shapes: a block per (row, head) */
        CU_TRY(cu_launch(attention_kernel<T>, grid, ATT_WARPS * 32, 0, cu_stream(be), q, sq->row0, sq->pos0,
                         (const T *)kc, (const T *)vc, n_q, n_kv, dim, scale, out),
               "attention");
    }
    return Q_OK;
}

qstatus cuda_attention_gated(qbackend *be, float *q, float *k, const float *v, const qseq *seqs, int n_seqs,
                             void *const *k_cache, void *const *v_cache, qwfmt kv_fmt, int n_q, int n_kv, int dim,
                             float scale, float *out, const qglu *gate, const qqk_prep *qk) {
    if (dim % 32 || dim > 32 * ATT_MAX_PER_LANE || n_kv <= 0 || n_q % n_kv)
        return q_fail(Q_EINVAL, "cuda attention: dim %d, heads %d/%d not supported", dim, n_q, n_kv);
    if (kv_fmt == QW_F32)
        return attention_typed<float>(be, q, k, v, seqs, n_seqs, k_cache, v_cache, n_q, n_kv, dim, scale, out, gate,
                                      qk);
    if (kv_fmt == QW_BF16)
        return attention_typed<kv_bf16>(be, q, k, v, seqs, n_seqs, k_cache, v_cache, n_q, n_kv, dim, scale, out,
                                        gate, qk);
    if (kv_fmt == QW_Q8 && dim % 16 == 0)
        return attention_typed<kv_q8>(be, q, k, v, seqs, n_seqs, k_cache, v_cache, n_q, n_kv, dim, scale, out, gate,
                                      qk);
    return q_fail(Q_EINVAL, "cuda attention: K/V cache format %d", (int)kv_fmt);
}
/* qk NULL: q and k are only read */
qstatus cuda_attention(qbackend *be, const float *q, const float *k, const float *v, const qseq *seqs,
                       int n_seqs, void *const *k_cache, void *const *v_cache, qwfmt kv_fmt, int n_q, int n_kv,
                       int dim, float scale, float *out) {
    return cuda_attention_gated(be, (float *)q, (float *)k, v, seqs, n_seqs, k_cache, v_cache, kv_fmt, n_q, n_kv, dim,
                                scale, out, NULL, NULL);
}
