/* cuda_kv.cuh: K/V cache elements (backend.h qkv_row_bytes): f32; bf16, rounded to nearest even as a row is
 * written and widened exactly as it is read, so a bf16 cache computes what an f32 cache holding the rounded
 * rows computes; q8 (kv_q8 codes, a position's n_kv head rows of codes then the heads' f32 scales), encoded
 * with kv_format.c's rule bit for bit (kv_q8_write_head) and read as code * scale where the kernels widen to
 * f32 (the tensor-core split kernel takes the codes themselves: cuda_attention_tc.cu, atc_q8). Kernels are
 * templates on the element type T (float, kv_bf16 or kv_q8); a position's row is kv_stride<T> elements of T. */
#ifndef QUILL_CUDA_KV_CUH
#define QUILL_CUDA_KV_CUH

#include "cuda_common.cuh"

typedef __nv_bfloat16 kv_bf16;
typedef int8_t kv_q8;

/* The cache format whose element is T. */
template <typename T> static inline qwfmt kv_fmt_of(void) {
    return sizeof(T) == 4 ? QW_F32 : sizeof(T) == 2 ? QW_BF16 : QW_Q8;
}

/* Elements of T in one position's row of n_kv heads (qkv_row_bytes / sizeof(T)). */
template <typename T> __host__ __device__ __forceinline__ int64_t kv_stride(int n_kv, int dim) {
    if constexpr (sizeof(T) == 1) return ((int64_t)n_kv * (dim + 4) + 15) & ~(int64_t)15;
    else return (int64_t)n_kv * dim;
}

/* Position pos's row in the cache c. */
template <typename T> __device__ __forceinline__ T *kv_row(void *c, int pos, int n_kv, int dim) {
    return (T *)c + pos * kv_stride<T>(n_kv, dim);
}

/* Head kvh's scale in the position row `row` (its first element): q8 only (1 for the others). */
template <typename T> __device__ __forceinline__ float kv_scale(const T *row, int n_kv, int dim, int kvh) {
    if constexpr (sizeof(T) == 1) return __ldg((const float *)(row + (int64_t)n_kv * dim) + kvh);
    else return 1.0f;
}

