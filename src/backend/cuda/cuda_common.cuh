/* cuda_common.cuh: what every CUDA op file shares: error checks that name the op, the backend's
 * state, warp and block reductions in a fixed order (EXACT(batch)), and weight element loads for
 * every storage format. Layouts and semantics are those of backend.h; the CPU twins in backend/cpu/
 * are the reference. */
#ifndef QUILL_CUDA_COMMON_CUH
#define QUILL_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "cuda_q4_tiled.cuh"

typedef struct cuda_state {
    int device;
    cudaStream_t stream;
    /* Staging for small per-call tables (row descriptors, ids): host bytes go into pinned memory and
     * are copied asynchronously to the device twin at the same offset. The offset resets after each
     * stream synchronisation (download, sync), when every earlier copy has completed. */
    unsigned char *stage_host, *stage_dev;
    size_t stage_cap, stage_off;
    /* Partial results of split decode attention, grown on demand. */
    float *att_part;
    size_t att_part_bytes;
    /* The last decode step's executable graph (cuda_graph.cu), updated in place step to step. */
    cudaGraphExec_t graph_exec;
    /* The prefill GEMM's cuBLASLt handle, chosen algorithms and bf16 scratch (cuda_gemm.cu), made on
     * the first matmul_prefill; NULL until then. */
    struct cu_gemm *gemm;
    /* The decode matmul's split-K partials and ticket counters (cuda_gemv.cu), grown on demand. */
    struct cu_gemv *gemv;
} cuda_state;

/* Split-K scratch of the decode matmul (cuda_gemv.cu): need_p floats, need_t ticket counters (zero, and left
 * zero by every user), need_x bytes of split rows. */
qstatus cu_gemv_scratch(qbackend *be, size_t need_p, size_t need_t, size_t need_x, float **part, unsigned **tick,
                        void **pre);
/* A producer's question to the decode matmul (cuda_gemv.cu): where the next matmul will read x (n rows of K, rows 0 ..
 * n - 1 of what the producer writes) through the gate glu as split rows, the rows to write (*rows; the producer writes
 * every row's value, gt_split_store), else NULL. x NULL: none made. producer: which knob turns it off. */
enum { CU_ROWS_GNORM = 0, CU_ROWS_ATT = 1, CU_ROWS_GLU = 2 };
qstatus cu_gate_rows(qbackend *be, int producer, const float *x, const qglu *glu, int n, int64_t K,
                     unsigned short **rows);
/* n where the seqs' rows are exactly rows 0 .. n - 1 (each row one seq's), else -1. */
static inline int cu_seq_rows_covered(const qseq *seqs, int n_seqs) {
    int64_t sum = 0, end = 0;
    for (int s = 0; s < n_seqs; s++) {
        if (seqs[s].row0 < 0 || seqs[s].n_rows < 0) return -1;
        sum += seqs[s].n_rows;
        end = end > (int64_t)seqs[s].row0 + seqs[s].n_rows ? end : (int64_t)seqs[s].row0 + seqs[s].n_rows;
    }
    return sum == end && end <= 2147483647LL ? (int)end : -1;
}
/* Copies `bytes` of host data to device memory valid for ops issued before the next synchronisation.
 * Returns the device address in *dev. */
qstatus cu_stage(qbackend *be, const void *host, size_t bytes, void **dev);
/* A precision variable `name`, read once into *cached (-1 unread, 0 split, 1 bf16, 2 dequant, 3 bad; racing readers
 * store the same value) and returned: 1 for "bf16", 2 for "dequant" where `dequant` allows it, 0 for "split" or
 * unset, 3 for anything else (*bad: the value read). */
