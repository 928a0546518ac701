/* cuda_gemm_wg.cuh: the prompt-row GEMM on Hopper's warpgroup tensor cores (wgmma, sm_90a):
 * y[m][n] (f32) = sum over products p of x_p[m][K] . W_p[n][K]^T, x and W in bf16, f32 accumulation.
 *
 * Why it exists: cuBLASLt's Hopper kernels all wanted split-K or workspace at some row count, so the prompt
 * path ran its sm80-class kernel (~430 TF/s); a kernel of our own keeps a row's result independent of how
 * many rows share the call by construction (below) and runs at wgmma rates.
 *
 * Work: a block of 3 warpgroups computes 128 rows x 256 outputs (the large tile). Warpgroup 0 is the producer: one
 * thread issues the tensor-memory-accelerator (TMA) copies of each K tile (64 wide: one 128-byte row of bf16) of x
 * (128 rows) and W (256 rows) into one of WG_STAGES shared-memory stages, in the 128-byte swizzle the wgmma
 * descriptors name, and the copy engine signals the stage's `full` barrier. Warpgroups 1 and 2 consume: each
 * its 64 rows of the x tile times the 256 weight rows (two wgmma.m64n128k16 per k16), then every consumer
 * warp signals the stage's `empty` barrier once its MMAs that read the stage are done, and the producer
 * refills it. Rows past m and outputs past n come in as zeros (TMA's bounds) and are not stored.
 * One launch takes up to 4 weights that share x (a block's projections: wg_job), so a small one (the GDN
 * gates' 32 outputs) rides along with the large ones instead of running a launch of a few blocks.
 * Up to 3 products run through the one accumulator, smallest first (the split precision's hi.lo and lo.hi,
 * then hi.hi: the small terms add up at their own scale before the large ones arrive).
 * The small tile (wg_small): a producer and one consumer warpgroup, 64 rows x 128 outputs, two blocks an SM.
 * A launch whose large tiles would leave most SMs idle takes it (wg_use_small): a prompt of 32 rows against a
 * 4096-output weight is 16 large blocks on 132 SMs, each computing 128 rows of which 96 are zeros.
 * An output's instructions are the same in both: m64n128k16 over its 64-row, 128-column piece, at the same
 * place in the instruction (row0 and col0 are multiples of 64 and 128), in the same K and product order.
 *
 * EXACT(batch): an output is one block's accumulation over the products and K in a fixed order, by the same
 * instruction sequence whatever m is, and a row's inputs never meet another row's, so a row's result does
 * not depend on m or on its place in the tile. (The accumulation order inside one wgmma is the hardware's,
 * the same on every call.) */
#ifndef QUILL_CUDA_GEMM_WG_CUH
#define QUILL_CUDA_GEMM_WG_CUH

#include <stdlib.h>
#include <string.h>

#include <cuda.h> /* CUtensorMap and its enums (types only: the encoder comes from the runtime's entry point) */
#include <cudaTypedefs.h>

#include "cuda_mma.cuh"
#include "cuda_wgmma.cuh"

#define WG_BK 64  /* K per stage: one 128-byte swizzle row of bf16 */
#ifndef WG_STAGES
#define WG_STAGES 4
#endif
/* A block's tile: C consumer warpgroups of 64 rows each, H halves of 128 outputs, S stages. */
template <int C, int H, int S> struct wg_tile {
    static constexpr int CW = C, NH = H, BM = 64 * C, BN = 128 * H, THREADS = 128 * (1 + C), STAGES = S;
    static constexpr int X_BYTES = BM * WG_BK * 2, STAGE_BYTES = X_BYTES + BN * WG_BK * 2;
    static constexpr int SMEM = S * STAGE_BYTES + 1024; /* + slack to align the stages to 1024 bytes */
};
typedef wg_tile<2, 2, WG_STAGES> wg_large; /* 128 x 256, 4 stages of 48 KB: 193 KB, one block an SM */
typedef wg_tile<1, 1, WG_STAGES> wg_small; /* 64 x 128, 4 stages of 24 KB: 97 KB, two blocks an SM */
#define WG_GROUP_M 16 /* row blocks that take the weight blocks in turn (L2 reuse of both operands) */
#define WG_PRODUCTS 3

