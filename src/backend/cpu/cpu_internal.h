/* cpu_internal.h: what the CPU backend's files share: the backend state, per-thread scratch, the
 * fixed-order dot product and the scalar conversions. Not part of the public interface (backend.h).
 *
 * Invariants: (1) every op runs on the calling thread plus the pool's workers, one op at a time (the
 * pool is not reentrant); (2) scratch is grown only on the calling thread, before q_parallel_for;
 * (3) cpu_dot's reduction order depends only on n, never on the thread or the batch, so a row's
 * result is the same however the work is cut (cpu_dot4 has the very same arithmetic; cpu_axpy and
 * cpu_scale are elementwise). EXACT(batch): tests/unit/backend/test_cpu_ops.c, test_cpu_gdn.c. */
#ifndef QUILL_CPU_INTERNAL_H
#define QUILL_CPU_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../../util/threadpool.h"
#include "../backend.h"

typedef struct cpu_backend {
    q_pool *pool;      /* owned */
    int n_threads;
    float *scratch;    /* owned; [n_threads][scratch_stride] floats, 64-byte aligned */
    size_t scratch_stride;
    int64_t *index;    /* owned; host index arrays (seq prefix sums), [index_cap] */
    size_t index_cap;
    int simd;          /* CPU_SIMD_*: which of cpu_simd.c's forms the matmul takes (cpu_simd_level at create) */
} cpu_backend;

static inline cpu_backend *cpu_impl(qbackend *be) { return (cpu_backend *)be->impl; }

/* Makes sure each thread has at least `floats` floats of scratch. Call before q_parallel_for, on
 * the calling thread; pointers from cpu_scratch_at are valid until the next call. */
qstatus cpu_scratch_reserve(cpu_backend *cb, size_t floats);
static inline float *cpu_scratch_at(cpu_backend *cb, int thread_index) {
    return cb->scratch + (size_t)thread_index * cb->scratch_stride;
}
/* A host int64 array of at least n entries; valid until the next call. */
qstatus cpu_index_reserve(cpu_backend *cb, size_t n, int64_t **out);

/* EXACT(batch): 8 float lanes, element i goes to lane i % 8 (the tail's elements to lanes 0..),
 * lanes summed by one fixed tree. The lanes are named scalars, not an array, so that gcc -O2 keeps
 * them in vector registers (an array made it spill them every step). */
#define CPU_LANES(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define CPU_LANE_TREE(s) (((s##0 + s##4) + (s##1 + s##5)) + ((s##2 + s##6) + (s##3 + s##7)))
/* The same tree over 8 lanes in an array (the SIMD forms store their vector sums there). */
static inline float cpu_lane_tree(const float s[8]) {
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

static inline float cpu_dot(const float *a, const float *b, int64_t n) {
#define CPU_DECL_(l) float s##l = 0.0f;
#define CPU_STEP_(l) s##l += a[i + l] * b[i + l];
#define CPU_TAIL_(l) if (i + l < n) s##l += a[i + l] * b[i + l];
    CPU_LANES(CPU_DECL_)
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) { CPU_LANES(CPU_STEP_) }
    CPU_LANES(CPU_TAIL_)
#undef CPU_DECL_
#undef CPU_STEP_
#undef CPU_TAIL_
    return CPU_LANE_TREE(s);
}

/* EXACT(batch): four dots of one a against b0..b3, each with exactly cpu_dot's arithmetic (same
 * lanes, same tree), so out[k] == cpu_dot(a, bk, n) bit for bit; sharing the loads of a is all it
 * buys. */
static inline void cpu_dot4(const float *a, const float *b0, const float *b1, const float *b2,
                            const float *b3, int64_t n, float out[4]) {
#define CPU_DECL_(l) float p##l = 0.0f, q##l = 0.0f, r##l = 0.0f, t##l = 0.0f;
#define CPU_STEP_(l)                 \
    {                                \
        float x = a[i + l];          \
        p##l += x * b0[i + l];       \
        q##l += x * b1[i + l];       \
        r##l += x * b2[i + l];       \
        t##l += x * b3[i + l];       \
    }
#define CPU_TAIL_(l) \
    if (i + l < n) CPU_STEP_(l)
    CPU_LANES(CPU_DECL_)
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) { CPU_LANES(CPU_STEP_) }
    CPU_LANES(CPU_TAIL_)
#undef CPU_DECL_
#undef CPU_STEP_
#undef CPU_TAIL_
    out[0] = CPU_LANE_TREE(p);
    out[1] = CPU_LANE_TREE(q);
    out[2] = CPU_LANE_TREE(r);
    out[3] = CPU_LANE_TREE(t);
}

/* y[j] += s * x[j], j < n. Elementwise (no reduction), written in blocks of 8 so that gcc -O2
 * vectorizes it; y and x must not overlap. */
