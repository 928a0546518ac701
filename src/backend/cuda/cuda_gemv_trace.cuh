/* cuda_gemv_trace.cuh: a timeline of the one-row decode matmul's blocks, for finding where a decode step's time goes
 * between and inside its launches (docs/performance.md, fifty-fifth pass). Off unless built with GT_TRACE 1 (nvcc
 * -DGT_TRACE=1; tests/cuda/trace_step.sh builds it so): then thread 0 of every gt_block leaves one record of when the
 * block started, passed its wait, had x staged, left its unit loop and finished, and cuda_gemv.cu writes the records
 * to the file QUILL_CUDA_TRACE names when the backend goes. With GT_TRACE 0 the tracer is empty and compiles to
 * nothing. Times: %globaltimer (ns, one clock for the whole GPU) at the start and the end, the SM's clock64 cycles
 * from the start for the marks in between (the two give the SM clock's rate). The fused conv + rule's blocks
 * (cuda_gdn.cu) leave records in the same buffer, n_out 0 telling them apart. */
#ifndef QUILL_CUDA_GEMV_TRACE_CUH
#define QUILL_CUDA_GEMV_TRACE_CUH

#ifndef GT_TRACE
#define GT_TRACE 0
#endif

/* One block's record; tests/cuda/trace_step.py reads this layout (64 bytes, little-endian). */
struct gt_trace_rec {
    unsigned long long g0, g4; /* globaltimer at the block's start and after its finish */
    unsigned long long key;    /* the launch's first weight (job.W[0].w): which op this block belongs to */
    unsigned c[4];             /* cycles from the start: wait passed, x staged, unit loop left, finish done */
    unsigned smid, bid, grid;  /* the SM, the block and the launch's blocks */
    unsigned n_out, K, S;      /* the block's own weight's shape and split */
};
static_assert(sizeof(gt_trace_rec) == 64, "trace_step.py reads 64-byte records");
#define GT_TRACE_MAGIC 0x31525451u /* "QTR1" */

#if GT_TRACE
static __device__ gt_trace_rec *gt_trace_buf; /* NULL: not tracing (QUILL_CUDA_TRACE unset) */
static __device__ unsigned gt_trace_cap, gt_trace_n;

/* Where a kernel outside cuda_gemv.cu (the GDN rule) puts its records: the variables above are that translation
 * unit's own, so it hands their values over (cu_gemv_trace_sink; buf NULL: not tracing). */
struct gt_trace_sink {
    gt_trace_rec *buf;
    unsigned *n;
    unsigned cap;
};
gt_trace_sink cu_gemv_trace_sink(void);

/* The block's marks live in shared memory (thread 0 writes them), so tracing holds no registers across the kernel. */
struct gt_trace_marks {
    unsigned long long g0;
    long long c0;
    unsigned c[4];
};
struct gt_tracer {
    gt_trace_marks *m;
    __device__ __forceinline__ static unsigned long long now() {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        return t;
    }
    __device__ __forceinline__ void start() {
        if (threadIdx.x == 0) m->g0 = now(), m->c0 = clock64(), m->c[0] = m->c[1] = m->c[2] = m->c[3] = 0;
    }
    __device__ __forceinline__ void mark(int i) {
        if (threadIdx.x == 0) m->c[i] = (unsigned)(clock64() - m->c0);
    }
    __device__ __forceinline__ void write(const void *key, long long n_out, long long K, int S) {
        write_to(gt_trace_sink{gt_trace_buf, &gt_trace_n, gt_trace_cap}, key, n_out, K, S, blockIdx.x, gridDim.x);
    }
    __device__ __forceinline__ void write_to(const gt_trace_sink &to, const void *key, long long n_out, long long K,
                                             int S, unsigned bid, unsigned grid) {
        if (threadIdx.x != 0 || !to.buf) return;
        const unsigned long long g4 = now();
        const unsigned i = atomicAdd(to.n, 1u);
        if (i >= to.cap) return;
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        gt_trace_rec r;
        r.g0 = m->g0, r.g4 = g4, r.key = (unsigned long long)(uintptr_t)key;
        r.c[0] = m->c[0], r.c[1] = m->c[1], r.c[2] = m->c[2], r.c[3] = m->c[3];
        r.smid = sm, r.bid = bid, r.grid = grid;
        r.n_out = (unsigned)n_out, r.K = (unsigned)K, r.S = (unsigned)S;
        to.buf[i] = r;
    }
};
/* Declares a block's tracer (in a kernel or a function inlined into one). */
#define GT_TRACER(name)                                                                                            \
    __shared__ gt_trace_marks name##_marks;                                                                        \
    gt_tracer name { &name##_marks }
#else
struct gt_trace_sink {};
struct gt_tracer {
    __device__ __forceinline__ void start() {}
    __device__ __forceinline__ void mark(int) {}
    __device__ __forceinline__ void write(const void *, long long, long long, int) {}
    __device__ __forceinline__ void write_to(const gt_trace_sink &, const void *, long long, long long, int, unsigned,
                                             unsigned) {}
};
#define GT_TRACER(name) gt_tracer name
#endif

#endif