/* Pins the accumulators: no use of them moves across this point (they are written asynchronously). */
template <int N> __device__ __forceinline__ void wg_pin(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
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
                 : WG_ACC64(d)
                 : "l"(da), "l"(db), "r"(1));
#else
    (void)d, (void)da, (void)db;
#endif
}

/* The box at (k, row) of the tensor map into shared memory at dst; completion is signalled on bar. */
__device__ __forceinline__ void wg_tma_load(uint32_t dst, const CUtensorMap *map, int k, int row, uint32_t bar) {
#if WG_ON
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                 "[%4];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(k), "r"(row), "r"(bar)
                 : "memory");
#endif
}
/* The same for a three-dimensional map, the box at (c0, c1, c2). */
__device__ __forceinline__ void wg_tma_load_3d(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2,
                                               uint32_t bar) {
#if WG_ON
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
                 "%4}], [%5];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
                 : "memory");
#endif
}
/* Gives this warpgroup's registers back (producer) or takes more (consumers): 40 + 2 x 232 per thread fit. */
template <int R> __device__ __forceinline__ void wg_setmaxnreg_dec(void) {
#if WG_ON
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
#endif
}
template <int R> __device__ __forceinline__ void wg_setmaxnreg_inc(void) {
#if WG_ON
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
#endif
}

/* One launch: up to WG_WEIGHTS weights that share the rows x (a block's projections), each y_i (m x n_i) =
 * sum over products p of x[xsel[p]] . w[i][p]^T, in product order. The blocks of the launch are the row
 * blocks times every weight's column blocks (nb0[i] is weight i's first), so a small weight rides along with
 * a large one instead of running a launch of a few blocks. */
#define WG_WEIGHTS 4
struct wg_job {
    CUtensorMap x[2];                        /* the split's x_hi and x_lo (bf16 mode: x_hi alone) */
    CUtensorMap w[WG_WEIGHTS][WG_PRODUCTS]; /* weight i's operand of product p */
    float *y[WG_WEIGHTS];
    int n[WG_WEIGHTS], nb0[WG_WEIGHTS + 1];
    int count, products;
    int xsel[WG_PRODUCTS];
};

/* A ring's barriers, by thread 0, before any thread uses them: a stage's `full` completes on the producer's one
 * arrival and its copies' bytes, its `empty` on one arrival of each of the `consumers` (every consumer warp). */
__device__ __forceinline__ void wg_stage_bars_init(uint64_t *full, uint64_t *empty, int stages, int consumers) {
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; s++) {
            wg_bar_init(cu_smem_addr(&full[s]), 1);
            wg_bar_init(cu_smem_addr(&empty[s]), consumers);
        }
        wg_bar_init_done();
    }
    __syncthreads();
}

/* This block's tile: rows row0.. of weight wi's outputs col0.. (BM x BN). WG_GROUP_M row blocks walk the column
 * blocks together (L2 reuse of both operands); nb0[i] is weight i's first column block. */
__device__ __forceinline__ void wg_block_tile(int m, int BM, int BN, const int *nb0, int count, int *row0, int *wi,
                                              int *col0) {
    const int nbm = (m + BM - 1) / BM, nbn = nb0[count], per_group = WG_GROUP_M * nbn;
    const int group = (int)blockIdx.x / per_group, first = group * WG_GROUP_M;
    const int gsize = min(nbm - first, WG_GROUP_M), in_group = (int)blockIdx.x % per_group;
    const int nb = in_group / gsize;
    int w = 0;
    while (w + 1 < count && nb >= nb0[w + 1]) w++;
    *row0 = (first + in_group % gsize) * BM, *wi = w, *col0 = (nb - nb0[w]) * BN;
}

