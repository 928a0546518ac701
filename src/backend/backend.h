/* backend.h: the op interface the model is written over. Two implementations: cpu/ (the reference,
 * what CI runs) and cuda/ (for speed). The model never touches memory directly: it allocates, uploads
 * and downloads through these entries and calls the ops with backend pointers.
 *
 * Conventions
 * - Activations are f32 on every backend for now; `float *` arguments point into backend memory.
 * - A weight matrix (qweight) is logically [n_out][n_in] (PyTorch Linear layout); matmul computes
 *   y[r][o] = sum_i x[r][i] * W[o][i].
 * - Small per-channel vectors (norm weights, conv kernels, A_log, dt_bias) are f32 in backend memory.
 * - Per-stream ops (attention, conv1d, gated delta rule) take a list of sequences (qseq): runs of
 *   consecutive batch rows belonging to one stream, with that stream's state pointers, one per run.
 *   Host arrays of backend pointers are passed; a backend copies them where its kernels need them.
 * - EXACT(batch): every op computes each row (and each run) with arithmetic, including reduction
 *   order, that does not depend on how many other rows or runs share the call.
 *   tests/unit/backend/test_cpu_ops.c and test_cpu_gdn.c check it on the CPU; tests/cuda/ on the GPU.
 */
#ifndef QUILL_BACKEND_H
#define QUILL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "../util/status.h"
#include "draw.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Storage format of a weight matrix or of its scales/biases; QW_Q8 is a K/V cache format only (qkv_row_bytes). */
typedef enum qwfmt { QW_F32, QW_F16, QW_BF16, QW_AFFINE, QW_Q8 } qwfmt;

/* A weight matrix in backend memory, logically [n_out][n_in].
 * F32/F16/BF16: w is [n_out][n_in] of that type.
 * AFFINE (MLX): w is [n_out][n_in*bits/32] uint32 words holding a little-endian bit stream of
 *   `bits`-wide codes along each row; scales and biases are [n_out][n_in/group] in sb_fmt
 *   (F32/F16/BF16); value = scale * code + bias. */
typedef struct qweight {
    qwfmt fmt;
    int64_t n_out, n_in;
    void *w;
    void *scales, *biases; /* AFFINE only */
    qwfmt sb_fmt;          /* AFFINE only */
    int bits, group;       /* AFFINE only */
    int tiled;             /* AFFINE, set by the backend's pack_weight: its bytes are in the backend's own order */
    int split;             /* set by the backend's group_weights: the K slices of its decode matmul (0: its own rule) */
} qweight;

/* A run of batch rows of one stream: rows [row0, row0 + n_rows), at positions pos0, pos0 + 1, ... */
typedef struct qseq {
    int row0, n_rows;
    int pos0;
    int chunked; /* gated delta rule: 1 = chunked rule (prefill), 0 = recurrent rule, row by row */
} qseq;

/* Shape of a Gated DeltaNet layer (HF names in comments). */
typedef struct qgdn_dims {
    int n_k_heads;  /* linear_num_key_heads, Hk */
    int n_v_heads;  /* linear_num_value_heads, Hv; a multiple of Hk; v head h uses k head h / (Hv/Hk) */
    int k_dim;      /* linear_key_head_dim, dk */
    int v_dim;      /* linear_value_head_dim, dv */
    /* 0: S holds f32 values. 1: S holds bf16 values (uint16_t, through the same pointers), computed in f32 and
     * rounded to bf16 wherever the state could be stored: after every token of the recurrent rule and after every
     * 64-aligned chunk of the chunked rule. So k rows in one pass equal k passes, and a prompt cut at multiples of
     * 64 gives the same bits (EXACT(draft), EXACT(chunk)), as with f32. (SGLang's --mamba-ssm-dtype bfloat16.) */
    int state_bf16;
    /* 1: the caller promises that the op just before this one on the backend wrote neither S nor the conv states
     * (they were last written two or more ops back, as in a model's step: the in projection, then the conv, then
     * the rule), so a GPU backend may read them before that op completes. 0 (default) for any order. */
    int states_settled;
    /* The gated norm (a qglu with norm_w, its g laid out as out) through which the next op on the backend reads
     * gated_delta's out, all n rows of it (glu_matmul or resid_matmul of x = out): a backend may then also leave that
     * input in a form the next op reads (the CUDA backend's dequant mode). NULL (default): no such use. */
    const struct qglu *out_norm;
} qgdn_dims;