static inline void cpu_axpy(float *restrict y, float s, const float *restrict x, int64_t n) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) y[j + l] += s * x[j + l];
    for (; j < n; j++) y[j] += s * x[j];
}

/* y[j] *= s, j < n. */
static inline void cpu_scale(float *restrict y, float s, int64_t n) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) y[j + l] *= s;
    for (; j < n; j++) y[j] *= s;
}

static inline float cpu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float cpu_silu(float x) { return x / (1.0f + expf(-x)); }

static inline float cpu_bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint16_t cpu_load_u16(const void *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline float cpu_bf16_to_f32(uint16_t h) { return cpu_bits_to_f32((uint32_t)h << 16); }
/* f32 -> bf16, round to nearest even; a NaN becomes the canonical quiet NaN (as CUDA's
 * __float2bfloat16_rn), so both backends store the same bits. */
static inline uint16_t cpu_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
/* x[i] = bf16(x[i]) as f32: what storing to a bf16 state and loading it back gives. */
static inline void cpu_round_bf16(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = cpu_bf16_to_f32(cpu_f32_to_bf16(x[i]));
}
/* IEEE binary16 -> binary32, exact for every input (subnormals, inf, nan payloads). */
float cpu_f16_to_f32(uint16_t h);

/* Element i of an F32/F16/BF16 array (unaligned storage is fine). Inline: the affine rows call it
 * twice a group. */
static inline float cpu_load_elem(const void *base, qwfmt fmt, int64_t i) {
    const unsigned char *p = base;
    switch (fmt) {
    case QW_F32: {
        float f;
        memcpy(&f, p + i * 4, sizeof f);
        return f;
    }
    case QW_F16: return cpu_f16_to_f32(cpu_load_u16(p + i * 2));
    case QW_BF16: return cpu_bf16_to_f32(cpu_load_u16(p + i * 2));
    case QW_AFFINE:
    case QW_Q8: break;
    }
    return 0.0f; /* unreachable after cpu_weight_check */
}

/* Checks a weight's format, shape and pointers; names `what` in the message. */
qstatus cpu_weight_check(const qweight *W, const char *what);
/* dst[0..n_in) = row o of W, dequantized to f32. */
void cpu_weight_row(const qweight *W, int64_t o, float *dst);

/* cpu_simd.c: AVX2 forms with the scalar forms' bits (AVX-512: cpu_simd_pairs.c). cpu_simd_level: the
 * widest the CPU has, capped by QUILL_CPU_SIMD ("0": none, "avx2"). cpu_weight_row_simd returns 0,
 * writing nothing, for the layouts it does not take (it takes BF16 with n_in % 8 == 0 and 4- or 8-bit
 * AFFINE), and below CPU_SIMD_AVX2. */
enum { CPU_SIMD_NONE = 0, CPU_SIMD_AVX2 = 1, CPU_SIMD_AVX512 = 2 };
/* For code compiled once an instruction set from one always-inline body (the target may widen the
 * vectors; it adds no FMA, and C11 mode does not contract, so the bits stay the plain build's). */
#define CPU_FORCE_INLINE static inline __attribute__((always_inline))
#if defined(__x86_64__) && defined(__GNUC__)
#define CPU_TARGET_AVX2 __attribute__((target("avx2")))
/* name##_simd(int simd, params...): body(args) compiled plain and for AVX2, the AVX2 copy taken where
 * simd >= CPU_SIMD_AVX2. */
#define CPU_SIMD_VARIANTS(name, body, ARGS, ...)                                     \
    static void name##_plain(__VA_ARGS__) { body ARGS; }                             \
    static CPU_TARGET_AVX2 void name##_avx2(__VA_ARGS__) { body ARGS; }              \
    static void name##_simd(int simd, __VA_ARGS__) {                                 \
        if (simd >= CPU_SIMD_AVX2) name##_avx2 ARGS;                                 \
        else name##_plain ARGS;                                                      \
    }
#else
#define CPU_SIMD_VARIANTS(name, body, ARGS, ...)                                     \
    static void name##_simd(int simd, __VA_ARGS__) {                                 \
        (void)simd;                                                                  \
        body ARGS;                                                                   \
    }
#endif
int cpu_simd_level(void);
void cpu_dot4_avx2(const float *a, const float *b0, const float *b1, const float *b2, const float *b3,
                   int64_t n, float out[4]);
float cpu_dot_avx2(const float *a, const float *b, int64_t n);
int cpu_weight_row_simd(int level, const qweight *W, int64_t o, float *dst);
/* cpu_simd_pairs.c: with CPU_SIMD_AVX512, the matmul's weight rows [begin, end) for the n input rows
 * of x, where cpu_pairs_take(W); scratch: 8 * n_in floats. */