/* grid (ceil(m / T::BM) * nb0[count]), T::THREADS threads, T::SMEM bytes of dynamic shared memory, job made for T's
 * boxes and nb0. K % 64 == 0. Tile t of the K loop is k-tile t % KT of product t / KT. */
template <class T> __device__ __forceinline__ void wg_gemm_body(const wg_job &job, int m, int K) {
    constexpr int CW = T::CW, NH = T::NH;
    extern __shared__ unsigned char wg_smem[];
    __shared__ __align__(8) uint64_t full[T::STAGES], empty[T::STAGES];
    const uint32_t base = (cu_smem_addr(wg_smem) + 1023u) & ~1023u;
    const int KT = K / WG_BK, NT = KT * job.products, wgi = threadIdx.x >> 7;
    int row0, wi, col0;
    wg_block_tile(m, T::BM, T::BN, job.nb0, job.count, &row0, &wi, &col0);
    const int n = job.n[wi];
    wg_stage_bars_init(full, empty, T::STAGES, 4 * CW);
    if (wgi == 0) { /* producer */
        if (CW == 2) wg_setmaxnreg_dec<40>();
        if (threadIdx.x != 0) return;
        for (int t = 0; t < NT; t++) {
            const int s = t % T::STAGES, p = t / KT, k = (t % KT) * WG_BK;
            if (t >= T::STAGES) wg_bar_wait(cu_smem_addr(&empty[s]), (uint32_t)((t / T::STAGES - 1) & 1));
            const uint32_t bar = cu_smem_addr(&full[s]), st = base + (uint32_t)s * T::STAGE_BYTES;
            wg_bar_expect(bar, T::STAGE_BYTES);
            wg_tma_load(st, &job.x[job.xsel[p]], k, row0, bar);
            wg_tma_load(st + T::X_BYTES, &job.w[wi][p], k, col0, bar);
        }
        return;
    }
    if (CW == 2) wg_setmaxnreg_inc<232>();
    const int c = wgi - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    float d[NH][64]; /* outputs 128 h .. 128 h + 127 of the block */
#pragma unroll
    for (int h = 0; h < NH; h++)
#pragma unroll
        for (int i = 0; i < 64; i++) d[h][i] = 0.0f;
    for (int t = 0; t < NT; t++) {
        const int s = t % T::STAGES;
        wg_bar_wait(cu_smem_addr(&full[s]), (uint32_t)((t / T::STAGES) & 1));
        const uint32_t a = base + (uint32_t)s * T::STAGE_BYTES + c * 64 * 128, b = a - c * 64 * 128 + T::X_BYTES;
#pragma unroll
        for (int h = 0; h < NH; h++) wg_pin(d[h]);
        wg_fence();
#pragma unroll
        for (int k = 0; k < WG_BK / 16; k++)
#pragma unroll
            for (int h = 0; h < NH; h++) wg_mma(d[h], wg_desc(a + 32 * k), wg_desc(b + h * 128 * 128 + 32 * k));
        wg_commit();
        wg_wait<1>(); /* the batch of tile t - 1 is done: its stage may be refilled */
#pragma unroll
        for (int h = 0; h < NH; h++) wg_pin(d[h]);
        if (t > 0 && lane == 0) wg_bar_arrive(cu_smem_addr(&empty[(t - 1) % T::STAGES]));
    }
    wg_wait<0>();
#pragma unroll
    for (int h = 0; h < NH; h++) wg_pin(d[h]);
    /* d[h][4 j + q]: row 16 warp + lane / 4 (+ 8 for q >= 2), column 128 h + 8 j + 2 (lane % 4) (+ 1 for odd q) */
    const int64_t r = row0 + c * 64 + warp * 16 + (lane >> 2);
    float *__restrict__ y = job.y[wi];
#pragma unroll
    for (int half = 0; half < NH; half++)
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int64_t col = col0 + half * 128 + j * 8 + 2 * (lane & 3);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t rr = r + 8 * h;
                const float v0 = d[half][4 * j + 2 * h], v1 = d[half][4 * j + 2 * h + 1];
                if (rr >= m) continue;
                if (col + 1 < n && !(n & 1)) { /* col is even: 8-byte aligned */
                    *(float2 *)(y + rr * n + col) = make_float2(v0, v1);
                    continue;
                }
                if (col < n) y[rr * n + col] = v0;
                if (col + 1 < n) y[rr * n + col + 1] = v1;
            }
        }
}