static inline int cu_precision_code(const char *name, int *cached, const char **bad, int dequant) {
    if (*cached < 0) {
        const char *p = getenv(name);
        *bad = p;
        *cached = !p || !*p || !strcmp(p, "split") ? 0
                  : !strcmp(p, "bf16")              ? 1
                  : dequant && !strcmp(p, "dequant") ? 2
                                                    : 3;
    }
    return *cached;
}
/* The same as *mode; a bad value fails, naming it. */
static inline qstatus cu_precision_mode(const char *name, int *cached, const char **bad, int dequant, int *mode) {
    if (cu_precision_code(name, cached, bad, dequant) == 3)
        return q_fail(Q_EINVAL, "%s=%s: expected split, bf16%s", name, *bad, dequant ? " or dequant" : "");
    *mode = *cached;
    return Q_OK;
}
/* QUILL_PREFILL_PRECISION (per file that asks), for every prompt-row kernel (the GEMM, flash attention). */
static inline qstatus cu_prefill_precision_bf16(int *bf16) {
    static int cached = -1;
    static const char *bad;
    return cu_precision_mode("QUILL_PREFILL_PRECISION", &cached, &bad, 0, bf16);
}
/* QUILL_DECODE_PRECISION, for the decode matmuls (cuda_gemv_plan.cuh), as *mode: 1 "bf16" rounds each row to bf16
 * where the matmul stages it (one MMA product a row, so a many-row tile holds 8 rows instead of 4 rows' hi and lo
 * parts); 2 "dequant" does that and also makes 4-bit weights bf16 before their MMAs (GT_DQ in cuda_gemv.cuh: no
 * fold per group, so many rows run on wgmma); 0 "split" keeps the f32-class hi + lo split. */
static inline qstatus cu_decode_precision(int *mode) {
    static int cached = -1;
    static const char *bad;
    return cu_precision_mode("QUILL_DECODE_PRECISION", &cached, &bad, 1, mode);
}
/* A per-call table (seq or row descriptors) for one launch. Up to CU_TAB_BYTES it travels inside the
 * kernel's parameters: a host-to-device copy between two kernels costs microseconds of stream time and
 * ends the overlap of programmatic launches, and a decode step has dozens of such tables. A larger one is
 * staged (cu_stage) and read through dev. Kernels take it as `const __grid_constant__ cu_tab` (so
 * indexing it reads the parameter space, not a per-thread copy) and read entries with cu_tab_at. */
#define CU_TAB_BYTES 2048
typedef struct cu_tab {
    const void *dev; /* NULL: the entries are in `in` */
    alignas(16) unsigned char in[CU_TAB_BYTES];
} cu_tab;
template <typename T> __device__ __forceinline__ T cu_tab_at(const cu_tab &t, int i) {
    return t.dev ? ((const T *)t.dev)[i] : ((const T *)t.in)[i];
}
static inline qstatus cu_tab_make(qbackend *be, const void *host, size_t bytes, cu_tab *t) {
    t->dev = NULL;
    if (bytes <= CU_TAB_BYTES) {
        memcpy(t->in, host, bytes);
        return Q_OK;
    }
    void *d = NULL;
    Q_TRY(cu_stage(be, host, bytes, &d));
    t->dev = d;
    return Q_OK;
}
/* Grows the device buffer *buf (*have bytes) to at least need bytes, half again for the next growth,
 * after the stream drains (refused while recording a graph); never shrinks. what names it in errors. */
qstatus cu_grow(cuda_state *s, void **buf, size_t *have, size_t need, const char *what);
/* Device scratch of at least `bytes` for split attention (grows; never shrinks). */
qstatus cu_att_scratch(qbackend *be, size_t bytes, float **out);
/* Frees the prefill GEMM state (cuda_gemm.cu); the stream is idle. */
void cu_gemm_free(cuda_state *s);
/* Frees the decode matmul scratch (cuda_gemv.cu); the stream is idle. */
void cu_gemv_free(cuda_state *s);
/* What matmul_prefill does with W on this backend (mode, algorithm), for benchmarks and logs. */
extern "C" int cuda_prefill_gemm_describe(qbackend *be, const qweight *W, char *buf, size_t len);

static inline cudaStream_t cu_stream(qbackend *be) { return ((cuda_state *)be->impl)->stream; }

/* Whether the stream is being recorded into a graph (cuda_graph.cu). Code that would synchronise or
 * allocate (a scratch buffer growing, a first-use setup) checks it first and fails instead, cleanly:
 * the model then ends the recording and issues the ops directly, when growing is allowed. */
static inline bool cu_capturing(cudaStream_t st) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    return cudaStreamIsCapturing(st, &cs) == cudaSuccess && cs != cudaStreamCaptureStatusNone;
}
#define CU_NOT_CAPTURING(st, what) \
    do { \
        if (cu_capturing(st)) return q_fail(Q_EINVAL, "cuda %s: cannot grow while recording a graph", what); \
    } while (0)

