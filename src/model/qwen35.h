/* qwen35.h: the Qwen3.5 text model: weights, per-stream state, and one forward for everything.
 * Math: ../shared/reference/qwen35-architecture.md (section numbers in qwen35.c).
 *
 * model_forward takes a batch of rows (stream, position, token, flags). The rows of one stream are
 * consecutive, at consecutive positions, and the first continues that stream's state (pos ==
 * state->n_past). A prefill chunk, a decode round over many streams and a draft-verify block are all
 * batches. Logits come back for rows flagged QROW_LOGITS, in row order. */
#ifndef QUILL_QWEN35_H
#define QUILL_QWEN35_H

#include <stdint.h>

#include "../backend/backend.h"
#include "../format/config.h"

typedef struct qwen35_attn_weights {
    qweight q_proj;  /* [n_heads*2*head_dim][hidden]: per head [query | gate] */
    qweight k_proj;  /* [n_kv*head_dim][hidden] */
    qweight v_proj;  /* [n_kv*head_dim][hidden] */
    qweight o_proj;  /* [hidden][n_heads*head_dim] */
    float *q_norm;   /* [head_dim], (1+w) folded */
    float *k_norm;   /* [head_dim], (1+w) folded */
} qwen35_attn_weights;

typedef struct qwen35_gdn_weights {
    qweight in_proj_qkv; /* [2*Hk*dk + Hv*dv][hidden] */
    qweight in_proj_z;   /* [Hv*dv][hidden] */
    qweight in_proj_b;   /* [Hv][hidden] */
    qweight in_proj_a;   /* [Hv][hidden] */
    qweight out_proj;    /* [hidden][Hv*dv] */
    float *conv_w;       /* [conv_dim][kernel] */
    float *dt_bias;      /* [Hv] */
    float *A_log;        /* [Hv] */
    float *norm_w;       /* [dv], applied as is (not zero-centred) */
} qwen35_gdn_weights;

typedef struct qwen35_layer {
    int is_attn;
    float *input_norm;   /* [hidden], (1+w) folded */
    float *post_norm;    /* [hidden], (1+w) folded */
    qwen35_attn_weights attn; /* is_attn */
    qwen35_gdn_weights gdn;   /* !is_attn */
    qweight gate_proj, up_proj; /* [intermediate][hidden] */
    qweight down_proj;          /* [hidden][intermediate] */
} qwen35_layer;

/* The projections of layer L's normed input, which the forward pass multiplies by the same rows in one call: q, k, v,
 * or the GDN's qkv, z, b, a (model/weights.c). Fills W and returns how many (3 or 4). */
int qwen35_layer_in_weights(const qwen35_layer *L, const qweight **W);

typedef struct qwen35_weights {
    qweight embed;       /* [vocab][hidden] */
    qweight lm_head;     /* [vocab][hidden]; same memory as embed when tied */
    int lm_head_tied;
    float *final_norm;   /* [hidden], (1+w) folded */
    qwen35_layer *layers; /* [n_layers] */
    int64_t n_bytes;     /* backend bytes held by the weights (and the head's sketch) */
    void *head_sketch;   /* the backend's sketch of lm_head for one row's greedy id (head_sketch_make), or NULL */
} qwen35_weights;

/* Loads the weights of the checkpoint in `dir` into backend memory (model/weights.c). Names: HF
 * (model.language_model.*, lm_head.*), flat (model.*), MLX (language_model.model.*,
 * language_model.lm_head.*); model.visual.*, vision_tower.*, mtp.* are skipped. Norm storage (w or
 * 1+w) is detected from the mean of the layer norms. A missing tensor, a wrong shape or dtype gets an
 * error naming the file and tensor. On failure nothing is left allocated. */
qstatus qwen35_weights_load(qbackend *be, const char *dir, const qwen35_config *cfg, qwen35_weights *w);
void qwen35_weights_free(qbackend *be, const qwen35_config *cfg, qwen35_weights *w);

/* Whether a checkpoint stores its zero-centred norms as 1+w (MLX, converted) rather than w (HF): the
 * mean of every input_layernorm weight outside mtp.* is above 0.5 (reference 2.2). dir names the
 * checkpoint in messages. Used by the loader and by `quill quantize`. */
struct st_set;
qstatus qwen35_norms_plus_one(const struct st_set *set, const char *dir, int *out);

typedef struct qwen35_model {
    qwen35_config cfg;
    qwen35_weights w;
    qbackend *be;        /* borrowed */
    struct qwen35_scratch *scratch; /* activation buffers, grown to the largest batch */
} qwen35_model;

/* Opens dir (config.json + safetensors) on backend be. Owned; free with qwen35_close. */
qstatus qwen35_open(const char *dir, qbackend *be, qwen35_model **out);
void qwen35_close(qwen35_model *m);

