/* cuda_mma.cuh: the tensor-core building blocks the attention and GDN kernels share: mma.sync m16n8k16 (bf16
 * operands, f32 accumulators) and m16n8k8 (tf32, with the 3xTF32 split), ldmatrix (plain and transposed)
 * from XOR-swizzled shared tiles, 16- and 8-byte shared loads, bf16x2 packing with the f32 remainder split
 * (x = hi + lo), and 16- and 4-byte cp.async with zero fill. */
#ifndef QUILL_CUDA_MMA_CUH
#define QUILL_CUDA_MMA_CUH

#include "cuda_common.cuh"

__device__ __forceinline__ uint32_t cu_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16 bytes (four words) and 8 bytes (two floats) of shared memory at addr. */
__device__ __forceinline__ uint4 cu_lds128(uint32_t addr) {
    uint4 u;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "r"(addr));
    return u;
}
__device__ __forceinline__ float2 cu_lds64f(uint32_t addr) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
    return v;
}

__device__ __forceinline__ void cu_ldsm_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

__device__ __forceinline__ void cu_ldsm_x4_t(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

/* c += a * b, m16n8k16, bf16 operands, f32 accumulators. */
__device__ __forceinline__ void cu_mma_bf16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* c += a * b, m16n8k8, tf32 operands (32-bit registers), f32 accumulators. */
__device__ __forceinline__ void cu_mma_tf32(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* x rounded to tf32 (to nearest), as the 32-bit operand register mma takes. */
__device__ __forceinline__ uint32_t cu_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

/* x = hi + lo + e as tf32 parts (both rounded to nearest): |e| <= 2^-21 |x| about, so the three products
 * hi.hi + hi.lo + lo.hi of two split operands are f32-class ("3xTF32"). */
__device__ __forceinline__ void cu_tf32_split(float x, uint32_t &hi, uint32_t &lo) {
    hi = cu_tf32(x);
    lo = cu_tf32(__fsub_rn(x, __uint_as_float(hi)));
}

/* The 3xTF32 product of split operands: big += a_hi b_hi; small += a_lo b_hi + a_hi b_lo (the small terms
 * kept apart until the caller adds big + small, so they are not rounded away against the big sum). */
__device__ __forceinline__ void cu_mma_3xtf32(float *big, float *small, const uint32_t *ah, const uint32_t *al,
                                              const uint32_t *bh, const uint32_t *bl) {
    cu_mma_tf32(small, al, bh[0], bh[1]);
    cu_mma_tf32(small, ah, bl[0], bl[1]);
    cu_mma_tf32(big, ah, bh[0], bh[1]);
}

/* bf16x2 of (a, b), a in the low half. */
__device__ __forceinline__ uint32_t cu_pack_bf16x2(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}

/* The remainders of (a, b) after their bf16 parts hi (cu_pack_bf16x2(a, b)), as bf16x2. */
__device__ __forceinline__ uint32_t cu_pack_bf16x2_lo(float a, float b, uint32_t hi) {
    __nv_bfloat162 h;
    memcpy(&h, &hi, 4);
    return cu_pack_bf16x2(__fsub_rn(a, __low2float(h)), __fsub_rn(b, __high2float(h)));
}

/* Byte offset of 16-byte chunk cc of row r in a [rows][D] bf16 tile, XOR-swizzled so that ldmatrix
 * (8 rows of one chunk column) and row-wise stores are free of bank conflicts. D >= 64. */
template <int D> __device__ __forceinline__ uint32_t cu_swz(int r, int cc) {
    return (uint32_t)(r * (D * 2) + ((cc ^ (r & 7)) << 4));
}

/* 16 bytes global -> shared, bypassing L1; with ok false nothing is read and the 16 bytes are zeros. */
__device__ __forceinline__ void cu_cp_async16(uint32_t dst, const void *src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0)
                 : "memory");
}
/* 4 bytes global -> shared (through L1: cp.async.cg takes 16 only); with ok false, 4 zeros. */
__device__ __forceinline__ void cu_cp_async4(uint32_t dst, const void *src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 4 : 0) : "memory");
}
__device__ __forceinline__ void cu_cp_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* Waits until at most N of this thread's committed groups are still in flight. */
template <int N> __device__ __forceinline__ void cu_cp_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#endif