#define CU_TRY(call, op)                                                                        \
    do {                                                                                        \
        cudaError_t cu_e_ = (call);                                                             \
        if (cu_e_ != cudaSuccess)                                                               \
            return q_fail(Q_ECUDA, "cuda %s: %s (%s:%d)", op, cudaGetErrorString(cu_e_), __FILE__, \
                          __LINE__);                                                            \
    } while (0)

/* After a launch: a bad configuration shows here, a fault at the next synchronising call. */
#define CU_LAUNCHED(op) CU_TRY(cudaGetLastError(), op)

/* Programmatic dependent launch (Hopper): the decode ops' kernels go out with cu_launch, which lets a
 * kernel's blocks start while the kernel before it in the stream is still running, so the launch, the
 * block start and (for the matmul) the first weight loads overlap the previous op instead of following
 * it. The rule that keeps this correct: every kernel launched by cu_launch calls cu_pdl_enter() before it
 * reads or writes anything another op touches (weights, which nothing writes, may be read before), and
 * before it returns on any path. A kernel may also read before it what ops two or more launches back
 * wrote: the kernel just before it has passed its own wait, so they are complete (the decode attention
 * loads its first tile of older keys so). cu_pdl_enter waits until the previous grid has completed and its
 * writes are visible, then lets the next grid start; waiting first keeps at most two grids resident.
 * Order and arithmetic are unchanged. On GPUs before sm_90 both are no-ops; QUILL_CUDA_PDL=0 launches plainly. */