typedef struct qbackend qbackend;

/* The gate of a matmul's input (glu_matmul): x is vectors of dim, and x[v][d] enters the product as
 * act(g[v * g_stride + d]) * x[v][d]. QGLU_SILU is the MLP's swiglu (x = up, g = gate, g_stride = dim);
 * QGLU_SIGMOID the attention's output gate (x = the heads' outputs, g = their gates in [query | gate]).
 * With norm_w (QGLU_SILU, g_stride == dim) each vector is RMS-normalised first: x[v][d] enters as
 * gated_rmsnorm's y = rmsnorm(x[v]) * norm_w[d] * silu(g[v][d]) with norm_eps (the GDN's output norm). */
typedef enum { QGLU_SILU = 1, QGLU_SIGMOID = 2 } qglu_act;
typedef struct qglu {
    const float *g;
    int64_t g_stride;
    int dim;
    qglu_act act;
    const float *norm_w; /* NULL: no norm */
    float norm_eps;
} qglu;

/* The attention's q and k head norms and RoPE as qk_norm_rope takes them (attention_gated's qk): q[r][h] =
 * rope(rmsnorm(qx + (r * n_q + h) * qx_stride) * q_w), k[r][h] = rope(rmsnorm(k[r][h]) * k_w) in place. */
typedef struct qqk_prep {
    const float *qx;
    int64_t qx_stride;
    const float *q_w, *k_w;
    float eps;
    int rot_dim;
    const int32_t *pos;
    float theta;
} qqk_prep;

/* A residual boundary between decode matmuls (resid_matmul, then norm_matmul_multi), so the RMSNorm between
 * them is never a pass of its own: the producer adds its product into the residual x and leaves the sums of
 * squares of x's new rows in parts of QNORM_PART outputs, ss[r][p] (p < ceil(dim / QNORM_PART)); the consumer
 * applies rmsnorm(x) * w as it reads x, with the scale rsqrt(sum_p ss[r][p] / dim + eps) (the parts added in
 * an order of the backend's, the same for every row and batch) and each value rounded as x * scale * w. */
#define QNORM_PART 128
typedef struct qnorm {
    const float *ss; /* [n][ceil(dim / QNORM_PART)] */
    const float *w;  /* [dim] */
    float eps;
    /* 1: x and ss are what the resid_matmul just before left, told this norm's w as next_w, and nothing wrote x
     * since; a backend may then read x in a form that call prepared (the CUDA backend's dequant mode). 0: any x. */
    int from_resid;
    /* 1 (norm_matmul_multi of two weights of one shape): y[0] and y[1] are the gate and up of a silu GLU whose
     * product the next matmul takes (glu_matmul or resid_matmul with the gate y[0] and x y[1]); a backend may then
     * also leave that product in a form the next matmul reads (the CUDA backend's dequant mode). 0: no such use. */
    int glu_pair;
} qnorm;

/* The GDN gates' operands (gdn_gates), for conv1d_silu_gates: a, b, g, beta [n][heads]. conv_settled: as
 * qgdn_dims.states_settled, for the conv states of conv1d_silu_gates (the op just before did not write them). */
typedef struct qgdn_gates {
    const float *a, *b, *A_log, *dt_bias;
    float *g, *beta;
    int64_t n;
    int heads;
    int conv_settled;
} qgdn_gates;

