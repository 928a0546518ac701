/* cuda_wgmma.cuh: Hopper's warpgroup MMA (wgmma, sm_90a) building blocks: whether a build's code for the device
 * has it, the shared-memory descriptor of a K-major tile in the 128-byte swizzle, the fence / commit / wait of
 * the asynchronous pipeline, and wgmma.m64nNk16 with A from registers (bf16, f32 accumulators). The register A
 * fragment of each of the warpgroup's 4 warps (its 16 rows of the 64) is mma.sync m16n8k16's, and the sums are
 * mma.sync's bit for bit (tests/cuda/bench_mma_bits.cu), so a kernel may use either for the same rows. */
#ifndef QUILL_CUDA_WGMMA_CUH
#define QUILL_CUDA_WGMMA_CUH

#include "cuda_common.cuh"

/* Shared-memory matrix descriptor of a K-major tile in the 128-byte swizzle: start address >> 4 (bits
 * 0-13), leading byte offset (unused by this layout: 1), stride byte offset 1024 >> 4 between 8-row groups
 * (bits 32-45), swizzle mode 1 = 128 bytes (bits 62-63). */
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr) {
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}

/* wgmma exists in sm_90a code only: the other targets of a build (sm_80) compile these to nothing, and the
 * host launches the kernel only where the probe kernel says it has them (wg_available). */
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_ON 1
#else
#define WG_ON 0
#endif
__device__ __forceinline__ void wg_fence(void) {
#if WG_ON
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit(void) {
#if WG_ON
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void wg_wait(void) {
#if WG_ON
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
/* mbarrier and TMA primitives (sm_90). */
__device__ __forceinline__ void wg_bar_init(uint32_t bar, uint32_t count) {
#if WG_ON
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void wg_bar_arrive(uint32_t bar) {
#if WG_ON
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}
/* After a thread's wg_bar_init calls: makes the barriers' initial state visible (to the block, after a barrier, and
 * to the copies that will complete on them). */
__device__ __forceinline__ void wg_bar_init_done(void) {
#if WG_ON
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
/* Arrives and tells the barrier to expect `bytes` more of copies before its phase completes. */
__device__ __forceinline__ void wg_bar_expect(uint32_t bar, uint32_t bytes) {
#if WG_ON
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
/* Whether the barrier's phase of this parity has completed (one try: the hardware may hold the thread a while). */
__device__ __forceinline__ uint32_t wg_bar_try(uint32_t bar, uint32_t parity) {
    uint32_t done = 1;
#if WG_ON
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
#endif
    return done;
}
/* Waits for the completion of the barrier's phase of this parity. */
__device__ __forceinline__ void wg_bar_wait(uint32_t bar, uint32_t parity) {
    while (!wg_bar_try(bar, parity)) {
    }
}
/* wg_bar_wait for a thread with nothing else to do (a producer ahead of its consumers): it sleeps between tries, so
 * that its spinning does not take issue slots from the consumer warps beside it (the 4-bit fold's producer: 210 tries
 * a K tile under ncu, 10-25 % of a launch's time, docs/performance.md; the bf16 GEMM's, whose consumers issue little
 * beside their MMAs, kept the plain wait: no change measured). */
__device__ __forceinline__ void wg_bar_wait_idle(uint32_t bar, uint32_t parity) {
    while (!wg_bar_try(bar, parity)) __nanosleep(64);
}
/* Orders what this thread has seen through ordinary loads (another grid's writes, acquired by its programmatic wait)
 * before its next copies (the async proxy) read global memory. */
__device__ __forceinline__ void wg_fence_proxy_async_global(void) {
#if WG_ON
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
}
/* A 1-D bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) from global src into shared memory at
 * dst; completion is signalled on bar (whose expected bytes the issuing thread has raised: wg_bar_expect). */
__device__ __forceinline__ void wg_bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
#if WG_ON
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
#endif
}
/* Named barrier ID (1..15) of n threads: sync waits for its phase, arrive counts without waiting. Two warpgroups
 * take turns at the tensor cores with a pair of them (cuda_gemm_wgq.cuh's ping-pong). */
template <int ID> __device__ __forceinline__ void wg_named_sync(int n) {
    asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "r"(n) : "memory");
}
template <int ID> __device__ __forceinline__ void wg_named_arrive(int n) {
    asm volatile("bar.arrive %0, %1;\n" ::"n"(ID), "r"(n) : "memory");
}
/* d (+)= A . B^T for one k16 step on 64 rows of A (the warp's m16 fragment a, as mma.sync takes it) and N rows
 * of B at descriptor db; accumulate 0: d = A . B^T (the accumulators' old values unused). */
template <int N>
__device__ __forceinline__ void wg_mma_ra(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int accumulate);
template <> __device__ __forceinline__ void wg_mma_ra<8>(float (&d)[4], const uint32_t (&a)[4], uint64_t db,
                                                            int accumulate) {
#if WG_ON
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
#else
    (void)d, (void)a, (void)db, (void)accumulate;
#endif
}
template <> __device__ __forceinline__ void wg_mma_ra<16>(float (&d)[8], const uint32_t (&a)[4], uint64_t db,
                                                            int accumulate) {
#if WG_ON
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7}, "
                 "{%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
#else
    (void)d, (void)a, (void)db, (void)accumulate;
#endif
}
template <> __device__ __forceinline__ void wg_mma_ra<32>(float (&d)[16], const uint32_t (&a)[4], uint64_t db,
                                                            int accumulate) {
#if WG_ON
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
                 "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
#else
    (void)d, (void)a, (void)db, (void)accumulate;
#endif
}
template <> __device__ __forceinline__ void wg_mma_ra<64>(float (&d)[32], const uint32_t (&a)[4], uint64_t db,
                                                            int accumulate) {
#if WG_ON
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
#else
    (void)d, (void)a, (void)db, (void)accumulate;
#endif
}

/* The 64 accumulators of an m64n128k16 as inline-asm operands (wg_mma_ra<128> and cuda_gemm_wg.cuh's wg_mma). */
#define WG_ACC64(d)                                                                                                    \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),                                \
    "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),                            \
    "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),                         \
    "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),                         \
    "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),                         \
    "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),                         \
    "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),                         \
    "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),                         \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),                         \
    "+f"(d[63])

template <> __device__ __forceinline__ void wg_mma_ra<128>(float (&d)[64], const uint32_t (&a)[4], uint64_t db,
                                                             int accumulate) {
#if WG_ON
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
                 : WG_ACC64(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
#else
    (void)d, (void)a, (void)db, (void)accumulate;
#endif
}

/* Whether this build's code for this device has wgmma: the device is compute 9.0 and the binary the runtime
 * picks for it was compiled for sm_90a (a plain sm_90 or sm_80 build compiles the kernel to nothing), as a
 * probe kernel from the same translation unit reports. Asked once; racing first callers store the same value. */
static __global__ void wg_probe_kernel(int *on) { *on = WG_ON; }
static inline int wg_available(void) {
    static int ok = -1;
    if (ok < 0) {
        int dev = 0, major = 0, minor = 0, on = 0, *d = NULL;
        if (cudaGetDevice(&dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess && major == 9 &&
            minor == 0 && cudaMalloc((void **)&d, sizeof *d) == cudaSuccess) {
            wg_probe_kernel<<<1, 1>>>(d);
            if (cudaGetLastError() != cudaSuccess ||
                cudaMemcpy(&on, d, sizeof on, cudaMemcpyDeviceToHost) != cudaSuccess)
                on = 0;
            cudaFree(d);
        }
        ok = on;
    }
    return ok;
}

#endif
