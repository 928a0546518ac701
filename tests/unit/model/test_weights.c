/* test_weights.c: model/weights.c + weights_names.c. Tiny checkpoints are written with
 * st_write_file into a mkdtemp directory (HF flat f32; HF nested bf16, sharded with an index, with
 * model.visual.* and mtp.* tensors to skip, tied; MLX 4-bit g64 with per-module overrides, +1 norms
 * and [C,K,1] conv) and loaded through a fake backend (alloc = calloc, upload = memcpy) that counts
 * live allocations. Checks formats, shapes, bytes, norm folding, conv layout, tying, n_bytes, and
 * that a wrong shape, a missing tensor, a bits mismatch or a failed allocation give an error naming
 * the tensor and leave nothing allocated. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "format/safetensors.h"
#include "model/qwen35.h"

/* ---- fake backend ------------------------------------------------------------------------------- */

typedef struct fake {
    int64_t live_bytes;
    int live, n_alloc, fail_at; /* fail_at > 0: the fail_at-th alloc fails */
} fake;

static qstatus fake_alloc(qbackend *be, size_t bytes, void **out) {
    fake *f = be->impl;
    if (++f->n_alloc == f->fail_at) return q_fail(Q_ENOMEM, "fake: alloc %d refused", f->fail_at);
    size_t *p = calloc(1, bytes + 16);
    if (!p) return q_fail(Q_ENOMEM, "fake: calloc");
    p[0] = bytes;
    f->live++;
    f->live_bytes += (int64_t)bytes;
    *out = (char *)p + 16;
    return Q_OK;
}

static void fake_free(qbackend *be, void *ptr) {
    if (!ptr) return;
    fake *f = be->impl;
    size_t *p = (size_t *)((char *)ptr - 16);
    f->live--;
    f->live_bytes -= (int64_t)p[0];
    free(p);
}

static qstatus fake_copy(qbackend *be, void *dst, const void *src, size_t n) {
    (void)be;
    memcpy(dst, src, n);
    return Q_OK;
}

static const qbackend_ops fake_ops = {
    .name = "fake", .alloc = fake_alloc, .free = fake_free, .upload = fake_copy, .download = fake_copy, .copy = fake_copy,
};

/* ---- checkpoint writer -------------------------------------------------------------------------- */

enum { VOCAB = 32, HID = 64, INTER = 128, NL = 2, NQ = 4, NKV = 2, HD = 16, HK = 2, HV = 4, DK = 16, DV = 16, KER = 4 };
#define CONV_DIM (2 * HK * DK + HV * DV)
#define MAXT 128

typedef struct opts {
    const char *pfx;         /* text model prefix */
    const char *head;        /* what precedes "lm_head": "" (HF) or "language_model." (MLX) */
    st_dtype dt;             /* dense and small-vector dtype */
    int mlx;                 /* 4-bit g64 affine linears, lm_head 8-bit, in_proj_a unquantized */
    int plus_one;            /* norms stored as 1+w */
    int conv_mlx;            /* [C,K,1] instead of [C,1,K] */
    int tied;                /* no lm_head tensor, tie_word_embeddings true */
    int nested;              /* config with text_config */
    int extras;              /* model.visual.*, vision_tower.*, mtp.* */
    int sharded;             /* two files + index */
    const char *drop;        /* omit the tensor whose name ends with this */
    const char *bad;         /* give this tensor one extra row */
    int cfg_bits;            /* config.json quantization bits (0: 4) */
} opts;

typedef struct ckpt {
    st_write_entry e[MAXT];
    int n;
    char dir[64];
} ckpt;

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* Adds a tensor of pfx+name (zeroed buffer, returned for filling); NULL when dropped. */
static void *add(ckpt *k, const opts *o, const char *pfx, const char *name, st_dtype dt, int nd, int64_t s0,
                 int64_t s1, int64_t s2) {
    char full[256];
    snprintf(full, sizeof full, "%s%s", pfx, name);
    if (o->drop && ends_with(full, o->drop)) return NULL;
    assert_true(k->n < MAXT);
    st_write_entry *e = &k->e[k->n++];
    e->name = strdup(full);
    e->dtype = dt;
    e->n_dims = nd;
    e->shape[0] = s0 + (o->bad && ends_with(full, o->bad));
    e->shape[1] = s1;
    e->shape[2] = s2;
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= e->shape[i];
    void *p = calloc((size_t)n + 1, st_dtype_size(dt));
    assert_non_null(p);
    e->data = p;
    return p;
}

