/* cuda_kv.cuh: K/V cache elements (backend.h attention): f32, or bf16 rounded to nearest even as a row
 * is written and widened exactly as it is read, so a bf16 cache computes what an f32 cache holding the
 * rounded rows computes. Kernels are templates on the element type T (float or kv_bf16). */
#ifndef QUILL_CUDA_KV_CUH
#define QUILL_CUDA_KV_CUH

#include "cuda_common.cuh"

typedef __nv_bfloat16 kv_bf16;

__device__ __forceinline__ float kv_get(const float *p) { return __ldg(p); }
__device__ __forceinline__ float kv_get(const kv_bf16 *p) {
    return __uint_as_float((uint32_t)__ldg((const unsigned short *)p) << 16);
}
__device__ __forceinline__ float kv_widen(float v) { return v; }
__device__ __forceinline__ float kv_widen(kv_bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void kv_put(float *p, float v) { *p = v; }
__device__ __forceinline__ void kv_put(kv_bf16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* The 16 aligned bytes at p as f32 values r[0 .. 16 / sizeof(T)): 4 floats, or 8 bf16 widened. */
__device__ __forceinline__ void kv_get16(const float *p, float *r) {
    const float4 t = __ldg((const float4 *)p);
    r[0] = t.x, r[1] = t.y, r[2] = t.z, r[3] = t.w;
}
__device__ __forceinline__ void kv_get16(const kv_bf16 *p, float *r) {
    const uint4 u = __ldg((const uint4 *)p);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) r[2 * i] = __uint_as_float(w[i] << 16), r[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
}

#endif
