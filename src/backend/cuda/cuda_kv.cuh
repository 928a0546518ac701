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

/* Elements of T in one position's row of n_kv heads (qkv_row_bytes / sizeof(T)). */
template <typename T> __host__ __device__ __forceinline__ int64_t kv_stride(int n_kv, int dim) {
    if constexpr (sizeof(T) == 1) return ((int64_t)n_kv * (dim + 4) + 15) & ~(int64_t)15;
    else return (int64_t)n_kv * dim;
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

/* One head of dim values x into q8 codes and its scale, by one warp: kv_format.c's rule with the same f32
 * operations (the largest magnitude is order-free; 127 / amax, x * inv and amax / 127 correctly rounded). */
__device__ __forceinline__ void kv_q8_write_head(const float *__restrict__ x, int dim, kv_q8 *codes, float *scale) {
    const int lane = threadIdx.x & 31;
    float amax = 0.0f;
    bool bad = false;
    for (int d = lane; d < dim; d += 32) {
        const float a = fabsf(x[d]);
        bad |= !(a <= 3.40282347e38f);
        amax = fmaxf(amax, a);
    }
    amax = warp_max(amax);
    bad = __any_sync(0xffffffffu, bad);
    const bool zero = bad || amax < 1e-30f;
    const float inv = zero ? 0.0f : __fdiv_rn(127.0f, amax);
    for (int d = lane; d < dim; d += 32) {
        const float c = zero ? 0.0f : fminf(fmaxf(rintf(__fmul_rn(x[d], inv)), -127.0f), 127.0f);
        codes[d] = (kv_q8)(int)c;
    }
    if (lane == 0) *scale = bad ? __int_as_float(0x7fffffff) : zero ? 0.0f : __fdiv_rn(amax, 127.0f);
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
        const int used = n_kv * (dim + 4), pad = (int)kv_stride<T>(n_kv, dim) - used; /* zeros, as on the CPU */
        for (int i = threadIdx.x; i < 2 * pad; i += blockDim.x) (i < pad ? kd : vd)[used + i % pad] = 0;
    } else {
        for (int i = threadIdx.x; i < n_kv * dim; i += blockDim.x) {
            kv_put(kd + i, ks[i]);
            kv_put(vd + i, vs[i]);
        }
    }
}

#endif
