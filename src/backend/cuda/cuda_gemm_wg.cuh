/* cuda_gemm_wg.cuh: a prompt-row GEMM on Hopper's warpgroup tensor cores (wgmma, sm_90a):
 * y[m][n] (f32) = x[m][K] . W[n][K]^T, x and W in bf16, f32 accumulation.
 *
 * PROTOTYPE, UNVERIFIED: written in session 7 with no device time left; it compiles for sm_90a and sm_80.
 * tests/cuda/bench_wgmma.sh checks it (f64 reference, cuBLAS, rows bitwise independent of m) and times it.
 * Why it exists: prefill runs cuBLASLt's sm80-class kernel (~430 TF/s in bf16 mode) because no Hopper
 * algorithm passed the every-m, no-workspace rule that keeps a row's result independent of how many rows share
 * the call; a kernel of our own has that property by construction (below) and can reach wgmma rates.
 *
 * Work: a block of 2 warpgroups computes 128 rows x 128 outputs of up to 3 products summed in one
 * accumulator (wg_job: the split precision's w_hi.x_hi, w_hi.x_lo, w_lo.x_hi, or bf16 mode's one); each
 * warpgroup 64 rows with wgmma.m64n128k16 (A = its 64 rows of the x tile, B = the 128 weight rows, both from
 * shared memory).
 * K runs in tiles of 64 (one 128-byte row of bf16) through WG_STAGES shared-memory stages filled by
 * cp.async (every thread copies; rows past m or n are zeros), stored in the 128-byte swizzle the wgmma
 * descriptors name (16-byte chunk c of row r at r * 128 + ((c ^ (r % 8)) * 16), 8-row groups 1024 bytes
 * apart). Loads run WG_STAGES - 2 tiles ahead: the stage a load overwrites was read by the wgmma batch two
 * tiles back, which wgmma.wait_group 1 has retired in both warpgroups before the barrier the load follows.
 *
 * EXACT(batch): an output is one block's accumulation over K in K order, by the same instruction
 * sequence whatever m is, and a row's inputs never meet another row's, so a row's result does not depend on
 * m or on its place in the tile. (The accumulation order inside one wgmma is the hardware's, the same on
 * every call.) */
#ifndef QUILL_CUDA_GEMM_WG_CUH
#define QUILL_CUDA_GEMM_WG_CUH

#include "cuda_mma.cuh"

#define WG_BM 128 /* rows of x per block: 2 warpgroups x 64 */
#define WG_BN 128 /* outputs per block */
#define WG_BK 64  /* K per stage: one 128-byte swizzle row of bf16 */
#ifndef WG_STAGES
#define WG_STAGES 4
#endif
#define WG_THREADS 256
#define WG_TILE_BYTES (WG_BM * WG_BK * 2) /* 16 KB, the x tile and the W tile alike (WG_BM == WG_BN) */
#define WG_STAGE_BYTES (2 * WG_TILE_BYTES)
#define WG_SMEM (WG_STAGES * WG_STAGE_BYTES + 1024) /* + slack to align the stages to 1024 bytes */

/* Shared-memory matrix descriptor of a K-major tile in the 128-byte swizzle: start address >> 4 (bits
 * 0-13), leading byte offset (unused by this layout: 1), stride byte offset 1024 >> 4 between 8-row groups
 * (bits 32-45), swizzle mode 1 = 128 bytes (bits 62-63). */
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr) {
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}

/* wgmma exists in sm_90a code only: the other targets of a build (sm_80) compile these to nothing, and the
 * host launches the kernel only on a device of compute capability 9.0 (wg_device_ok). */
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
/* cp.async's writes become visible to the tensor cores' (async proxy) reads. */
__device__ __forceinline__ void wg_fence_proxy(void) {
#if WG_ON
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
/* Pins the accumulators: no use of them moves across this point (they are written asynchronously). */
__device__ __forceinline__ void wg_pin(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* d += A . B^T for one k16 step: A 64 x 16 (descriptor da), B 128 x 16 (db), both K-major. */
__device__ __forceinline__ void wg_mma(float (&d)[64], uint64_t da, uint64_t db) {
#if WG_ON
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
                   "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
                   "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
                   "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
                   "+f"(d[63])
                 : "l"(da), "l"(db), "r"(1));
#else
    (void)d, (void)da, (void)db;
#endif
}

/* Rows [r0, r0 + 128) x columns [k0, k0 + 64) of a row-major bf16 matrix (rows x K) into the swizzled
 * tile at saddr by cp.async (rows >= rows: zeros). Thread i of 256 takes chunks i, i + 256, ...: 8
 * consecutive threads cover one row's 128 bytes. */
__device__ __forceinline__ void wg_load_tile(uint32_t saddr, const __nv_bfloat16 *__restrict__ g, int64_t rows,
                                             int64_t K, int64_t r0, int64_t k0) {
#pragma unroll
    for (int j = 0; j < WG_BM * 8 / WG_THREADS; j++) {
        const int i = (int)threadIdx.x + j * WG_THREADS, r = i >> 3, c = i & 7;
        const bool ok = r0 + r < rows;
        cu_cp_async16(saddr + (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4)), ok ? g + (r0 + r) * K + k0 + c * 8 : g, ok);
    }
}

/* Up to 3 products summed in one accumulator, in order: y = x[0] w[0]^T + x[1] w[1]^T + ... (the split
 * precision's hi.hi, hi.lo, lo.hi). */
#define WG_PRODUCTS 3
struct wg_job {
    const __nv_bfloat16 *x[WG_PRODUCTS], *w[WG_PRODUCTS];
    int products;
};

