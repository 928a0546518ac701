/* weights.c: a Qwen3.5 checkpoint's text weights -> backend memory (qwen35_weights).
 *
 * Each Linear is either MLX affine ("<path>.scales" exists: weight U32 [out][in*bits/32], scales and
 * biases [out][in/group] in F32/F16/BF16, bits/group from config.json "quantization", cross-checked
 * against the shapes) or dense F32/F16/BF16 [out][in]; its bytes are uploaded unchanged
 * (be->ops->alloc + upload; mmap pointers may be misaligned and are only ever copied from), then an
 * affine one goes to the backend's pack_weight, if it has one, to be laid out its own way (CUDA: 4-bit
 * weights in tiles of 16 rows, cuda_q4_tiled.cuh). Small
 * vectors (norms, conv1d, dt_bias, A_log, linear_attn.norm) are converted to f32 on the host first;
 * zero-centred norms are uploaded as 1+w whatever the checkpoint stores (weights_names.c decides).
 * conv1d.weight is [C,1,K] (HF) or [C,K,1] (MLX): both are c*K + j in memory, uploaded as [C][K].
 *
 * Invariants: every shape is checked against the config before upload (reference 1.4); w->n_bytes is
 * the sum of the backend allocations held; with tied embeddings lm_head aliases embed's memory and
 * is never freed on its own (lm_head_tied). On failure everything allocated so far is freed.
 * Not here: naming conventions and norm storage detection (weights_names.c), math (qwen35.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../util/log.h"
#include "weights_internal.h"

#define NAME_CAP 256

/* alloc + upload of n host bytes; *out is owned by the backend and counted in n_bytes. */
static qstatus upload_new(wload *c, const void *src, size_t n, const char *what, void **out) {
    void *p = NULL;
    qstatus st = c->be->ops->alloc(c->be, n, &p);
    if (st) return q_wrap(st, "%s: allocating %zu bytes for %s", c->dir, n, what);
    st = c->be->ops->upload(c->be, p, src, n);
    if (st) {
        c->be->ops->free(c->be, p);
        return q_wrap(st, "%s: uploading %s", c->dir, what);
    }
    c->w->n_bytes += (int64_t)n;
    *out = p;
    return Q_OK;
}

static int is_float_dtype(st_dtype d) { return d == ST_F32 || d == ST_F16 || d == ST_BF16; }
static qwfmt float_fmt(st_dtype d) { return d == ST_F32 ? QW_F32 : d == ST_F16 ? QW_F16 : QW_BF16; }