/* A stream's state: K/V for each attention layer, conv + recurrent state for each GDN layer. */
typedef struct qwen35_state {
    int n_ctx;          /* K/V capacity in positions */
    int n_past;         /* positions already consumed */
    int n_kv_rows;      /* K/V rows usable now: positions must be < n_kv_rows (n_ctx unless the
                           engine grows K/V as used, engine/kvmem.c) */
    int kv_borrowed;    /* k_cache/v_cache entries point into memory the caller owns */
    /* indexed by layer number; entries of the other layer kind are NULL */
    void **k_cache, **v_cache;  /* attention layers: [n_ctx][n_kv][head_dim] of qwen35_kv_fmt */
    float **conv;       /* GDN layers: [kernel-1][conv_dim] */
    float **S;          /* GDN layers: [Hv][dk][dv] fp32 */
    int64_t n_bytes;
} qwen35_state;

qstatus qwen35_state_create(qwen35_model *m, int n_ctx, qwen35_state **out);
/* The same without K/V memory: k_cache/v_cache entries stay NULL and n_kv_rows 0 until the caller
 * points them at memory it owns (engine/kvmem.c: grow-as-used regions) and sets n_kv_rows; destroy
 * leaves them alone. n_bytes counts the GDN states only. */
qstatus qwen35_state_create_nokv(qwen35_model *m, int n_ctx, qwen35_state **out);
/* Zeroes the state (a new sequence starts). */
qstatus qwen35_state_reset(qwen35_model *m, qwen35_state *st);
void qwen35_state_destroy(qwen35_model *m, qwen35_state *st);

#define QROW_LOGITS 1u  /* return logits for this row */
#define QROW_PREFILL 2u /* part of a prompt: the GDN chunked rule may run over it */
#define QROW_ARGMAX 4u  /* return only this row's greedy token id (the logits stay on the backend) */
#define QROW_DRAW 8u    /* return only this row's drawn token id (backend/draw.h's rule with its `draw`) */

typedef struct qrow {
    int32_t stream; /* index into the states array */
    int32_t pos;
    int32_t token;
    uint32_t flags;
    qdraw draw;     /* QROW_DRAW: the draw's parameters (engine/sample.c's sample_draw) */
} qrow;

/* Runs the rows through the model. states[rows[i].stream] is that row's stream. logits: host
 * [n_logit_rows][vocab] (may be NULL if no row asks). On error, no state has advanced past its
 * last completed forward only if the error came from validation; a backend failure leaves the
 * streams of this batch undefined (the caller resets them). */
qstatus qwen35_forward(qwen35_model *m, const qrow *rows, int n_rows, qwen35_state *const *states,
                       float *logits);
/* The same, where rows flagged QROW_ARGMAX get their greedy id (the first largest logit, as
 * sample_argmax) and rows flagged QROW_DRAW their drawn id (draw.h) in argmax[n_id_rows], in row order,
 * computed on the backend: such a stream downloads 4 bytes instead of a vocabulary of logits. A row asks
 * for one of the three at most. */
qstatus qwen35_forward_ex(qwen35_model *m, const qrow *rows, int n_rows, qwen35_state *const *states,
                          float *logits, int32_t *argmax);

/* The K/V caches' format from cfg->kv_type (--kv-type): QW_F32, QW_BF16 or QW_Q8; and its --kv-type name
 * ("f32", "bf16", "q8"). */
qwfmt qwen35_kv_fmt(const qwen35_config *cfg);
const char *qwen35_kv_type_name(const qwen35_config *cfg);
/* Channels of the GDN conv: q, k and v of every head, 2 * Hk * dk + Hv * dv. */
int qwen35_conv_dim(const qwen35_config *cfg);
/* Byte counts for inspect and the memory fit. */
int64_t qwen35_kv_bytes_per_token(const qwen35_config *cfg);
int64_t qwen35_gdn_state_bytes(const qwen35_config *cfg);
/* What a backend's sketch of a bf16 lm_head of V x K holds where the model asks for one (qwen35_open: CUDA), else 0. */
int64_t qwen35_head_sketch_bytes(int64_t V, int64_t K);
/* What one greedy row reads from that sketch instead of the head's V x K bf16 values. */
int64_t qwen35_head_sketch_read_bytes(int64_t V, int64_t K);
/* The GDN recurrent states' element type, as --gdn-state-type names it ("f32", "bf16"). */
const char *qwen35_gdn_state_type_name(const qwen35_config *cfg);
/* Bytes of one position of one attention layer's K (or V) cache (backend.h qkv_row_bytes; 0 where the format
 * cannot hold the head dim). */
int64_t qwen35_kv_row_bytes(const qwen35_config *cfg);
/* Backend bytes of the activation scratch for a batch of up to n_rows rows (forward rounds it up to
 * a power of two, at least 16, before allocating). */
int64_t qwen35_scratch_bytes(const qwen35_config *cfg, int n_rows);

#endif