/* Product p's operands, with constant indices only (the job stays in parameter space). */
__device__ __forceinline__ void wg_pick(const wg_job &j, int p, const __nv_bfloat16 **x, const __nv_bfloat16 **w) {
    *x = p == 0 ? j.x[0] : p == 1 ? j.x[1] : j.x[2];
    *w = p == 0 ? j.w[0] : p == 1 ? j.w[1] : j.w[2];
}

/* Tile t (k-tile t % KT of product t / KT) of x and W into the stage at saddr. */
__device__ __forceinline__ void wg_load_stage(uint32_t saddr, const wg_job &job, int t, int KT, int m, int n, int K,
                                              int64_t row0, int64_t col0) {
    const __nv_bfloat16 *x, *w;
    wg_pick(job, t / KT, &x, &w);
    const int64_t k0 = (int64_t)(t % KT) * WG_BK;
    wg_load_tile(saddr, x, m, K, row0, k0);
    wg_load_tile(saddr + WG_TILE_BYTES, w, n, K, col0, k0);
}

/* grid (ceil(n / 128), ceil(m / 128)), WG_THREADS threads, WG_SMEM bytes of dynamic shared memory.
 * K % 64 == 0, every x and w 16-byte aligned with K-element rows. Tile t of the loop is k-tile t % KT of
 * product t / KT. */
__global__ void __launch_bounds__(WG_THREADS, 1)
    wg_gemm_kernel(const __grid_constant__ wg_job job, float *__restrict__ y, int m, int n, int K) {
    extern __shared__ unsigned char wg_smem[];
    const uint32_t base = (cu_smem_addr(wg_smem) + 1023u) & ~1023u;
    const int64_t row0 = (int64_t)blockIdx.y * WG_BM, col0 = (int64_t)blockIdx.x * WG_BN;
    const int wgi = threadIdx.x >> 7, KT = K / WG_BK, NT = KT * job.products;
    constexpr int P = WG_STAGES - 2; /* tiles loaded ahead */
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; i++) d[i] = 0.0f;
#pragma unroll
    for (int t = 0; t < P; t++) {
        if (t < NT) wg_load_stage(base + t * WG_STAGE_BYTES, job, t, KT, m, n, K, row0, col0);
        cu_cp_commit();
    }
    for (int kt = 0; kt < NT; kt++) {
        cu_cp_wait<P - 1>(); /* this thread's copies of tile kt are in */
        wg_fence_proxy();
        __syncthreads(); /* everyone's are; both warpgroups have retired the batch of tile kt - 2 */
        const int nt = kt + P;
        if (nt < NT)
            wg_load_stage(base + (uint32_t)(nt % WG_STAGES) * WG_STAGE_BYTES, job, nt, KT, m, n, K, row0, col0);
        cu_cp_commit();
        const uint32_t a = base + (uint32_t)(kt % WG_STAGES) * WG_STAGE_BYTES + wgi * 64 * 128;
        const uint32_t b = base + (uint32_t)(kt % WG_STAGES) * WG_STAGE_BYTES + WG_TILE_BYTES;
        wg_pin(d);
        wg_fence();
#pragma unroll
        for (int k = 0; k < WG_BK / 16; k++) wg_mma(d, wg_desc(a + 32 * k), wg_desc(b + 32 * k));
        wg_commit();
        wg_wait<1>();
        wg_pin(d);
    }
    wg_wait<0>();
    wg_pin(d);
    /* d[4 nb + q]: row 16 warp + lane / 4 (+ 8 for q >= 2), column 8 nb + 2 (lane % 4) (+ 1 for odd q) */
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int64_t r = row0 + wgi * 64 + warp * 16 + (lane >> 2);
#pragma unroll
    for (int nb = 0; nb < WG_BN / 8; nb++) {
        const int64_t c = col0 + nb * 8 + 2 * (lane & 3);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t rr = r + 8 * h;
            if (rr >= m) continue;
            if (c + 1 < n && !(n & 1)) { /* c is even: 8-byte aligned */
                *(float2 *)(y + rr * n + c) = make_float2(d[4 * nb + 2 * h], d[4 * nb + 2 * h + 1]);
                continue;
            }
            if (c < n) y[rr * n + c] = d[4 * nb + 2 * h];
            if (c + 1 < n) y[rr * n + c + 1] = d[4 * nb + 2 * h + 1];
        }
    }
}

/* Compute capability 9.0, where the sm_90a code runs (read once; racing first readers store the same value). */
static inline int wg_device_ok(void) {
    static int ok = -1;
    if (ok < 0) {
        int dev = 0, major = 0, minor = 0;
        ok = cudaGetDevice(&dev) == cudaSuccess &&
             cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
             cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess && major == 9 &&
             minor == 0;
    }
    return ok;
}

/* Launches the kernel for m rows of n outputs (a plain launch: prompt work does not use programmatic launch). */
static inline cudaError_t wg_gemm_launch(const wg_job &job, float *y, int m, int n, int K, cudaStream_t st) {
    static int attr; /* racing first callers set the same value */
    if (!attr) {
        const cudaError_t e =
            cudaFuncSetAttribute(wg_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, WG_SMEM);
        if (e != cudaSuccess) return e;
        attr = 1;
    }
    const dim3 grid((unsigned)((n + WG_BN - 1) / WG_BN), (unsigned)((m + WG_BM - 1) / WG_BM));
    wg_gemm_kernel<<<grid, WG_THREADS, WG_SMEM, st>>>(job, y, m, n, K);
    return cudaGetLastError();
}

#endif