static void put(st_dtype dt, void *p, int64_t i, float v) {
    if (dt == ST_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = st_f32_to_bf16(v); /* tests use F32 or BF16 */
}

/* What a value becomes once stored in dt. */
static float stored(st_dtype dt, float v) { return dt == ST_F32 ? v : st_bf16_to_f32(st_f32_to_bf16(v)); }

static float pattern(int64_t i) { return 0.01f * (float)((i * 7) % 13 - 6); }

static void vec(ckpt *k, const opts *o, const char *name, int64_t n, float v) {
    void *p = add(k, o, o->pfx, name, o->dt, 1, n, 0, 0);
    for (int64_t i = 0; p && i < n; i++) put(o->dt, p, i, v);
}

static int mlx_quantized(const opts *o, const char *module) { return o->mlx && !ends_with(module, "in_proj_a"); }

static void linear(ckpt *k, const opts *o, const char *pfx, const char *module, int64_t out, int64_t in) {
    char n[200];
    if (mlx_quantized(o, module)) {
        int bits = strcmp(module, "lm_head") == 0 ? 8 : 4; /* config.json overrides lm_head to 8 bits */
        snprintf(n, sizeof n, "%s.weight", module);
        uint32_t *w = add(k, o, pfx, n, ST_U32, 2, out, in * bits / 32, 0);
        for (int64_t i = 0; w && i < out * in * bits / 32; i++) w[i] = (uint32_t)(i * 2654435761u);
        snprintf(n, sizeof n, "%s.scales", module);
        void *s = add(k, o, pfx, n, ST_BF16, 2, out, in / 64, 0);
        for (int64_t i = 0; s && i < out * in / 64; i++) put(ST_BF16, s, i, 0.5f + pattern(i));
        snprintf(n, sizeof n, "%s.biases", module);
        void *b = add(k, o, pfx, n, ST_BF16, 2, out, in / 64, 0);
        for (int64_t i = 0; b && i < out * in / 64; i++) put(ST_BF16, b, i, -0.25f);
        return;
    }
    st_dtype dt = o->mlx ? ST_BF16 : o->dt;
    snprintf(n, sizeof n, "%s.weight", module);
    void *p = add(k, o, pfx, n, dt, 2, out, in, 0);
    for (int64_t i = 0; p && i < out * in; i++) put(dt, p, i, pattern(i));
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void write_config(const ckpt *k, const opts *o) {
    char text[2048], quant[256] = "", body[1024], path[128];
    snprintf(body, sizeof body,
             "\"vocab_size\": %d, \"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d,"
             "\"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d,"
             "\"linear_num_key_heads\": %d, \"linear_num_value_heads\": %d, \"linear_key_head_dim\": %d,"
             "\"linear_value_head_dim\": %d, \"linear_conv_kernel_dim\": %d, \"full_attention_interval\": 2,"
             "\"rope_parameters\": {\"rope_theta\": 10000000, \"partial_rotary_factor\": 0.25}",
             VOCAB, HID, INTER, NL, NQ, NKV, HD, HK, HV, DK, DV, KER);
    if (o->mlx)
        snprintf(quant, sizeof quant,
                 ", \"quantization\": {\"group_size\": 64, \"bits\": %d, \"mode\": \"affine\","
                 "\"%slayers.0.linear_attn.in_proj_a\": false, \"%s\": {\"bits\": 8, \"group_size\": 64}}",
                 o->cfg_bits ? o->cfg_bits : 4, o->pfx, "language_model.lm_head");
    if (o->nested)
        snprintf(text, sizeof text, "{\"tie_word_embeddings\": %s, \"text_config\": {%s}%s}", o->tied ? "true" : "false",
                 body, quant);
    else
        snprintf(text, sizeof text, "{\"tie_word_embeddings\": %s, %s%s}", o->tied ? "true" : "false", body, quant);
    snprintf(path, sizeof path, "%s/config.json", k->dir);
    write_text(path, text);
}

static void build(ckpt *k, const opts *o) {
    memset(k, 0, sizeof *k);
    snprintf(k->dir, sizeof k->dir, "/tmp/quill_w_XXXXXX");
    assert_non_null(mkdtemp(k->dir));
    float zc = o->plus_one ? 1.1f : 0.1f; /* zero-centred norms: w = 0.1 */
    char n[128];
    linear(k, o, o->pfx, "embed_tokens", VOCAB, HID);
    if (!o->tied) linear(k, o, o->head, "lm_head", VOCAB, HID);
    vec(k, o, "norm.weight", HID, zc);
    for (int l = 0; l < NL; l++) {
        snprintf(n, sizeof n, "layers.%d.input_layernorm.weight", l);
        vec(k, o, n, HID, zc);
        snprintf(n, sizeof n, "layers.%d.post_attention_layernorm.weight", l);
        vec(k, o, n, HID, zc);
#define L(s) (snprintf(n, sizeof n, "layers.%d." s, l), n)
        linear(k, o, o->pfx, L("mlp.gate_proj"), INTER, HID);
        linear(k, o, o->pfx, L("mlp.up_proj"), INTER, HID);
        linear(k, o, o->pfx, L("mlp.down_proj"), HID, INTER);
        if (l == 1) { /* full attention (interval 2) */
            linear(k, o, o->pfx, L("self_attn.q_proj"), NQ * 2 * HD, HID);
            linear(k, o, o->pfx, L("self_attn.k_proj"), NKV * HD, HID);
            linear(k, o, o->pfx, L("self_attn.v_proj"), NKV * HD, HID);
            linear(k, o, o->pfx, L("self_attn.o_proj"), HID, NQ * HD);
            vec(k, o, L("self_attn.q_norm.weight"), HD, o->plus_one ? 0.8f : -0.2f);
            vec(k, o, L("self_attn.k_norm.weight"), HD, zc);
        } else {
            linear(k, o, o->pfx, L("linear_attn.in_proj_qkv"), CONV_DIM, HID);
            linear(k, o, o->pfx, L("linear_attn.in_proj_z"), HV * DV, HID);
            linear(k, o, o->pfx, L("linear_attn.in_proj_b"), HV, HID);
            linear(k, o, o->pfx, L("linear_attn.in_proj_a"), HV, HID);
            linear(k, o, o->pfx, L("linear_attn.out_proj"), HID, HV * DV);
            void *c = add(k, o, o->pfx, L("linear_attn.conv1d.weight"), o->dt, 3, CONV_DIM, o->conv_mlx ? KER : 1,
                          o->conv_mlx ? 1 : KER);
            for (int64_t i = 0; c && i < CONV_DIM * KER; i++) put(o->dt, c, i, (float)(i % 61) * 0.125f);
            vec(k, o, L("linear_attn.dt_bias"), HV, 0.5f);
            vec(k, o, L("linear_attn.A_log"), HV, -1.0f);
            vec(k, o, L("linear_attn.norm.weight"), DV, 0.9f); /* raw, never folded */
        }
#undef L
    }
    if (o->extras) {
        add(k, o, "", "model.visual.blocks.0.attn.qkv.weight", ST_F32, 2, 3, 5, 0);
        add(k, o, "", "vision_tower.patch_embed.weight", ST_BF16, 1, 7, 0, 0);
        add(k, o, "", "mtp.layers.0.mlp.gate_proj.weight", ST_BF16, 2, 9, 2, 0);
        add(k, o, "", "mtp.fc.weight", ST_F32, 1, 11, 0, 0);
    }
    write_config(k, o);
    char path[128];
    if (!o->sharded) {
        snprintf(path, sizeof path, "%s/model.safetensors", k->dir);
        assert_ok(st_write_file(path, k->e, k->n, NULL, 0));
        return;
    }
    int half = k->n / 2;
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", k->dir);
    assert_ok(st_write_file(path, k->e, half, NULL, 0));
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", k->dir);
    assert_ok(st_write_file(path, k->e + half, k->n - half, NULL, 0));
    size_t cap = 64 + (size_t)k->n * 200, len = 0;
    char *idx = malloc(cap);
    assert_non_null(idx);
    len += (size_t)snprintf(idx + len, cap - len, "{\"metadata\": {}, \"weight_map\": {");
    for (int i = 0; i < k->n; i++)
        len += (size_t)snprintf(idx + len, cap - len, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "",
                                k->e[i].name, i < half ? 1 : 2);
    snprintf(idx + len, cap - len, "}}");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", k->dir);
    write_text(path, idx);
    free(idx);
}

static void ckpt_free(ckpt *k) {
    for (int i = 0; i < k->n; i++) {
        free((char *)k->e[i].name);
        free((void *)k->e[i].data);
    }
    DIR *d = opendir(k->dir);
    struct dirent *de;
    char p[512];
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", k->dir, de->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(k->dir);
}

static const st_write_entry *entry(const ckpt *k, const char *pfx, const char *name) {
    char full[256];
    snprintf(full, sizeof full, "%s%s", pfx, name);
    for (int i = 0; i < k->n; i++)
        if (strcmp(k->e[i].name, full) == 0) return &k->e[i];
    fail_msg("test checkpoint has no %s", full);
    return NULL;
}

static size_t entry_bytes(const st_write_entry *e) {
    size_t n = st_dtype_size(e->dtype);
    for (int i = 0; i < e->n_dims; i++) n *= (size_t)e->shape[i];
    return n;
}

/* ---- running a load ----------------------------------------------------------------------------- */

typedef struct run {
    ckpt k;
    fake f;
    qbackend be;
    qwen35_config cfg;
    qwen35_weights w;
} run;

static qstatus load(run *r, const opts *o, int fail_at) {
    memset(r, 0, sizeof *r);
    build(&r->k, o);
    r->f.fail_at = fail_at;
    r->be.ops = &fake_ops;
    r->be.impl = &r->f;
    assert_ok(qwen35_config_load(r->k.dir, &r->cfg));
    return qwen35_weights_load(&r->be, r->k.dir, &r->cfg, &r->w);
}

static void finish(run *r) {
    qwen35_weights_free(&r->be, &r->cfg, &r->w);
    assert_int_equal(r->f.live, 0);
    assert_int_equal(r->f.live_bytes, 0);
    qwen35_config_free(&r->cfg);
    ckpt_free(&r->k);
}

static void check_vec(const float *got, int64_t n, float want) {
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want) fail_msg("element %lld: %.9g, expected %.9g", (long long)i, got[i], want);
}

static void check_dense(const run *r, const char *pfx, const char *module, const qweight *W, qwfmt fmt, int64_t out,
                        int64_t in) {
    char n[200];
    snprintf(n, sizeof n, "%s.weight", module);
    const st_write_entry *e = entry(&r->k, pfx, n);
    assert_int_equal(W->fmt, fmt);
    assert_int_equal(W->n_out, out);
    assert_int_equal(W->n_in, in);
    assert_memory_equal(W->w, e->data, entry_bytes(e));
}

static void check_affine(const run *r, const char *pfx, const char *module, const qweight *W, int bits, int64_t out,
                         int64_t in) {
    char n[200];
    assert_int_equal(W->fmt, QW_AFFINE);
    assert_int_equal(W->sb_fmt, QW_BF16);
    assert_int_equal(W->bits, bits);
    assert_int_equal(W->group, 64);
    assert_int_equal(W->n_out, out);
    assert_int_equal(W->n_in, in);
    snprintf(n, sizeof n, "%s.weight", module);
    const st_write_entry *e = entry(&r->k, pfx, n);
    assert_int_equal(entry_bytes(e), (size_t)(out * in * bits / 8));
    assert_memory_equal(W->w, e->data, entry_bytes(e));
    snprintf(n, sizeof n, "%s.scales", module);
    e = entry(&r->k, pfx, n);
    assert_memory_equal(W->scales, e->data, entry_bytes(e));
    snprintf(n, sizeof n, "%s.biases", module);
    e = entry(&r->k, pfx, n);
    assert_memory_equal(W->biases, e->data, entry_bytes(e));
}

/* The parts every layout shares: norms folded to 1+w, raw GDN vectors, conv layout, n_bytes. */
static void check_common(const run *r, st_dtype dt, int plus_one) {
    const qwen35_weights *w = &r->w;
    float one_plus = plus_one ? stored(dt, 1.1f) : 1.0f + stored(dt, 0.1f);
    assert_true(one_plus > 1.09f && one_plus < 1.11f);
    check_vec(w->final_norm, HID, one_plus);
    for (int l = 0; l < NL; l++) {
        const qwen35_layer *L = &w->layers[l];
        assert_int_equal(L->is_attn, l == 1);
        check_vec(L->input_norm, HID, one_plus);
        check_vec(L->post_norm, HID, one_plus);
    }
    const qwen35_layer *A = &w->layers[1], *G = &w->layers[0];
    check_vec(A->attn.q_norm, HD, plus_one ? stored(dt, 0.8f) : 1.0f + stored(dt, -0.2f));
    check_vec(A->attn.k_norm, HD, one_plus);
    check_vec(G->gdn.norm_w, DV, stored(dt, 0.9f));
    check_vec(G->gdn.dt_bias, HV, 0.5f);
    check_vec(G->gdn.A_log, HV, -1.0f);
    for (int64_t i = 0; i < CONV_DIM * KER; i++) assert_true(G->gdn.conv_w[i] == (float)(i % 61) * 0.125f);
    assert_null(A->gdn.conv_w); /* an attention layer has no GDN weights */
    assert_null(G->attn.q_proj.w);
    assert_int_equal(w->n_bytes, r->f.live_bytes);
}

/* ---- tests -------------------------------------------------------------------------------------- */

static void test_hf_flat_f32(void **state) {
    (void)state;
    opts o = {.pfx = "model.", .head = "", .dt = ST_F32};
    run r;
    assert_ok(load(&r, &o, 0));
    check_common(&r, ST_F32, 0);
    const qwen35_weights *w = &r.w;
    assert_int_equal(w->lm_head_tied, 0);
    check_dense(&r, "model.", "embed_tokens", &w->embed, QW_F32, VOCAB, HID);
    check_dense(&r, "", "lm_head", &w->lm_head, QW_F32, VOCAB, HID);
    assert_ptr_not_equal(w->lm_head.w, w->embed.w);
    check_dense(&r, "model.", "layers.1.self_attn.q_proj", &w->layers[1].attn.q_proj, QW_F32, NQ * 2 * HD, HID);
    check_dense(&r, "model.", "layers.1.self_attn.o_proj", &w->layers[1].attn.o_proj, QW_F32, HID, NQ * HD);
    check_dense(&r, "model.", "layers.0.linear_attn.in_proj_qkv", &w->layers[0].gdn.in_proj_qkv, QW_F32, CONV_DIM, HID);
    check_dense(&r, "model.", "layers.0.linear_attn.out_proj", &w->layers[0].gdn.out_proj, QW_F32, HID, HV * DV);
    check_dense(&r, "model.", "layers.0.mlp.down_proj", &w->layers[0].down_proj, QW_F32, HID, INTER);
    finish(&r);
}

static void test_hf_nested_bf16_sharded(void **state) {
    (void)state;
    opts o = {.pfx = "model.language_model.", .head = "", .dt = ST_BF16, .tied = 1, .nested = 1, .extras = 1,
              .sharded = 1};
    run r;
    assert_ok(load(&r, &o, 0));
    assert_int_equal(r.cfg.nested, 1);
    check_common(&r, ST_BF16, 0);
    const qwen35_weights *w = &r.w;
    assert_int_equal(w->lm_head_tied, 1);
    assert_ptr_equal(w->lm_head.w, w->embed.w);
    assert_int_equal(w->lm_head.fmt, QW_BF16);
    check_dense(&r, "model.language_model.", "embed_tokens", &w->embed, QW_BF16, VOCAB, HID);
    check_dense(&r, "model.language_model.", "layers.1.self_attn.k_proj", &w->layers[1].attn.k_proj, QW_BF16,
                NKV * HD, HID);
    check_dense(&r, "model.language_model.", "layers.0.linear_attn.in_proj_b", &w->layers[0].gdn.in_proj_b, QW_BF16,
                HV, HID);
    finish(&r); /* the tied head is freed once: live == 0 */
}

static void test_mlx_4bit(void **state) {
    (void)state;
    opts o = {.pfx = "language_model.model.", .head = "language_model.", .dt = ST_F32, .mlx = 1, .plus_one = 1,
              .conv_mlx = 1, .nested = 1, .extras = 1};
    run r;
    assert_ok(load(&r, &o, 0));
    check_common(&r, ST_F32, 1);
    const qwen35_weights *w = &r.w;
    const char *p = "language_model.model.";
    assert_int_equal(w->lm_head_tied, 0);
    check_affine(&r, p, "embed_tokens", &w->embed, 4, VOCAB, HID);
    check_affine(&r, "language_model.", "lm_head", &w->lm_head, 8, VOCAB, HID); /* per-module override */
    check_affine(&r, p, "layers.1.self_attn.q_proj", &w->layers[1].attn.q_proj, 4, NQ * 2 * HD, HID);
    check_affine(&r, p, "layers.0.mlp.down_proj", &w->layers[0].down_proj, 4, HID, INTER);
    check_affine(&r, p, "layers.0.linear_attn.in_proj_b", &w->layers[0].gdn.in_proj_b, 4, HV, HID);
    /* Override `false`: stored dense. */
    check_dense(&r, p, "layers.0.linear_attn.in_proj_a", &w->layers[0].gdn.in_proj_a, QW_BF16, HV, HID);
    finish(&r);
}

/* Runs a load that must fail with `want`, naming every non-NULL needle, leaving nothing allocated. */
static void expect_load_fail(const opts *o, int fail_at, qstatus want, const char *n1, const char *n2) {
    run r;
    qstatus st = load(&r, o, fail_at);
    if (st != want) fail_msg("status %s, expected %s: %s", q_status_name(st), q_status_name(want), q_lasterr());
    if (n1 && !strstr(q_lasterr(), n1)) fail_msg("message \"%s\" lacks \"%s\"", q_lasterr(), n1);
    if (n2 && !strstr(q_lasterr(), n2)) fail_msg("message \"%s\" lacks \"%s\"", q_lasterr(), n2);
    assert_int_equal(r.f.live, 0);
    assert_null(r.w.layers);
    assert_int_equal(r.w.n_bytes, 0);
    finish(&r);
}

/* Allocations of a successful load of o. */
static int count_allocs(const opts *o) {
    run r;
    assert_ok(load(&r, o, 0));
    int n = r.f.n_alloc;
    finish(&r);
    return n;
}

static void test_errors(void **state) {
    (void)state;
    opts hf = {.pfx = "model.", .head = "", .dt = ST_F32};
    opts o = hf;
    o.bad = "layers.1.self_attn.k_proj.weight";
    expect_load_fail(&o, 0, Q_EFORMAT, "model.layers.1.self_attn.k_proj.weight", "model.safetensors");
    o = hf;
    o.drop = "layers.0.linear_attn.A_log";
    expect_load_fail(&o, 0, Q_EFORMAT, "missing tensor model.layers.0.linear_attn.A_log", NULL);
    o = hf;
    o.drop = "lm_head.weight"; /* not tied, no head */
    expect_load_fail(&o, 0, Q_EFORMAT, "lm_head.weight", NULL);
    o = hf;
    o.bad = "layers.0.linear_attn.conv1d.weight";
    expect_load_fail(&o, 0, Q_EFORMAT, "conv1d.weight", NULL);
    o = hf;
    o.bad = "layers.1.self_attn.q_norm.weight";
    expect_load_fail(&o, 0, Q_EFORMAT, "q_norm.weight", NULL);
    o = hf;
    o.drop = "embed_tokens.weight";
    expect_load_fail(&o, 0, Q_EFORMAT, "not a Qwen3.5 text checkpoint", NULL);
    /* Every allocation failing in turn unwinds cleanly. */
    int n_alloc = count_allocs(&hf);
    assert_int_equal(n_alloc, 28); /* 3 top-level + 14 GDN layer + 11 attention layer */
    for (int at = 1; at <= n_alloc; at++) expect_load_fail(&hf, at, Q_ENOMEM, "refused", NULL);

    opts mlx = {.pfx = "language_model.model.", .head = "language_model.", .dt = ST_F32, .mlx = 1, .plus_one = 1,
                .nested = 1};
    o = mlx;
    o.cfg_bits = 8; /* config says 8 bits, the tensors are 4-bit */
    expect_load_fail(&o, 0, Q_EFORMAT, "4-bit", "8 bits");
    o = mlx;
    o.drop = "layers.0.mlp.up_proj.biases";
    expect_load_fail(&o, 0, Q_EFORMAT, "layers.0.mlp.up_proj.biases", NULL);
    o = mlx;
    o.bad = "layers.0.mlp.up_proj.scales";
    expect_load_fail(&o, 0, Q_EFORMAT, "layers.0.mlp.up_proj.scales", NULL);
    n_alloc = count_allocs(&mlx);
    for (int at = 1; at <= n_alloc; at += 2) expect_load_fail(&mlx, at, Q_ENOMEM, "refused", NULL);
}

static void test_bad_args(void **state) {
    (void)state;
    qwen35_weights w;
    qwen35_config cfg = {0};
    fake f = {0};
    qbackend be = {&fake_ops, &f};
    assert_int_equal(qwen35_weights_load(&be, "/tmp", &cfg, &w), Q_EINVAL);
    cfg.n_layers = 1;
    cfg.hidden = 8;
    cfg.vocab_size = 8;
    assert_int_equal(qwen35_weights_load(&be, "/nonexistent_quill", &cfg, &w), Q_EIO);
    assert_non_null(strstr(q_lasterr(), "/nonexistent_quill"));
    qwen35_weights_free(&be, &cfg, NULL);
    qwen35_weights_free(&be, &cfg, &w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_flat_f32),
        cmocka_unit_test(test_hf_nested_bf16_sharded),
        cmocka_unit_test(test_mlx_4bit),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