typedef struct qbackend_ops {
    const char *name;
    void (*destroy)(qbackend *be);

    /* memory: alloc returns zeroed memory; free takes NULL */
    qstatus (*alloc)(qbackend *be, size_t bytes, void **out);
    void (*free)(qbackend *be, void *p);
    qstatus (*upload)(qbackend *be, void *dst, const void *host_src, size_t bytes);
    qstatus (*download)(qbackend *be, void *host_dst, const void *src, size_t bytes);
    qstatus (*copy)(qbackend *be, void *dst, const void *src, size_t bytes);
    qstatus (*zero)(qbackend *be, void *dst, size_t bytes);
    qstatus (*sync)(qbackend *be);
    /* Optional (NULL: weights stay as loaded): lays an uploaded weight out as the backend's kernels read it and says so
     * in W->tiled; it may move the weight into larger buffers (rows padded), *grown the bytes added. The model calls it
     * once per weight after the upload. */
    qstatus (*pack_weight)(qbackend *be, qweight *W, size_t *grown);
    /* Optional (NULL: each weight planned alone): the count weights the model always multiplies by the same rows in
     * one call (matmul_multi, norm_matmul_multi), once, after they are packed; the backend may plan their decode
     * matmul as one launch and say so in each W[i]->split, which every later call of any row count then keeps. */
    qstatus (*group_weights)(qbackend *be, int count, qweight *const *W);

    /* y[r][:] = row ids[r] of table (dequantized). ids: backend int32 [n]. */
    qstatus (*embed)(qbackend *be, const qweight *table, const int32_t *ids, int n, float *y);

    /* Plain RMSNorm of n_vec vectors of `dim`: y = x * rsqrt(mean(x^2) + eps) * w.
     * Vector v starts at x + v*x_stride and y + v*y_stride. Zero-centred norms have (1+w) folded
     * into w at load. In place (x == y, same stride) is allowed. */
    qstatus (*rmsnorm)(qbackend *be, const float *x, int64_t x_stride, const float *w, int64_t n_vec,
                       int dim, float eps, float *y, int64_t y_stride);

    /* y[n][W->n_out] = x[n][W->n_in] . W^T, for decode rows (and draft blocks). */
    qstatus (*matmul)(qbackend *be, const float *x, int n, const qweight *W, float *y);

    /* Optional (NULL: call matmul per weight): y[i] = x . W[i]^T for count <= 4 weights that share the
     * decode rows x (a block's projections), in one pass over the GPU; each y[i] bitwise what
     * matmul(x, n, W[i], y[i]) gives. */
    qstatus (*matmul_multi)(qbackend *be, const float *x, int n, int count, const qweight *const *W,
                            float *const *y);

    /* The same product for prompt rows (QROW_PREFILL). A backend may use other arithmetic here than in
     * matmul (a tiled GEMM instead of a GEMV), as long as each row's result still does not depend on
     * n: the model picks between the two by the kind of row, never by the size of the batch, so
     * EXACT(batch) and EXACT(chunk) hold. */
    qstatus (*matmul_prefill)(qbackend *be, const float *x, int n, const qweight *W, float *y);

    /* Optional (NULL: call matmul_prefill per weight): matmul_prefill for count <= 4 weights that share the
     * prompt rows x, each y[i] bitwise what matmul_prefill(x, n, W[i], y[i]) gives. */
    qstatus (*matmul_prefill_multi)(qbackend *be, const float *x, int n, int count, const qweight *const *W,
                                    float *const *y);

    /* Optional (NULL: swiglu, mul_sigmoid or gated_rmsnorm, then matmul): y = (x gated by glu) . W^T for decode
     * rows, bitwise what those two give; x may be overwritten (with the gated values). */
    qstatus (*glu_matmul)(qbackend *be, float *x, const qglu *glu, int n, const qweight *W, float *y);

    /* Optional, all three or none (NULL: matmul or glu_matmul into a buffer, then add_rmsnorm): the residual
     * boundary of qnorm for decode rows. resid_matmul: x[r] += (xin[r], gated by glu when not NULL) . W^T and
     * ss as qnorm describes (xin may be overwritten); next_w (or NULL): the norm weight its consumer will apply.
     * norm_matmul_multi: y[i] = (rmsnorm(x) * nm->w) . W[i]^T for count <= 4 weights, the norm as qnorm describes.
     * norm_fusable: whether W can take either part (a property of the weight: the model fuses a boundary when its
     * producer and consumers all can). */
    qstatus (*resid_matmul)(qbackend *be, float *xin, const qglu *glu, int n, const qweight *W, float *x, float *ss,
                            const float *next_w);
    qstatus (*norm_matmul_multi)(qbackend *be, const float *x, const qnorm *nm, int n, int count,
                                 const qweight *const *W, float *const *y);
    int (*norm_fusable)(const qweight *W);

    /* Optional (NULL: swiglu, then matmul_prefill): y = swiglu(gate, up) . W^T for prompt rows (gate and up
     * n x W->n_in), bitwise what those two give; gate may be overwritten. */
    qstatus (*swiglu_matmul_prefill)(qbackend *be, float *gate, const float *up, int n, const qweight *W, float *y);

    /* NeoX (rotate-half) RoPE in place on the first rot_dim dims of each head: pairs (j, j + rot/2)
     * rotate by pos[r] * theta^(-2j/rot). x: [n][n_heads][head_dim]; pos: backend int32 [n]. */
    qstatus (*rope)(qbackend *be, float *x, int n, int n_heads, int head_dim, int rot_dim,
                    const int32_t *pos, float theta);

    /* Optional (NULL: rmsnorm of q, rmsnorm of k, rope of q, rope of k): the attention's head norms and RoPE
     * in one pass, bitwise what those four give. q[r][h] = rope(rmsnorm(qx + (r * n_q + h) * qx_stride) * q_w),
     * k[r][h] = rope(rmsnorm(k[r][h]) * k_w) in place; q, k: [n][heads][dim]. */
    qstatus (*qk_norm_rope)(qbackend *be, const float *qx, int64_t qx_stride, const float *q_w, float *q, float *k,
                            const float *k_w, int n, int n_q, int n_kv, int dim, float eps, int rot_dim,
                            const int32_t *pos, float theta);

    /* Causal GQA attention. For each seq s: writes k, v rows [row0, row0+n_rows) into the caches of
     * that stream at positions pos0.., then each row at position p attends to positions 0..p.
     * q, out: [n][n_q][dim]; k, v: [n][n_kv][dim]; k_cache[s], v_cache[s]: [ctx] rows of
     * qkv_row_bytes(kv_fmt, n_kv, dim): QW_F32, QW_BF16 (each value rounded to nearest even as it is
     * written, read back exactly: the result is the f32 cache's on the rounded rows) or QW_Q8 (8-bit
     * codes and a scale per head, qkv_encode_row; dim % 16 == 0). q head h reads kv head h / (n_q / n_kv). */
    qstatus (*attention)(qbackend *be, const float *q, const float *k, const float *v,
                         const qseq *seqs, int n_seqs, void *const *k_cache, void *const *v_cache,
                         qwfmt kv_fmt, int n_q, int n_kv, int dim, float scale, float *out);
    /* Optional (NULL: attention): attention whose out the next op on the backend reads through the gate `gate` (all n
     * rows of it: glu_matmul or resid_matmul of x = out); a backend may then also leave that input in a form the next
     * op reads (the CUDA backend's dequant mode). out is written as attention writes it. qk: NULL, or the head norms
     * and RoPE to apply first to the rows of every seq (q written from qk->qx, k in place), bitwise qk_norm_rope's; a
     * backend may do them with the K/V write (the CUDA backend: one launch where every row is a decode row). */
    qstatus (*attention_gated)(qbackend *be, float *q, float *k, const float *v, const qseq *seqs, int n_seqs,
                               void *const *k_cache, void *const *v_cache, qwfmt kv_fmt, int n_q, int n_kv, int dim,
                               float scale, float *out, const qglu *gate, const qqk_prep *qk);

    /* out[v][d] *= sigmoid(gate[v*gate_stride + d]) for n_vec vectors of dim. */
    qstatus (*mul_sigmoid)(qbackend *be, float *out, const float *gate, int64_t gate_stride,
                           int64_t n_vec, int dim);

    /* Depthwise causal conv1d + SiLU per seq: y[t][c] = silu(sum_j w[c][j] * x'[t-K+1+j][c]) where
     * x' is the seq's rows preceded by its state (the last K-1 input rows seen, oldest first);
     * the state is updated to the last K-1 inputs. x, y: [n][channels]; w: [channels][K];
     * state[s]: [K-1][channels]. */
    qstatus (*conv1d_silu)(qbackend *be, const float *x, const qseq *seqs, int n_seqs,
                           float *const *state, const float *w, int channels, int kernel, float *y);

    /* GDN gates: beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias). a, b, g, beta: [n][heads]. */
    qstatus (*gdn_gates)(qbackend *be, const float *a, const float *b, int64_t n, int heads,
                         const float *A_log, const float *dt_bias, float *g, float *beta);

    /* Optional (NULL: conv1d_silu, then gdn_gates): the two in one pass, bitwise what they give. */
    qstatus (*conv1d_silu_gates)(qbackend *be, const float *x, const qseq *seqs, int n_seqs, float *const *state,
                                 const float *w, int channels, int kernel, float *y, const qgdn_gates *gates);

    /* The gated delta rule per seq, state S[s]: [Hv][dk][dv] (S[h][i][j]), f32 or bf16 (dims.state_bf16).
     * qkv: [n][2*Hk*dk + Hv*dv] after conv+SiLU (q heads, then k heads, then v heads). The op
     * L2-normalises q and k per head (x * rsqrt(sum x^2 + 1e-6)) and scales q by dk^-0.5.
     * out: [n][Hv][dv]. seq.chunked picks the chunked rule (chunks of 64 aligned to absolute
     * positions, EXACT(chunk)) or the recurrent rule, token by token. */
    qstatus (*gated_delta)(qbackend *be, const float *qkv, const float *g, const float *beta,
                           const qseq *seqs, int n_seqs, float *const *S, qgdn_dims dims, float *out);

    /* Optional (NULL: conv1d_silu_gates or its two ops, then gated_delta): the three as one op, bitwise what they
     * give (out, the conv states, S). x: the conv's input [n][channels of dims]; y and gates->g, gates->beta are
     * scratch the op may leave unwritten. */
    qstatus (*conv_gated_delta)(qbackend *be, const float *x, const qseq *seqs, int n_seqs,
                                float *const *conv_state, const float *conv_w, int kernel, float *y,
                                const qgdn_gates *gates, float *const *S, qgdn_dims dims, float *out);

    /* The residual add fused with the next RMSNorm: x += r, then y = rmsnorm(x) * w, per vector of dim
     * (x, r, y: [n_vec][dim], contiguous, not overlapping). Bitwise what add then rmsnorm give; one pass. */
    qstatus (*add_rmsnorm)(qbackend *be, float *x, const float *r, const float *w, int64_t n_vec, int dim,
                           float eps, float *y);

    /* Gated RMSNorm per vector of dim: y = rmsnorm(x) * w * silu(z). x, z, y: [n_vec][dim]; w: [dim]. */
    qstatus (*gated_rmsnorm)(qbackend *be, const float *x, const float *z, const float *w,
                             int64_t n_vec, int dim, float eps, float *y);

    /* y = silu(gate) * up, elementwise over n. */
    qstatus (*swiglu)(qbackend *be, const float *gate, const float *up, int64_t n, float *y);

    /* x += y, elementwise over n. */
    qstatus (*add)(qbackend *be, float *x, const float *y, int64_t n);

    /* Greedy choice per row: out[r] = the first index of the largest of x[r][0..n_cols), the scan
     * sample_argmax (engine/sample.c) does: an element wins only if strictly greater than the best so
     * far, so NaNs never win and x[r][0] = NaN gives 0. x: [n_rows][n_cols]; out: backend int32. */
    qstatus (*argmax)(qbackend *be, const float *x, int n_rows, int n_cols, int32_t *out);
    /* Sampled choice per row: out[r] = draw_row(x[r], n_cols, &d[r]) (draw.h: top-k, min-p, top-p and the Gumbel-max
     * draw; a row at temperature <= 0 gets argmax's id), or -1 where the backend leaves that row to the host (CUDA: a
     * top-k above 1024, or a top-p set that does not close within the first 1024). d: host memory, n_rows entries;
     * x, out as argmax's. Optional (NULL: the forward refuses QROW_DRAW rows). */
    qstatus (*draw)(qbackend *be, const float *x, int n_rows, int n_cols, const qdraw *d, int32_t *out);
    /* Optional (NULL: none), for a large bf16 lm_head: a sketch of W (8-bit codes and bounds, backend memory) from
     * which head_argmax finds one row's greedy id reading about half of W's bytes. make leaves *sketch NULL where W
     * cannot take one (its format or shape, a value that is not finite); *bytes: what the sketch holds. head_argmax:
     * out[0] (backend int32) = the id argmax would give for x . W^T (one row x of W->n_in values), or -1 where the
     * sketch cannot decide it (then the caller runs the matmul and argmax). */
    qstatus (*head_sketch_make)(qbackend *be, const qweight *W, void **sketch, int64_t *bytes);
    void (*head_sketch_free)(qbackend *be, void *sketch);
    qstatus (*head_argmax)(qbackend *be, const float *x, const qweight *W, const void *sketch, int32_t *out);

    /* Optional (NULL where a backend has none): the ops issued between graph_begin and graph_end are
     * recorded instead of run, and graph_end runs the recording as one launch (CUDA graphs: a decode
     * step is hundreds of small kernels). graph_end with ok = 0 (an op failed) drops the recording. A
     * recording can fail (an op that must synchronise or allocate): graph_end then returns an error,
     * nothing has run, and the caller issues the same ops again without recording. Ops run with the
     * same arithmetic either way. graph_begin may refuse: run without. */
    qstatus (*graph_begin)(qbackend *be);
    qstatus (*graph_end)(qbackend *be, int ok);

    /* Grow-as-used memory (DESIGN.md "Grow-as-used K/V without copies"); engine/kvmem.c is the user.
     * A region is address space reserved once; physical memory is mapped into a prefix of it and
     * unmapped from its end, so the base address never moves and growth copies nothing. Sizes and
     * offsets are multiples of the granule vm_reserve reports. A backend without virtual memory leaves
     * these four NULL (the engine then refuses kv_grow > 0).
     * vm_reserve: reserves `bytes` (rounded up to the granule) of address space with nothing mapped;
     *   *base is the region, *granule the mapping unit (CPU: the page size; CUDA: the allocation
     *   granularity, 2 MiB on the H200).
     * vm_map: maps fresh memory at [base + from, base + to); contents are unspecified (never read
     *   before written: rows past a stream's n_past are not read). On failure nothing new is mapped.
     * vm_unmap: gives [base + from, base + to) back; its contents are lost. Waits for pending work.
     *   The range is exactly one earlier vm_map's range (CUDA cannot unmap part of a mapping).
     * vm_release: releases the reservation, whose every mapping was unmapped first; takes NULL. */
    qstatus (*vm_reserve)(qbackend *be, size_t bytes, void **base, size_t *granule);
    qstatus (*vm_map)(qbackend *be, void *base, size_t from, size_t to);
    qstatus (*vm_unmap)(qbackend *be, void *base, size_t from, size_t to);
    void (*vm_release)(qbackend *be, void *base, size_t bytes);
} qbackend_ops;