/* The two tiles as kernels: the large one sizes its warpgroups' registers with setmaxnreg (40 + 2 x 232); the small
 * one runs two blocks an SM at the 128 registers a thread the launch gives (bench_wgmma, session 41: 8 stages at one
 * block an SM were 3-11 % faster on grids of fewer blocks than SMs, 20-35 % slower on grids of 64-128 blocks). */
__global__ void __launch_bounds__(wg_large::THREADS, 1)
    wg_gemm_kernel(const __grid_constant__ wg_job job, int m, int K) {
    wg_gemm_body<wg_large>(job, m, K);
}
__global__ void __launch_bounds__(wg_small::THREADS, 2)
    wg_gemm_small_kernel(const __grid_constant__ wg_job job, int m, int K) {
    wg_gemm_body<wg_small>(job, m, K);
}

/* The tensor map of a `rank`-dimensional array of `type` (dims[0] contiguous; strides[d] the bytes between steps of
 * dimension d + 1: multiples of 16; 16-byte aligned) in boxes of box[], in the swizzle sw, zeros outside. The encoder
 * is the driver's, found through the runtime (no link to libcuda). */
static inline cudaError_t wg_map_nd(CUtensorMap *map, CUtensorMapDataType type, const void *g, int rank,
                                    const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                                    CUtensorMapSwizzle sw) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode; /* racing first callers store the same pointer */
    if (!encode) {
        cudaDriverEntryPointQueryResult q;
        const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode, 12000,
                                                               cudaEnableDefault, &q);
        if (e != cudaSuccess) return e;
        if (q != cudaDriverEntryPointSuccess || !encode) return cudaErrorSymbolNotFound;
    }
    const cuuint32_t estr[3] = {1, 1, 1};
    if (rank < 1 || rank > 3) return cudaErrorInvalidValue;
    const CUresult r = encode(map, type, (cuuint32_t)rank, (void *)g, dims, strides, box, estr,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}
/* A row-major matrix of `type` (rows x cols, `pitch` bytes between rows) in boxes of box_cols x box_rows. */
static inline cudaError_t wg_map_any(CUtensorMap *map, CUtensorMapDataType type, const void *g, int64_t rows,
                                     int64_t cols, int64_t pitch, int box_cols, int box_rows, CUtensorMapSwizzle sw) {
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)pitch};
    const cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
    return wg_map_nd(map, type, g, 2, dims, strides, box, sw);
}
/* A row-major bf16 matrix (rows x K, 16-byte aligned) in boxes of box_k x box_rows (64: one 128-byte swizzle row,
 * the GEMM's), in the swizzle sw. */
static inline cudaError_t wg_map(CUtensorMap *map, const __nv_bfloat16 *g, int64_t rows, int64_t K, int box_rows,
                                 int box_k = WG_BK, CUtensorMapSwizzle sw = CU_TENSOR_MAP_SWIZZLE_128B) {
    return wg_map_any(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, g, rows, K, K * 2, box_k, box_rows, sw);
}

/* What one launch computes, in host terms: y[i] (m x n[i], f32) = sum over p < products of
 * x[xsel[p]] (m x K) . w[i][p] (n[i] x K)^T, in product order, for i < count; K % 64 == 0, every operand
 * 16-byte aligned. */