int cpu_pairs_take(const qweight *W);
void cpu_matmul_pairs(const qweight *W, const float *x, int n, float *y, int64_t begin, int64_t end,
                      float *scratch);

/* The ops (one file per concern). */
qstatus cpu_embed(qbackend *be, const qweight *table, const int32_t *ids, int n, float *y);
qstatus cpu_matmul(qbackend *be, const float *x, int n, const qweight *W, float *y);
qstatus cpu_rmsnorm(qbackend *be, const float *x, int64_t x_stride, const float *w, int64_t n_vec,
                    int dim, float eps, float *y, int64_t y_stride);
qstatus cpu_gated_rmsnorm(qbackend *be, const float *x, const float *z, const float *w, int64_t n_vec,
                          int dim, float eps, float *y);
qstatus cpu_rope(qbackend *be, float *x, int n, int n_heads, int head_dim, int rot_dim,
                 const int32_t *pos, float theta);
qstatus cpu_attention(qbackend *be, const float *q, const float *k, const float *v, const qseq *seqs,
                      int n_seqs, void *const *k_cache, void *const *v_cache, qwfmt kv_fmt, int n_q, int n_kv,
                      int dim, float scale, float *out);
qstatus cpu_mul_sigmoid(qbackend *be, float *out, const float *gate, int64_t gate_stride, int64_t n_vec,
                        int dim);
qstatus cpu_conv1d_silu(qbackend *be, const float *x, const qseq *seqs, int n_seqs, float *const *state,
                        const float *w, int channels, int kernel, float *y);
qstatus cpu_gdn_gates(qbackend *be, const float *a, const float *b, int64_t n, int heads,
                      const float *A_log, const float *dt_bias, float *g, float *beta);
qstatus cpu_gated_delta(qbackend *be, const float *qkv, const float *g, const float *beta,
                        const qseq *seqs, int n_seqs, float *const *S, qgdn_dims dims, float *out);
qstatus cpu_swiglu(qbackend *be, const float *gate, const float *up, int64_t n, float *y);
qstatus cpu_add(qbackend *be, float *x, const float *y, int64_t n);
qstatus cpu_add_rmsnorm(qbackend *be, float *x, const float *r, const float *w, int64_t n_vec, int dim,
                        float eps, float *y);
qstatus cpu_argmax(qbackend *be, const float *x, int n_rows, int n_cols, int32_t *out);
qstatus cpu_draw(qbackend *be, const float *x, int n_rows, int n_cols, const qdraw *d, int32_t *out);
/* cpu_vm.c: backend.h vm_* (mmap + mprotect + madvise). */
qstatus cpu_vm_reserve(qbackend *be, size_t bytes, void **base, size_t *granule);
qstatus cpu_vm_map(qbackend *be, void *base, size_t from, size_t to);
qstatus cpu_vm_unmap(qbackend *be, void *base, size_t from, size_t to);
void cpu_vm_release(qbackend *be, void *base, size_t bytes);

/* Gated delta rule helpers shared by cpu_gdn.c and cpu_gdn_chunked.c. */
#define CPU_GDN_CHUNK 64
typedef struct cpu_gdn_args {
    const float *qkv, *g, *beta; /* qkv [n][2*Hk*dk + Hv*dv]; g, beta [n][Hv] */
    qgdn_dims dims;
    float q_scale;               /* dk^-0.5 in f32 */
    float *out;                  /* [n][Hv][dv] */
} cpu_gdn_args;
/* dst[0..dk) = l2norm(q or k head hk of row r) * scale; which = 0 for q, 1 for k. */
void cpu_gdn_load_qk(const cpu_gdn_args *a, int64_t r, int hk, int which, float scale, float *dst);
/* Scratch floats one thread needs for the chunked rule. */
size_t cpu_gdn_chunked_scratch(qgdn_dims d);
/* Runs value head h of seq sq through the chunked rule, updating S_h [dk][dv] (f32; with dims.state_bf16 rounded
 * to bf16 after every chunk); simd (CPU_SIMD_*) picks the instruction set, not the bits. */
void cpu_gdn_chunked_head(int simd, const cpu_gdn_args *a, const qseq *sq, int h, float *S_h, float *scratch);

/* Checks a list of seqs (n_rows >= 0, pos0 >= 0, row0 >= 0) and fills prefix[s] = rows of seqs
 * before s (prefix[n_seqs] = total). `op` names the caller in messages. */
qstatus cpu_seqs_check(const qseq *seqs, int n_seqs, int64_t *prefix, const char *op);
/* The seq holding flattened row i (0 <= i < prefix[n_seqs]): binary search over prefix. */
int cpu_seq_of(const int64_t *prefix, int n_seqs, int64_t i);

#endif
