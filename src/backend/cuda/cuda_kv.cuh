/* cuda_kv.cuh: K/V cache elements (backend.h attention): f32, or bf16 rounded to nearest even as a row
 * is written and widened exactly as it is read, so a bf16 cache computes what an f32 cache holding the
 * rounded rows computes. Kernels are templates on the element type T (float or kv_bf16). */
#ifndef QUILL_CUDA_KV_CUH
#define QUILL_CUDA_KV_CUH

#include "cuda_common.cuh"

typedef __nv_bfloat16 kv_bf16;

/* A stored element, and 16 loaded bytes (4 f32 or 8 bf16: r[0 .. 16 / sizeof(T))), as f32. */
__device__ __forceinline__ float kv_widen(float v) { return v; }
__device__ __forceinline__ float kv_widen(kv_bf16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ void kv_widen16(uint4 u, float *r) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if constexpr (sizeof(T) == 4) r[i] = __uint_as_float(w[i]);
        else r[2 * i] = __uint_as_float(w[i] << 16), r[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

template <typename T> __device__ __forceinline__ float kv_get(const T *p) { return kv_widen(__ldg(p)); }
/* The 16 aligned bytes at p, widened. */
template <typename T> __device__ __forceinline__ void kv_get16(const T *p, float *r) {
    kv_widen16<T>(__ldg((const uint4 *)p), r);
}
__device__ __forceinline__ void kv_put(float *p, float v) { *p = v; }
__device__ __forceinline__ void kv_put(kv_bf16 *p, float v) { *p = __float2bfloat16_rn(v); }

#endif