__device__ __forceinline__ void cu_pdl_enter(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/* Whether p may be read and written by 16-byte accesses. */
static inline bool cu_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* 1 unless the environment variable name is "0"; read once into *cache (-1 until then; racing first
 * readers store the same value). For the A/B knobs of kernel variants. */
static inline int cu_env_on(const char *name, int *cache) {
    if (*cache < 0) {
        const char *e = getenv(name);
        *cache = !(e && !strcmp(e, "0"));
    }
    return *cache;
}

/* The integer value of the environment variable name where it is in [lo, hi] (atoi), else dflt; read once into *cache
 * (-1 until then; racing first readers store the same value). For the numeric A/B knobs. */
static inline int cu_env_int(const char *name, int *cache, int dflt, int lo, int hi) {
    if (*cache < 0) {
        const char *e = getenv(name);
        const int v = e ? atoi(e) : 0;
        *cache = e && v >= lo && v <= hi ? v : dflt;
    }
    return *cache;
}

/* The current device's SM count, read once (132 where it cannot be read); racing first callers store the same value.
 * For launch shapes (waves, tile choices), never for correctness. */
static inline int cu_sms(void) {
    static int sms;
    if (!sms) {
        int dev = 0, v = 0;
        sms = cudaGetDevice(&dev) == cudaSuccess &&
                      cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && v > 0
                  ? v
                  : 132;
    }
    return sms;
}

static inline int cu_pdl_on(void) {
    static int env = -1, on = -1; /* racing first readers compute the same values */
    if (on < 0) {
        int dev = 0, major = 0;
        on = cu_env_on("QUILL_CUDA_PDL", &env) && cudaGetDevice(&dev) == cudaSuccess &&
             cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9;
    }
    return on;
}

/* The launch configuration of grid x block with smem bytes on st, in clusters of `cluster` blocks along x (1: none)
 * and with programmatic dependent launch when pdl; its attributes go in at. */
static inline cudaLaunchConfig_t cu_launch_config(cudaLaunchAttribute (&at)[2], bool pdl, int cluster, dim3 grid,
                                                  dim3 block, size_t smem, cudaStream_t st) {
    memset(at, 0, sizeof at);
    int k = 0;
    if (pdl) {
        at[k].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[k++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster > 1) {
        at[k].id = cudaLaunchAttributeClusterDimension;
        at[k].val.clusterDim.x = (unsigned)cluster, at[k].val.clusterDim.y = 1, at[k++].val.clusterDim.z = 1;
    }
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = st;
    cfg.attrs = at, cfg.numAttrs = (unsigned)k;
    return cfg;
}
/* kernel<<<grid, block, smem, st>>>(args...) as cu_launch_config sets it; returns the launch error. */
template <typename... P, typename... A>
static inline cudaError_t cu_launch_ex(bool pdl, int cluster, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                                       cudaStream_t st, A &&...args) {
    cudaLaunchAttribute at[2];
    const cudaLaunchConfig_t cfg = cu_launch_config(at, pdl, cluster, grid, block, smem, st);
    return cudaLaunchKernelEx(&cfg, kernel, static_cast<A &&>(args)...);
}
/* The same without clusters. */
template <typename... P, typename... A>
static inline cudaError_t cu_launch_pdl(bool pdl, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                                        cudaStream_t st, A &&...args) {
    return cu_launch_ex(pdl, 1, kernel, grid, block, smem, st, static_cast<A &&>(args)...);
}

/* The decode ops' launches: programmatic where cu_pdl_on(). */
template <typename... P, typename... A>
static inline cudaError_t cu_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                                    A &&...args) {
    return cu_launch_pdl(cu_pdl_on(), kernel, grid, block, smem, st, static_cast<A &&>(args)...);
}

static inline unsigned cu_blocks(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

/* Butterfly sum over the warp: every lane gets the same value, in the same order on every call. */
/* A ticket of a split reduction: adds 1 to *t and returns its value before, with release (what the calling
 * thread's block wrote before a barrier is visible first, the PTX model's cumulativity) and acquire (what the
 * other takers wrote is visible after). The taker that sees count - 1 is the last and does the reduction. */
__device__ __forceinline__ unsigned cu_ticket_take(unsigned *t) {
    unsigned prev;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\n" : "=r"(prev) : "l"(t) : "memory");
    return prev;
}
/* The acquire half of a relaxed observation: after a relaxed load or an atom has seen another thread's released write
 * (a flag up, a ticket's count), this fence orders what follows after that thread's earlier writes (the PTX model's
 * acquire pattern). */
__device__ __forceinline__ void cu_fence_acquire(void) { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }
/* Orders this thread's generic-proxy accesses to its block's shared memory (stores by cp.async or st.shared, reads
 * by ld.shared) before the async proxy's later ones (wgmma's reads, a tensor copy's writes). sm_90. */
__device__ __forceinline__ void cu_fence_proxy_async(void) {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* The same ticket in two halves, for a taker that has more work before it needs the count: cu_ticket_arrive adds 1
 * with release only, so the thread goes on while the add is out (its value is waited for where it is used), and the
 * taker that saw count - 1 calls cu_fence_acquire before it acts on the others' work. */
__device__ __forceinline__ unsigned cu_ticket_arrive(unsigned *t) {
    unsigned prev;
    asm volatile("atom.release.gpu.global.add.u32 %0, [%1], 1;\n" : "=r"(prev) : "l"(t) : "memory");
    return prev;
}

/* Read-only loads through the non-coherent path with an L2 evict_first policy: for data a kernel reads once that
 * should not push out of L2 what others read again (the many-row matmuls' weights, GT_W_EVICT). */
__device__ __forceinline__ uint64_t cu_l2_evict_first(void) {
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
    return pol;
}
__device__ __forceinline__ uint4 cu_ld_evict_first(const uint4 *p) {
    uint4 r;
    asm("ld.global.nc.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;\n"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p), "l"(cu_l2_evict_first()));
    return r;
}
__device__ __forceinline__ uint32_t cu_ld_evict_first(const uint32_t *p) {
    uint32_t r;
    asm("ld.global.nc.L2::cache_hint.u32 %0, [%1], %2;\n" : "=r"(r) : "l"(p), "l"(cu_l2_evict_first()));
    return r;
}

/* Thread block clusters (sm_90): the barrier of every thread of the cluster after which what each block wrote to its
 * shared memory is visible to the others' reads (cu_cluster_sync), the barrier that only keeps every block's shared
 * memory until the others are done reading it (cu_cluster_sync_relaxed: their reads' values are used before they
 * arrive, so no ordering is needed), the block's rank in its cluster, the shared address of the same variable in
 * block `rank`'s shared memory, and a load from it (not volatile: loads of one finish go out together; the address
 * comes from cu_cluster_map, itself after the barrier). No-ops before sm_90, where no kernel is launched in clusters.
 * The release is a fence restricted to the block's shared memory before a relaxed arrive: arrive.release orders
 * every earlier access, global ones too, and cost gemv_dq_kernel's finish a GPU-wide MEMBAR and its drain (ERRBAR,
 * ~8 % of the 16-row gate + up launch's warp samples, ncu). */
__device__ __forceinline__ void cu_cluster_sync(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.release.sync_restrict::shared::cta.cluster;\nbarrier.cluster.arrive.relaxed.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cu_cluster_sync_relaxed(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ int cu_cluster_rank(void) {
    uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#endif
    return (int)r;
}
__device__ __forceinline__ uint32_t cu_cluster_map(uint32_t saddr, int rank) {
    uint32_t r = saddr;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(saddr), "r"(rank));
#else
    (void)rank;
#endif
    return r;
}
__device__ __forceinline__ float cu_cluster_ld(uint32_t caddr) {
    float v = 0.0f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(caddr)); /* after the barrier: its address is mapa's */
#else
    (void)caddr;
#endif
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The greedy choice's combine (argmax, head_argmax; draw's scores as doubles): (v, i) replaces the best (bv, bi) if i
 * is an index (>= 0) and v is larger, or equal at a lower index; bi < 0: none yet. The result does not depend on the
 * order of the takes. */
template <typename T> __device__ __forceinline__ void am_take(T &bv, int &bi, T v, int i) {
    if (i >= 0 && (bi < 0 || v > bv || (v == bv && i < bi))) {
        bv = v;
        bi = i;
    }
}

/* The warp's best (value, index) by am_take, in every lane. */
template <typename T> __device__ __forceinline__ void am_warp(T &bv, int &bi) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const T ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        am_take(bv, bi, ov, oi);
    }
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); all threads get the result.
 * smem: at least 33 floats. The order is fixed by the block size alone. */