static qstatus check_2d(const st_tensor *t, int64_t rows, int64_t cols, const char *why) {
    if (t->n_dims == 2 && t->shape[0] == rows && t->shape[1] == cols) return Q_OK;
    char got[ST_MAX_DIMS * 24 + 8] = "[";
    for (int i = 0; i < t->n_dims; i++) {
        size_t n = strlen(got);
        snprintf(got + n, sizeof got - n, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    }
    size_t n = strlen(got);
    snprintf(got + n, sizeof got - n, "]");
    return q_fail(Q_EFORMAT, "%s: tensor %s: shape %s, expected [%lld, %lld]%s by config.json", t->file, t->name,
                  got, (long long)rows, (long long)cols, why);
}

/* bits and group of an affine Linear at `module` [n_out][n_in], from config.json, cross-checked
 * with the shapes of its weight w and scales s. */
static qstatus affine_params(wload *c, const char *module, const st_tensor *w, const st_tensor *s, int64_t n_in,
                             int *bits, int *group) {
    const qquant_config *q = &c->cfg->quant;
    /* What the shapes imply (0 when they imply nothing consistent). */
    int wb = w->n_dims == 2 && (w->shape[1] * 32) % n_in == 0 ? (int)(w->shape[1] * 32 / n_in) : 0;
    int sg = s->n_dims == 2 && s->shape[1] > 0 && n_in % s->shape[1] == 0 ? (int)(n_in / s->shape[1]) : 0;
    if (q->enabled) {
        if (!qquant_lookup(q, module, bits, group))
            return q_fail(Q_EFORMAT, "%s: tensor %s.scales exists but config.json quantization marks %s as not "
                          "quantized", s->file, module, module);
        if (wb && wb != *bits)
            return q_fail(Q_EFORMAT, "%s: tensor %s: shape implies %d-bit codes but config.json quantization says "
                          "%d bits for %s", w->file, w->name, wb, *bits, module);
        if (sg && sg != *group)
            return q_fail(Q_EFORMAT, "%s: tensor %s: shape implies group size %d but config.json quantization says "
                          "%d for %s", s->file, s->name, sg, *group, module);
    } else {
        /* No quantization block: take what the shapes say if it is a valid MLX layout. */
        *bits = wb;
        *group = sg;
        if (!qquant_valid(wb, sg))
            return q_fail(Q_EFORMAT, "%s: tensor %s: quantized (has .scales) but config.json has no quantization "
                          "block and the shapes imply bits %d / group %d", w->file, w->name, wb, sg);
    }
    if (((int64_t)*bits * n_in) % 32 != 0 || n_in % *group != 0)
        return q_fail(Q_EFORMAT, "%s: tensor %s: in-features %lld do not split into %d-bit words and groups of %d",
                      w->file, w->name, (long long)n_in, *bits, *group);
    return Q_OK;
}

/* A Linear `module` (no ".weight") of logical shape [n_out][n_in], dense or MLX affine. */
static qstatus load_linear(wload *c, const char *module, int64_t n_out, int64_t n_in, qweight *W) {
    char wn[NAME_CAP], sn[NAME_CAP], bn[NAME_CAP];
    if (snprintf(wn, sizeof wn, "%s.weight", module) >= (int)sizeof wn ||
        snprintf(sn, sizeof sn, "%s.scales", module) >= (int)sizeof sn ||
        snprintf(bn, sizeof bn, "%s.biases", module) >= (int)sizeof bn)
        return q_fail(Q_EINVAL, "%s: tensor name too long: %s", c->dir, module);
    const st_tensor *w, *s = st_find(c->st, sn), *b;
    Q_TRY(weights_need(c, wn, &w));
    memset(W, 0, sizeof *W);
    W->n_out = n_out;
    W->n_in = n_in;
    if (!s) {
        if (!is_float_dtype(w->dtype))
            return q_fail(Q_EFORMAT, "%s: tensor %s: dtype %s, expected F32, F16 or BF16 (or U32 with .scales)",
                          w->file, wn, st_dtype_name(w->dtype));
        Q_TRY(check_2d(w, n_out, n_in, ""));
        W->fmt = float_fmt(w->dtype);
        return upload_new(c, w->data, w->n_bytes, wn, &W->w);
    }
    Q_TRY(weights_need(c, bn, &b));
    if (w->dtype != ST_U32)
        return q_fail(Q_EFORMAT, "%s: tensor %s: dtype %s, expected U32 codes (it has .scales)", w->file, wn,
                      st_dtype_name(w->dtype));
    if (!is_float_dtype(s->dtype) || b->dtype != s->dtype)
        return q_fail(Q_EFORMAT, "%s: tensors %s / %s: dtypes %s / %s, expected one of F32, F16, BF16 for both",
                      s->file, sn, bn, st_dtype_name(s->dtype), st_dtype_name(b->dtype));
    int bits, group;
    Q_TRY(affine_params(c, module, w, s, n_in, &bits, &group));
    char why[64];
    snprintf(why, sizeof why, " (%d-bit, group %d)", bits, group);
    Q_TRY(check_2d(w, n_out, n_in * bits / 32, why));
    Q_TRY(check_2d(s, n_out, n_in / group, why));
    Q_TRY(check_2d(b, n_out, n_in / group, why));
    W->fmt = QW_AFFINE;
    W->sb_fmt = float_fmt(s->dtype);
    W->bits = bits;
    W->group = group;
    Q_TRY(upload_new(c, w->data, w->n_bytes, wn, &W->w));
    Q_TRY(upload_new(c, s->data, s->n_bytes, sn, &W->scales));
    Q_TRY(upload_new(c, b->data, b->n_bytes, bn, &W->biases));
    if (!c->be->ops->pack_weight) return Q_OK;
    size_t grown = 0;
    const qstatus st = c->be->ops->pack_weight(c->be, W, &grown);
    c->w->n_bytes += (int64_t)grown;
    return st == Q_OK ? Q_OK : q_wrap(st, "%s: laying out %s", c->dir, wn);
}

/* Converts t (numel n) to f32 on the host, optionally as 1+w, and uploads it. */
static qstatus upload_f32(wload *c, const st_tensor *t, int64_t n, int add_one, float **out) {
    float *h = malloc((size_t)n * sizeof *h);
    if (!h) return q_fail(Q_ENOMEM, "%s: out of memory for %s", c->dir, t->name);
    qstatus st = st_read_f32(t, h, n);
    for (int64_t i = 0; i < n && !st && add_one; i++) h[i] += 1.0f;
    void *p = NULL;
    if (!st) st = upload_new(c, h, (size_t)n * sizeof *h, t->name, &p);
    free(h);
    if (!st) *out = p;
    return st;
}

/* Vector `name` [n] -> f32. zero_centred: stored as 1+w in backend memory whatever the checkpoint has. */
static qstatus load_vec(wload *c, const char *name, int64_t n, int zero_centred, float **out) {
    const st_tensor *t;
    Q_TRY(weights_need(c, name, &t));
    if (t->n_dims != 1 || t->shape[0] != n)
        return q_fail(Q_EFORMAT, "%s: tensor %s: %d dims of first size %lld, expected [%lld] by config.json", t->file,
                      name, t->n_dims, (long long)(t->n_dims ? t->shape[0] : 0), (long long)n);
    return upload_f32(c, t, n, zero_centred && !c->norms_plus_one, out);
}

/* conv1d.weight: [C,1,K] (HF) or [C,K,1] (MLX) or [C,K]; all are [C][K] in memory. */
static qstatus load_conv(wload *c, const char *name, int64_t C, int64_t K, float **out) {
    const st_tensor *t;
    Q_TRY(weights_need(c, name, &t));
    int ok = (t->n_dims == 3 && t->shape[0] == C &&
              ((t->shape[1] == 1 && t->shape[2] == K) || (t->shape[1] == K && t->shape[2] == 1))) ||
             (t->n_dims == 2 && t->shape[0] == C && t->shape[1] == K);
    if (!ok)
        return q_fail(Q_EFORMAT,
                      "%s: tensor %s: unexpected shape, expected [%lld, 1, %lld] or [%lld, %lld, 1] by config.json",
                      t->file, name, (long long)C, (long long)K, (long long)C, (long long)K);
    return upload_f32(c, t, C * K, 0, out);
}

/* Helpers that build "<pfx>layers.<l>.<suffix>" first. */
static qstatus layer_linear(wload *c, int l, const char *suffix, int64_t n_out, int64_t n_in, qweight *W) {
    char m[NAME_CAP];
    Q_TRY(weights_name(c, m, sizeof m, l, suffix));
    return load_linear(c, m, n_out, n_in, W);
}

static qstatus layer_vec(wload *c, int l, const char *suffix, int64_t n, int zero_centred, float **out) {
    char m[NAME_CAP];
    Q_TRY(weights_name(c, m, sizeof m, l, suffix));
    return load_vec(c, m, n, zero_centred, out);
}

static qstatus load_attn(wload *c, int l, qwen35_attn_weights *a) {
    const qwen35_config *g = c->cfg;
    int64_t H = g->hidden, D = g->head_dim, nq = g->n_heads, nkv = g->n_kv_heads;
    Q_TRY(layer_linear(c, l, "self_attn.q_proj", nq * 2 * D, H, &a->q_proj)); /* per head [query | gate] */
    Q_TRY(layer_linear(c, l, "self_attn.k_proj", nkv * D, H, &a->k_proj));
    Q_TRY(layer_linear(c, l, "self_attn.v_proj", nkv * D, H, &a->v_proj));
    Q_TRY(layer_linear(c, l, "self_attn.o_proj", H, nq * D, &a->o_proj));
    Q_TRY(layer_vec(c, l, "self_attn.q_norm.weight", D, 1, &a->q_norm));
    return layer_vec(c, l, "self_attn.k_norm.weight", D, 1, &a->k_norm);
}

static qstatus load_gdn(wload *c, int l, qwen35_gdn_weights *d) {
    const qwen35_config *g = c->cfg;
    int64_t H = g->hidden, Hk = g->lin_n_k_heads, Hv = g->lin_n_v_heads, dk = g->lin_k_dim, dv = g->lin_v_dim;
    int64_t conv_dim = 2 * Hk * dk + Hv * dv;
    Q_TRY(layer_linear(c, l, "linear_attn.in_proj_qkv", conv_dim, H, &d->in_proj_qkv));
    Q_TRY(layer_linear(c, l, "linear_attn.in_proj_z", Hv * dv, H, &d->in_proj_z));
    Q_TRY(layer_linear(c, l, "linear_attn.in_proj_b", Hv, H, &d->in_proj_b));
    Q_TRY(layer_linear(c, l, "linear_attn.in_proj_a", Hv, H, &d->in_proj_a));
    Q_TRY(layer_linear(c, l, "linear_attn.out_proj", H, Hv * dv, &d->out_proj));
    char m[NAME_CAP];
    Q_TRY(weights_name(c, m, sizeof m, l, "linear_attn.conv1d.weight"));
    Q_TRY(load_conv(c, m, conv_dim, g->conv_kernel, &d->conv_w));
    Q_TRY(layer_vec(c, l, "linear_attn.dt_bias", Hv, 0, &d->dt_bias));
    Q_TRY(layer_vec(c, l, "linear_attn.A_log", Hv, 0, &d->A_log));
    return layer_vec(c, l, "linear_attn.norm.weight", dv, 0, &d->norm_w); /* gated norm: raw, never 1+w */
}

int qwen35_layer_in_weights(const qwen35_layer *L, const qweight **W) {
    if (L->is_attn) {
        W[0] = &L->attn.q_proj, W[1] = &L->attn.k_proj, W[2] = &L->attn.v_proj;
        return 3;
    }
    W[0] = &L->gdn.in_proj_qkv, W[1] = &L->gdn.in_proj_z, W[2] = &L->gdn.in_proj_b, W[3] = &L->gdn.in_proj_a;
    return 4;
}

/* The layer's weights that qwen35.c multiplies by the same rows in one call, told to the backend (group_weights): the
 * projections of the normed input (qwen35_layer_in_weights) and the MLP's gate and up (norm_mm's GLU pair). */
static qstatus group_layer(wload *c, qwen35_layer *L) {
    qstatus (*group)(qbackend *, int, qweight *const *) = c->be->ops->group_weights;
    if (!group) return Q_OK;
    const qweight *in[4];
    qweight *W[4];
    const int n = qwen35_layer_in_weights(L, in);
    for (int i = 0; i < n; i++) W[i] = (qweight *)in[i]; /* L's own weights, which the load writes */
    qweight *const mlp[] = {&L->gate_proj, &L->up_proj};
    Q_TRY(group(c->be, n, W));
    return group(c->be, 2, mlp);
}

static qstatus load_layer(wload *c, int l, qwen35_layer *L) {
    const qwen35_config *g = c->cfg;
    L->is_attn = g->layer_is_attn[l];
    Q_TRY(layer_vec(c, l, "input_layernorm.weight", g->hidden, 1, &L->input_norm));
    Q_TRY(layer_vec(c, l, "post_attention_layernorm.weight", g->hidden, 1, &L->post_norm));
    Q_TRY(L->is_attn ? load_attn(c, l, &L->attn) : load_gdn(c, l, &L->gdn));
    Q_TRY(layer_linear(c, l, "mlp.gate_proj", g->intermediate, g->hidden, &L->gate_proj));
    Q_TRY(layer_linear(c, l, "mlp.up_proj", g->intermediate, g->hidden, &L->up_proj));
    Q_TRY(layer_linear(c, l, "mlp.down_proj", g->hidden, g->intermediate, &L->down_proj));
    return group_layer(c, L);
}

static qstatus load_all(wload *c) {
    const qwen35_config *g = c->cfg;
    qwen35_weights *w = c->w;
    Q_TRY(weights_detect_layout(c));
    char m[NAME_CAP];
    Q_TRY(weights_name(c, m, sizeof m, -1, "embed_tokens"));
    Q_TRY(load_linear(c, m, g->vocab_size, g->hidden, &w->embed));
    if (g->tie_embeddings) {
        w->lm_head = w->embed; /* same backend memory; freed once, through embed */
        w->lm_head_tied = 1;
    } else {
        Q_TRY(load_linear(c, c->head_pfx, g->vocab_size, g->hidden, &w->lm_head));
    }
    Q_TRY(weights_name(c, m, sizeof m, -1, "norm.weight"));
    Q_TRY(load_vec(c, m, g->hidden, 1, &w->final_norm));
    w->layers = calloc((size_t)g->n_layers, sizeof *w->layers);
    if (!w->layers) return q_fail(Q_ENOMEM, "%s: out of memory", c->dir);
    /* progress: a line rewritten per layer on a terminal; a summary line for models of 100 MB and up */
    const int tty = isatty(2);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int l = 0; l < g->n_layers; l++) {
        Q_TRY(load_layer(c, l, &w->layers[l]));
        if (tty) fprintf(stderr, "\rloading weights into %s: layer %d/%d, %.2f GB", c->be->ops->name, l + 1,
                         g->n_layers, w->n_bytes / 1e9);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (tty) fprintf(stderr, "\n");
    if (w->n_bytes >= 100000000)
        q_info("loaded %s: %d layers, %.2f GB into %s in %.1f s", c->dir, g->n_layers, w->n_bytes / 1e9,
               c->be->ops->name, (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return Q_OK;
}

qstatus qwen35_weights_load(qbackend *be, const char *dir, const qwen35_config *cfg, qwen35_weights *w) {
    memset(w, 0, sizeof *w);
    if (!be || !be->ops || !dir || !cfg) return q_fail(Q_EINVAL, "qwen35_weights_load: bad arguments");
    if (cfg->n_layers <= 0 || cfg->n_layers > QCFG_MAX_LAYERS || cfg->hidden <= 0 || cfg->vocab_size <= 0)
        return q_fail(Q_EINVAL, "%s: config not parsed (n_layers %d, hidden %d)", dir, cfg->n_layers, cfg->hidden);
    wload c = {.be = be, .cfg = cfg, .dir = dir, .w = w};
    qstatus st = st_open_dir(dir, &c.st);
    if (!st) st = load_all(&c);
    st_close(c.st);
    if (st) qwen35_weights_free(be, cfg, w);
    return st;
}

static void free_qweight(qbackend *be, qweight *W) {
    be->ops->free(be, W->w);
    be->ops->free(be, W->scales);
    be->ops->free(be, W->biases);
    memset(W, 0, sizeof *W);
}

static void free_layer(qbackend *be, qwen35_layer *L) {
    be->ops->free(be, L->input_norm);
    be->ops->free(be, L->post_norm);
    qwen35_attn_weights *a = &L->attn;
    free_qweight(be, &a->q_proj);
    free_qweight(be, &a->k_proj);
    free_qweight(be, &a->v_proj);
    free_qweight(be, &a->o_proj);
    be->ops->free(be, a->q_norm);
    be->ops->free(be, a->k_norm);
    qwen35_gdn_weights *d = &L->gdn;
    free_qweight(be, &d->in_proj_qkv);
    free_qweight(be, &d->in_proj_z);
    free_qweight(be, &d->in_proj_b);
    free_qweight(be, &d->in_proj_a);
    free_qweight(be, &d->out_proj);
    be->ops->free(be, d->conv_w);
    be->ops->free(be, d->dt_bias);
    be->ops->free(be, d->A_log);
    be->ops->free(be, d->norm_w);
    free_qweight(be, &L->gate_proj);
    free_qweight(be, &L->up_proj);
    free_qweight(be, &L->down_proj);
}

void qwen35_weights_free(qbackend *be, const qwen35_config *cfg, qwen35_weights *w) {
    if (!w) return;
    if (be && be->ops) {
        if (w->head_sketch && be->ops->head_sketch_free) be->ops->head_sketch_free(be, w->head_sketch);
        if (!w->lm_head_tied) free_qweight(be, &w->lm_head);
        free_qweight(be, &w->embed);
        be->ops->free(be, w->final_norm);
        for (int l = 0; w->layers && cfg && l < cfg->n_layers; l++) free_layer(be, &w->layers[l]);
    }
    free(w->layers);
    memset(w, 0, sizeof *w);
}