struct qbackend {
    const qbackend_ops *ops;
    void *impl; /* the backend's own state */
};

/* The CPU backend: threads over all cores (QUILL_THREADS). Owned; free with be->ops->destroy. */
qstatus cpu_backend_create(int n_threads, qbackend **out);

/* qwfmt_elem_bytes: bytes of one element (0 for QW_AFFINE, whose codes are sub-byte).
 * qweight_bytes: bytes the whole matrix holds: w, plus scales and biases for QW_AFFINE. */
size_t qwfmt_elem_bytes(qwfmt f);
int64_t qweight_bytes(const qweight *W);

/* K/V cache rows: one position of one attention layer's K (or V) cache, n_kv heads of dim values.
 * QW_F32 / QW_BF16: [n_kv][dim] elements. QW_Q8: [n_kv][dim] int8 codes, then the heads' n_kv f32 scales,
 * padded to 16 bytes; head h's value d is code[d] * scale[h] (one f32 product). A head is encoded from its
 * largest magnitude amax: scale = amax / 127, code = rint(x * (127 / amax)) (f32 operations, ties to even),
 * so |error| <= scale / 2; amax < 1e-30 gives scale 0 and codes 0; a head holding an inf or a NaN gives
 * scale NaN (its values read as NaN). Every backend encodes these bits, so caches are byte-identical.
 * qkv_row_bytes: 0 for a format that is not a K/V format (or a QW_Q8 dim that is not a multiple of 16). */
int64_t qkv_row_bytes(qwfmt fmt, int n_kv, int dim);
void qkv_encode_row(qwfmt fmt, const float *x, int n_kv, int dim, void *row);
/* Head h of an encoded row as dim f32 values. */
void qkv_decode_head(qwfmt fmt, const void *row, int n_kv, int dim, int h, float *out);
/* One head of dim values as QW_Q8 codes and scale (qkv_encode_row's rule). */
void qkv_q8_encode_head(const float *x, int dim, int8_t *codes, float *scale);

#ifdef __cplusplus
}
#endif

#endif