__device__ __forceinline__ float block_sum(float v, float *smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* smem may still be read by a previous call */
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < n_warps ? smem[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) smem[32] = t;
    }
    __syncthreads();
    return smem[32];
}

__device__ __forceinline__ float load_as_f32(const void *p, int fmt, int64_t i) {
    if (fmt == QW_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (fmt == QW_F16) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

/* W[o][i] as f32, for every format. AFFINE: codes are a little-endian bit stream along the row (tiled: in
 * cuda_q4_tiled.cuh's order). */
__device__ __forceinline__ float weight_at(const qweight &W, int64_t o, int64_t i) {
    if (W.fmt != QW_AFFINE) return load_as_f32(W.w, W.fmt, o * W.n_in + i);
    uint32_t code;
    if (W.tiled) {
        code = (((const unsigned char *)W.w)[q4t_code_byte(o, i & ~1LL, W.n_in)] >> (4 * (i & 1))) & 15u;
    } else {
        const uint32_t *row = (const uint32_t *)W.w + o * (W.n_in * W.bits / 32);
        const int64_t bit = i * W.bits;
        const int64_t wd = bit >> 5;
        const int sh = (int)(bit & 31);
        uint64_t v = row[wd];
        if (sh + W.bits > 32) v |= (uint64_t)row[wd + 1] << 32;
        code = (uint32_t)(v >> sh) & ((1u << W.bits) - 1u);
    }
    const int64_t g = q4_sb_at(W.tiled, o, i / W.group, W.n_in / W.group);
    const float scale = load_as_f32(W.scales, W.sb_fmt, g), bias = load_as_f32(W.biases, W.sb_fmt, g);
    return __fadd_rn(__fmul_rn(scale, (float)code), bias); /* no FMA: the CPU twin rounds twice */
}

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
/* swiglu's element, silu(g) * u, the product rounded on its own (never contracted into what follows). */
__device__ __forceinline__ float swiglu_f(float g, float u) { return __fmul_rn(silu_f(g), u); }
/* The gate of a qglu (backend.h): silu or sigmoid. */
__device__ __forceinline__ float glu_act(float g, int act) { return act == QGLU_SILU ? silu_f(g) : sigmoid_f(g); }

/* Op entry points (one file each), wired into the ops table by cuda_backend.cu. */
qstatus cuda_embed(qbackend *be, const qweight *table, const int32_t *ids, int n, float *y);
qstatus cuda_matmul(qbackend *be, const float *x, int n, const qweight *W, float *y);
qstatus cuda_matmul_multi(qbackend *be, const float *x, int n, int count, const qweight *const *W, float *const *y);
qstatus cuda_group_weights(qbackend *be, int count, qweight *const *W);
qstatus cuda_matmul_prefill(qbackend *be, const float *x, int n, const qweight *W, float *y);
qstatus cuda_swiglu_matmul_prefill(qbackend *be, float *gate, const float *up, int n, const qweight *W, float *y);
qstatus cuda_matmul_prefill_multi(qbackend *be, const float *x, int n, int count, const qweight *const *W,
                                  float *const *y);
qstatus cuda_rmsnorm(qbackend *be, const float *x, int64_t x_stride, const float *w, int64_t n_vec,
                     int dim, float eps, float *y, int64_t y_stride);
qstatus cuda_gated_rmsnorm(qbackend *be, const float *x, const float *z, const float *w, int64_t n_vec,
                           int dim, float eps, float *y);
qstatus cuda_rope(qbackend *be, float *x, int n, int n_heads, int head_dim, int rot_dim,
                  const int32_t *pos, float theta);
qstatus cuda_qk_norm_rope(qbackend *be, const float *qx, int64_t qx_stride, const float *q_w, float *q, float *k,
                          const float *k_w, int n, int n_q, int n_kv, int dim, float eps, int rot_dim,
                          const int32_t *pos, float theta);
qstatus cuda_attention(qbackend *be, const float *q, const float *k, const float *v, const qseq *seqs,
                       int n_seqs, void *const *k_cache, void *const *v_cache, qwfmt kv_fmt, int n_q, int n_kv,
                       int dim, float scale, float *out);
qstatus cuda_attention_gated(qbackend *be, float *q, float *k, const float *v, const qseq *seqs, int n_seqs,
                             void *const *k_cache, void *const *v_cache, qwfmt kv_fmt, int n_q, int n_kv, int dim,
                             float scale, float *out, const qglu *gate, const qqk_prep *qk);
qstatus cuda_mul_sigmoid(qbackend *be, float *out, const float *gate, int64_t gate_stride, int64_t n_vec,
                         int dim);
qstatus cuda_conv1d_silu(qbackend *be, const float *x, const qseq *seqs, int n_seqs, float *const *state,
                         const float *w, int channels, int kernel, float *y);
qstatus cuda_conv1d_silu_gates(qbackend *be, const float *x, const qseq *seqs, int n_seqs, float *const *state,
                               const float *w, int channels, int kernel, float *y, const qgdn_gates *gates);
qstatus cuda_gdn_gates(qbackend *be, const float *a, const float *b, int64_t n, int heads,
                       const float *A_log, const float *dt_bias, float *g, float *beta);
qstatus cuda_gated_delta(qbackend *be, const float *qkv, const float *g, const float *beta,
                         const qseq *seqs, int n_seqs, float *const *S, qgdn_dims dims, float *out);
qstatus cuda_conv_gated_delta(qbackend *be, const float *x, const qseq *seqs, int n_seqs, float *const *conv_state,
                              const float *conv_w, int kernel, float *y, const qgdn_gates *gates, float *const *S,
                              qgdn_dims dims, float *out);
qstatus cuda_swiglu(qbackend *be, const float *gate, const float *up, int64_t n, float *y);
qstatus cuda_glu(qbackend *be, float *x, const qglu *glu, int64_t n_vec);
qstatus cuda_glu_matmul(qbackend *be, float *x, const qglu *glu, int n, const qweight *W, float *y);
qstatus cuda_resid_matmul(qbackend *be, float *xin, const qglu *glu, int n, const qweight *W, float *x, float *ss,
                          const float *next_w);
qstatus cuda_norm_matmul_multi(qbackend *be, const float *x, const qnorm *nm, int n, int count,
                               const qweight *const *W, float *const *y);
int cuda_norm_fusable(const qweight *W);
qstatus cuda_add(qbackend *be, float *x, const float *y, int64_t n);
int cuda_graphs_enabled(void); /* QUILL_CUDA_GRAPHS=1: the ops table gets the two below */
qstatus cuda_graph_begin(qbackend *be);
qstatus cuda_graph_end(qbackend *be, int ok);
qstatus cuda_add_rmsnorm(qbackend *be, float *x, const float *r, const float *w, int64_t n_vec, int dim, float eps,
                         float *y);
qstatus cuda_argmax(qbackend *be, const float *x, int n_rows, int n_cols, int32_t *out);
qstatus cuda_draw(qbackend *be, const float *x, int n_rows, int n_cols, const qdraw *d, int32_t *out);
qstatus cuda_head_sketch_make(qbackend *be, const qweight *W, void **sketch, int64_t *bytes);
void cuda_head_sketch_free(qbackend *be, void *sketch);
qstatus cuda_head_argmax(qbackend *be, const float *x, const qweight *W, const void *sketch, int32_t *out);
qstatus cuda_matmul_like(qbackend *be, const float *x, int n, const qweight *W, float *y, const qweight *like);

#endif
