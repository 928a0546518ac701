/* qwen35_state.c: a stream's state (the K/V caches of the attention layers, the conv window and recurrent
 * state of the GDN layers) in backend memory, and the byte counts inspect and the memory fit take from the
 * config. The forward pass that reads and advances it is qwen35.c. */
#include "qwen35.h"

#include <stdlib.h>

int qwen35_conv_dim(const qwen35_config *c) {
    return 2 * c->lin_n_k_heads * c->lin_k_dim + c->lin_n_v_heads * c->lin_v_dim;
}

/* One GDN layer's conv window ([kernel-1][conv_dim], f32) and recurrent state ([Hv][dk][dv], --gdn-state-type). */
static size_t conv_bytes(const qwen35_config *c) {
    return (size_t)(c->conv_kernel - 1) * (size_t)qwen35_conv_dim(c) * sizeof(float);
}
static size_t S_bytes(const qwen35_config *c) {
    return (size_t)c->lin_n_v_heads * c->lin_k_dim * c->lin_v_dim * (c->gdn_state_type == QSTATE_BF16 ? 2 : 4);
}

const char *qwen35_gdn_state_type_name(const qwen35_config *c) {
    return c->gdn_state_type == QSTATE_BF16 ? "bf16" : "f32";
}

qwfmt qwen35_kv_fmt(const qwen35_config *c) {
    return c->kv_type == QKV_Q8 ? QW_Q8 : c->kv_type == QKV_BF16 ? QW_BF16 : QW_F32;
}
const char *qwen35_kv_type_name(const qwen35_config *c) {
    return c->kv_type == QKV_Q8 ? "q8" : c->kv_type == QKV_BF16 ? "bf16" : "f32";
}

int64_t qwen35_kv_bytes_per_token(const qwen35_config *c) {
    int n_attn = 0;
    for (int l = 0; l < c->n_layers; l++) n_attn += c->layer_is_attn[l];
    return (int64_t)n_attn * 2 * qwen35_kv_row_bytes(c);
}

int64_t qwen35_gdn_state_bytes(const qwen35_config *c) {
    int n_gdn = 0;
    for (int l = 0; l < c->n_layers; l++) n_gdn += !c->layer_is_attn[l];
    return (int64_t)n_gdn * (int64_t)(conv_bytes(c) + S_bytes(c));
}

int64_t qwen35_kv_row_bytes(const qwen35_config *c) {
    return qkv_row_bytes(qwen35_kv_fmt(c), c->n_kv_heads, c->head_dim);
}

void qwen35_state_destroy(qwen35_model *m, qwen35_state *st) {
    if (!st) return;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        if (st->k_cache && !st->kv_borrowed) m->be->ops->free(m->be, st->k_cache[l]);
        if (st->v_cache && !st->kv_borrowed) m->be->ops->free(m->be, st->v_cache[l]);
        if (st->conv) m->be->ops->free(m->be, st->conv[l]);
        if (st->S) m->be->ops->free(m->be, st->S[l]);
    }
    free(st->k_cache);
    free(st->v_cache);
    free(st->conv);
    free(st->S);
    free(st);
}

/* The per-layer arrays are indexed by layer number; entries of the other layer kind stay NULL. With
 * with_kv 0 the K/V entries stay NULL too (qwen35_state_create_nokv). */
static qstatus state_create(qwen35_model *m, int n_ctx, int with_kv, qwen35_state **out) {
    const qwen35_config *c = &m->cfg;
    if (n_ctx <= 0) return q_fail(Q_EINVAL, "state: context must be positive, got %d", n_ctx);
    qwen35_state *st = calloc(1, sizeof *st);
    if (!st) return q_fail(Q_ENOMEM, "state: out of memory");
    st->n_ctx = n_ctx;
    st->n_kv_rows = with_kv ? n_ctx : 0;
    st->kv_borrowed = !with_kv;
    size_t L = (size_t)c->n_layers;
    st->k_cache = calloc(L, sizeof(void *));
    st->v_cache = calloc(L, sizeof(void *));
    st->conv = calloc(L, sizeof(float *));
    st->S = calloc(L, sizeof(float *));
    if (!st->k_cache || !st->v_cache || !st->conv || !st->S) {
        qwen35_state_destroy(m, st);
        return q_fail(Q_ENOMEM, "state: out of memory");
    }
    const size_t kv = (size_t)n_ctx * (size_t)qwen35_kv_row_bytes(c);
    if (with_kv && !kv) {
        qwen35_state_destroy(m, st);
        return q_fail(Q_EINVAL, "state: %s K/V caches cannot hold head_dim %d (q8 needs a multiple of 16)",
                      qwen35_kv_type_name(c), c->head_dim);
    }
    const size_t conv = conv_bytes(c), S = S_bytes(c);
    qbackend *be = m->be;
    for (int l = 0; l < c->n_layers; l++) {
        qstatus s = Q_OK;
        if (c->layer_is_attn[l]) {
            if (!with_kv) continue;
            s = be->ops->alloc(be, kv, &st->k_cache[l]);
            if (s == Q_OK) s = be->ops->alloc(be, kv, &st->v_cache[l]);
            st->n_bytes += 2 * (int64_t)kv;
        } else {
            s = be->ops->alloc(be, conv, (void **)&st->conv[l]);
            if (s == Q_OK) s = be->ops->alloc(be, S, (void **)&st->S[l]);
            st->n_bytes += (int64_t)(conv + S);
        }
        if (s != Q_OK) {
            qwen35_state_destroy(m, st);
            return q_wrap(s, "state for context %d", n_ctx);
        }
    }
    *out = st;
    return Q_OK;
}

qstatus qwen35_state_create(qwen35_model *m, int n_ctx, qwen35_state **out) {
    return state_create(m, n_ctx, 1, out);
}

qstatus qwen35_state_create_nokv(qwen35_model *m, int n_ctx, qwen35_state **out) {
    return state_create(m, n_ctx, 0, out);
}

/* K/V rows past n_past are never read, so only the recurrent states need zeroing. */
qstatus qwen35_state_reset(qwen35_model *m, qwen35_state *st) {
    const qwen35_config *c = &m->cfg;
    const size_t conv = conv_bytes(c), S = S_bytes(c);
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_is_attn[l]) continue;
        Q_TRY(m->be->ops->zero(m->be, st->conv[l], conv));
        Q_TRY(m->be->ops->zero(m->be, st->S[l], S));
    }
    st->n_past = 0;
    return Q_OK;
}