/* A stored element, and 16 loaded bytes (4 f32 or 8 bf16: r[0 .. 16 / sizeof(T))), as f32. */
__device__ __forceinline__ float kv_widen(float v) { return v; }
__device__ __forceinline__ float kv_widen(kv_bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float kv_widen(kv_q8 v) { return (float)v; }
template <typename T> __device__ __forceinline__ void kv_widen16(uint4 u, float *r) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if constexpr (sizeof(T) == 4) r[i] = __uint_as_float(w[i]);
        else r[2 * i] = __uint_as_float(w[i] << 16), r[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

/* A widened element times its head's scale: the value the cache holds (q8: code * scale, one f32 product). */
template <typename T> __device__ __forceinline__ float kv_value(float widened, float scale) {
    if constexpr (sizeof(T) == 1) return __fmul_rn(widened, scale);
    else return widened;
}

template <typename T> __device__ __forceinline__ float kv_get(const T *p) { return kv_widen(__ldg(p)); }
/* The 8 values at p (16-byte aligned for f32 / bf16, 8-byte for q8), with s their head's scale. */
template <typename T> __device__ __forceinline__ void kv_get8(const T *p, float s, float *r) {
    if constexpr (sizeof(T) == 1) {
        const uint2 u = __ldg((const uint2 *)p);
#pragma unroll
        for (int i = 0; i < 8; i++)
            r[i] = kv_value<T>((float)(int8_t)(((i < 4 ? u.x : u.y) >> (8 * (i & 3))) & 0xff), s);
    } else {
        kv_widen16<T>(__ldg((const uint4 *)p), r);
        if constexpr (sizeof(T) == 4) kv_widen16<T>(__ldg((const uint4 *)p + 1), r + 4);
    }
}
__device__ __forceinline__ void kv_put(float *p, float v) { *p = v; }
__device__ __forceinline__ void kv_put(kv_bf16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* kv_format.c's q8 rule for one head, in pieces a warp's writers share: each lane's values seen (kv_q8_see: the
 * largest magnitude, order-free, and whether one is a NaN or an infinity), the warp's verdict (kv_q8_head), then each
 * value's code and the head's scale, with the same f32 operations (127 / amax, x * inv and amax / 127 correctly
 * rounded). */
__device__ __forceinline__ void kv_q8_see(float x, float &amax, bool &bad) {
    const float a = fabsf(x);
    bad |= !(a <= 3.40282347e38f);
    amax = fmaxf(amax, a);
}
struct kv_q8_head {
    float amax, inv;
    bool bad, zero;
    __device__ kv_q8_head(float lane_amax, bool lane_bad) {
        amax = warp_max(lane_amax);
        bad = __any_sync(0xffffffffu, lane_bad);
        zero = bad || amax < 1e-30f;
        inv = zero ? 0.0f : __fdiv_rn(127.0f, amax);
    }
    __device__ kv_q8 code(float x) const {
        return (kv_q8)(int)(zero ? 0.0f : fminf(fmaxf(rintf(__fmul_rn(x, inv)), -127.0f), 127.0f));
    }
    __device__ float scale() const { return bad ? __int_as_float(0x7fffffff) : zero ? 0.0f : __fdiv_rn(amax, 127.0f); }
};

/* One head of dim values x into q8 codes and its scale, by one warp. */
__device__ __forceinline__ void kv_q8_write_head(const float *__restrict__ x, int dim, kv_q8 *codes, float *scale) {
    const int lane = threadIdx.x & 31;
    float amax = 0.0f;
    bool bad = false;
    for (int d = lane; d < dim; d += 32) kv_q8_see(x[d], amax, bad);
    const kv_q8_head hd(amax, bad);
    for (int d = lane; d < dim; d += 32) codes[d] = hd.code(x[d]);
    if (lane == 0) *scale = hd.scale();
}

/* Head h of a position's row (kv_row) from a warp's registers: lane l holds values 4 (l + 32 c) .. + 3 in o[c] (as
 * the per-head norms hold them, cuda_norm.cu), dim % 4 == 0. The bits are kv_write_row's: each value rounded alone,
 * q8 by the same rule (the scale in the row's slot for head h). */
template <typename T, int NQ>
__device__ __forceinline__ void kv_write_head_quads(const float4 (&o)[NQ], T *pos_row, int n_kv, int dim, int h) {
    const int lane = threadIdx.x & 31;
    T *row = pos_row + (int64_t)h * dim;
    if constexpr (sizeof(T) == 1) {
        float amax = 0.0f;
        bool bad = false;
#pragma unroll
        for (int c = 0; c < NQ; c++)
            if (4 * (lane + 32 * c) < dim)
                kv_q8_see(o[c].x, amax, bad), kv_q8_see(o[c].y, amax, bad), kv_q8_see(o[c].z, amax, bad),
                    kv_q8_see(o[c].w, amax, bad);
        const kv_q8_head hd(amax, bad);
#pragma unroll
        for (int c = 0; c < NQ; c++) {
            const int d = 4 * (lane + 32 * c);
            if (d < dim)
                *(char4 *)(row + d) = make_char4(hd.code(o[c].x), hd.code(o[c].y), hd.code(o[c].z), hd.code(o[c].w));
        }
        if (lane == 0) ((float *)(pos_row + (int64_t)n_kv * dim))[h] = hd.scale();
    } else {
#pragma unroll
        for (int c = 0; c < NQ; c++) {
            const int d = 4 * (lane + 32 * c);
            if (d >= dim) continue;
            if constexpr (sizeof(T) == 4) *(float4 *)(row + d) = o[c];
            else {
                const __nv_bfloat162 a = __floats2bfloat162_rn(o[c].x, o[c].y), b = __floats2bfloat162_rn(o[c].z, o[c].w);
                *(uint2 *)(row + d) = make_uint2(*(const uint32_t *)&a, *(const uint32_t *)&b);
            }
        }
    }
}

/* q8: the zeros after a position's codes and scales (to kv_stride), as on the CPU; by one warp. */
template <typename T> __device__ __forceinline__ void kv_q8_pad(T *kd, T *vd, int n_kv, int dim, int from, int step) {
    if constexpr (sizeof(T) == 1) {
        const int used = n_kv * (dim + 4), pad = (int)kv_stride<T>(n_kv, dim) - used;
        for (int i = from; i < 2 * pad; i += step) (i < pad ? kd : vd)[used + i % pad] = 0;
    }
}

/* One position's k and v rows (n_kv heads of dim values each) into the cache rows kd, vd, by the block's
 * threads (q8: a warp per head row). */
template <typename T>
__device__ __forceinline__ void kv_write_row(const float *__restrict__ ks, const float *__restrict__ vs, T *kd, T *vd,
                                             int n_kv, int dim) {
    if constexpr (sizeof(T) == 1) {
        const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
        for (int h = warp; h < 2 * n_kv; h += warps) {
            const int kv = h / n_kv, hh = h % n_kv;
            T *row = kv ? vd : kd;
            kv_q8_write_head((kv ? vs : ks) + (int64_t)hh * dim, dim, row + (int64_t)hh * dim,
                             (float *)(row + (int64_t)n_kv * dim) + hh);
        }
        kv_q8_pad(kd, vd, n_kv, dim, threadIdx.x, blockDim.x);
    } else {
        for (int i = threadIdx.x; i < n_kv * dim; i += blockDim.x) {
            kv_put(kd + i, ks[i]);
            kv_put(vd + i, vs[i]);
        }
    }
}

#endif