struct wg_args {
    const __nv_bfloat16 *x[2];
    int xsel[WG_PRODUCTS], products, count;
    const __nv_bfloat16 *w[WG_WEIGHTS][WG_PRODUCTS];
    float *y[WG_WEIGHTS];
    int n[WG_WEIGHTS];
};

/* The job's maps and column blocks for tile T. */
template <class T> static inline cudaError_t wg_job_make(wg_job *job, const wg_args *a, int m, int K) {
    memset(job, 0, sizeof *job);
    job->products = a->products, job->count = a->count;
    for (int j = 0; j < 2; j++) {
        if (!a->x[j]) continue;
        const cudaError_t e = wg_map(&job->x[j], a->x[j], m, K, T::BM);
        if (e != cudaSuccess) return e;
    }
    for (int p = 0; p < a->products; p++) {
        if (a->xsel[p] < 0 || a->xsel[p] > 1 || !a->x[a->xsel[p]]) return cudaErrorInvalidValue;
        job->xsel[p] = a->xsel[p];
    }
    for (int i = 0; i < a->count; i++) {
        job->y[i] = a->y[i], job->n[i] = a->n[i];
        job->nb0[i + 1] = job->nb0[i] + (a->n[i] + T::BN - 1) / T::BN;
        for (int p = 0; p < a->products; p++) {
            const cudaError_t e = wg_map(&job->w[i][p], a->w[i][p], a->n[i], K, T::BN);
            if (e != cudaSuccess) return e;
        }
    }
    return cudaSuccess;
}

/* Blocks of tile T for the launch. */
template <class T> static inline int64_t wg_blocks(const wg_args *a, int m) {
    int64_t nb = 0;
    for (int i = 0; i < a->count; i++) nb += (a->n[i] + T::BN - 1) / T::BN;
    return (int64_t)((m + T::BM - 1) / T::BM) * nb;
}

template <class T> static inline cudaError_t wg_launch(void (*kernel)(wg_job, int, int), const wg_args *a, int m,
                                                       int K, cudaStream_t st) {
    static int attr; /* racing first callers set the same value */
    if (!attr) {
        const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::SMEM);
        if (e != cudaSuccess) return e;
        attr = 1;
    }
    wg_job job;
    const cudaError_t e = wg_job_make<T>(&job, a, m, K);
    if (e != cudaSuccess) return e;
    kernel<<<(unsigned)wg_blocks<T>(a, m), T::THREADS, T::SMEM, st>>>(job, m, K);
    return cudaGetLastError();
}

/* Which tile a launch takes: the large one when its blocks would fill at least WG_LARGE_FILL / 8 of the SMs, else
 * the small one (bench_wgmma's table: at 64 large blocks on 132 SMs the small tile is faster on every 9B shape, at 96
 * the large one). QUILL_WG_TILE=large or small forces one (read once; the A/B). Either gives every output the same
 * bits (the top comment), so the choice may follow m. */
#ifndef WG_LARGE_FILL
#define WG_LARGE_FILL 5
#endif
static inline int wg_use_small(const wg_args *a, int m) {
    static int force = -1; /* racing first callers store the same value */
    if (force < 0) {
        const char *v = getenv("QUILL_WG_TILE");
        force = v && !strcmp(v, "large") ? 1 : v && !strcmp(v, "small") ? 2 : 0;
    }
    if (force) return force == 2;
    return wg_blocks<wg_large>(a, m) * 8 < (int64_t)WG_LARGE_FILL * cu_sms();
}

/* A plain launch: prompt work does not use programmatic launch. */
static inline cudaError_t wg_gemm(const wg_args *a, int m, int K, cudaStream_t st) {
    if (a->products < 1 || a->products > WG_PRODUCTS || a->count < 1 || a->count > WG_WEIGHTS || K % WG_BK)
        return cudaErrorInvalidValue;
    if (wg_use_small(a, m)) return wg_launch<wg_small>(wg_gemm_small_kernel, a, m, K, st);
    return wg_launch<wg_large>(wg_gemm_kernel, a, m, K, st);
}

#endif
