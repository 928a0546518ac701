/* cmd_synth.c: `quill synth --preset 9b|27b|4b|0.8b OUT_DIR`: a checkpoint with the real Qwen3.5
 * config and shapes (reference §1.2-1.4, HF nested layout) and random bf16 weights, for benchmarks.
 * Scales keep activations finite: linear weights uniform with std 1/sqrt(n_in), so each projection
 * keeps unit variance; zero-centred norms stored as w = 0 (scale 1, HF convention); the GDN norm 1;
 * A_log = log(U[1, 16]) (f32), dt_bias U[-0.5, 0.5]. Filling is threaded and seeded per tensor and
 * chunk, so a preset always gives the same bytes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "format/st_shards.h"
#include "util/hash.h"
#include "util/threadpool.h"

typedef struct preset {
    const char *name;
    int layers, hidden, inter, heads, kv_heads, lin_k_heads, lin_v_heads, tie;
} preset;

static const preset presets[] = {
    {"0.8b", 24, 1024, 3584, 8, 2, 16, 16, 1},
    {"4b", 32, 2560, 9216, 16, 4, 16, 32, 1},
    {"9b", 32, 4096, 12288, 16, 4, 16, 32, 0},
    {"27b", 64, 5120, 17408, 24, 4, 16, 48, 0},
};
#define HEAD_DIM 256
#define LIN_DIM 128
#define VOCAB 248320

typedef struct fill_job {
    uint16_t *bf;   /* bf16 output, or */
    float *f32;     /* f32 output */
    int64_t n;
    uint64_t seed;
    float lo, hi;
    int log_of;     /* store log(value) (A_log) */
} fill_job;

#define FILL_CHUNK (1 << 20)

static void fill_range(void *ctx, int64_t c0, int64_t c1, int t) {
    (void)t;
    fill_job *j = ctx;
    for (int64_t c = c0; c < c1; c++) {
        uint64_t s = q_fnv1a(j->seed, &c, sizeof c) | 1;
        int64_t end = (c + 1) * FILL_CHUNK < j->n ? (c + 1) * FILL_CHUNK : j->n;
        for (int64_t i = c * FILL_CHUNK; i < end; i++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17; /* xorshift64 */
            float u = (float)(s >> 40) * (1.0f / 16777216.0f);
            float v = j->lo + (j->hi - j->lo) * u;
            if (j->log_of) v = logf(v);
            if (j->bf) j->bf[i] = st_f32_to_bf16(v);
            else j->f32[i] = v;
        }
    }
}

static qstatus add_tensor(st_shards *w, q_pool *pool, const char *name, int n_dims, const int64_t *shape,
                          float lo, float hi, int as_f32, int log_of) {
    int64_t n = 1;
    for (int d = 0; d < n_dims; d++) n *= shape[d];
    void *data = malloc((size_t)n * (as_f32 ? 4 : 2));
    if (!data) return q_fail(Q_ENOMEM, "%s: out of memory", name);
    fill_job j = {.n = n, .seed = q_fnv1a(Q_FNV_OFFSET, name, strlen(name)), .lo = lo, .hi = hi, .log_of = log_of};
    if (as_f32) j.f32 = data;
    else j.bf = data;
    q_parallel_for(pool, (n + FILL_CHUNK - 1) / FILL_CHUNK, 1, fill_range, &j);
    return st_shards_add(w, name, as_f32 ? ST_F32 : ST_BF16, n_dims, shape, data);
}

/* A linear [out][in]: std 1/sqrt(in) -> uniform half-width sqrt(3/in). */
static qstatus add_linear(st_shards *w, q_pool *pool, const char *name, int64_t out, int64_t in) {
    int64_t shape[2] = {out, in};
    float a = sqrtf(3.0f / (float)in);
    return add_tensor(w, pool, name, 2, shape, -a, a, 0, 0);
}

static qstatus add_vec(st_shards *w, q_pool *pool, const char *name, int64_t n, float lo, float hi, int f32, int log_of) {
    return add_tensor(w, pool, name, 1, &n, lo, hi, f32, log_of);
}

static qstatus write_config(const char *dir, const preset *p) {
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return q_fail(Q_EIO, "%s: cannot write", path);
    fprintf(f, "{\n  \"architectures\": [\"Qwen3_5ForConditionalGeneration\"],\n  \"model_type\": \"qwen3_5\",\n");
    fprintf(f, "  \"tie_word_embeddings\": %s,\n  \"eos_token_id\": 248046,\n  \"pad_token_id\": 248044,\n",
            p->tie ? "true" : "false");
    fprintf(f, "  \"text_config\": {\n    \"model_type\": \"qwen3_5_text\",\n    \"hidden_size\": %d,\n"
               "    \"intermediate_size\": %d,\n    \"num_hidden_layers\": %d,\n    \"num_attention_heads\": %d,\n"
               "    \"num_key_value_heads\": %d,\n    \"head_dim\": %d,\n    \"linear_num_key_heads\": %d,\n"
               "    \"linear_num_value_heads\": %d,\n    \"linear_key_head_dim\": %d,\n    \"linear_value_head_dim\": %d,\n"
               "    \"linear_conv_kernel_dim\": 4,\n    \"full_attention_interval\": 4,\n    \"layer_types\": [",
            p->hidden, p->inter, p->layers, p->heads, p->kv_heads, HEAD_DIM, p->lin_k_heads, p->lin_v_heads, LIN_DIM, LIN_DIM);
    for (int l = 0; l < p->layers; l++)
        fprintf(f, "%s\"%s\"", l ? ", " : "", (l + 1) % 4 == 0 ? "full_attention" : "linear_attention");
    fprintf(f, "],\n    \"rms_norm_eps\": 1e-06,\n    \"vocab_size\": %d,\n    \"max_position_embeddings\": 262144,\n"
               "    \"attn_output_gate\": true,\n    \"attention_bias\": false,\n    \"hidden_act\": \"silu\",\n"
               "    \"dtype\": \"bfloat16\",\n    \"eos_token_id\": 248044,\n    \"tie_word_embeddings\": %s,\n"
               "    \"mamba_ssm_dtype\": \"float32\",\n"
               "    \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000000, "
               "\"partial_rotary_factor\": 0.25, \"mrope_section\": [11, 11, 10], \"mrope_interleaved\": true}\n  }\n}\n",
            VOCAB, p->tie ? "true" : "false");
    return fclose(f) == 0 ? Q_OK : q_fail(Q_EIO, "%s: cannot write", path);
}

static qstatus synth(const preset *p, const char *dir, q_pool *pool) {
    Q_TRY(write_config(dir, p));
    st_shards *w = NULL;
    Q_TRY(st_shards_create(dir, (int64_t)4 << 30, &w));
    const int64_t H = p->hidden, qd = (int64_t)p->heads * HEAD_DIM, kvd = (int64_t)p->kv_heads * HEAD_DIM;
    const int64_t kd = (int64_t)p->lin_k_heads * LIN_DIM, vd = (int64_t)p->lin_v_heads * LIN_DIM;
    const int64_t conv = 2 * kd + vd;
    char nm[256];
    qstatus st = Q_OK;
#define L(...) (snprintf(nm, sizeof nm, __VA_ARGS__), nm)
    int64_t emb[2] = {VOCAB, H};
    st = add_tensor(w, pool, "model.language_model.embed_tokens.weight", 2, emb, -1.0f, 1.0f, 0, 0);
    for (int l = 0; st == Q_OK && l < p->layers; l++) {
        const char *pre = "model.language_model.layers";
        st = add_vec(w, pool, L("%s.%d.input_layernorm.weight", pre, l), H, 0, 0, 0, 0);
        if (st == Q_OK) st = add_vec(w, pool, L("%s.%d.post_attention_layernorm.weight", pre, l), H, 0, 0, 0, 0);
        if ((l + 1) % 4 == 0) {
            if (st == Q_OK) st = add_linear(w, pool, L("%s.%d.self_attn.q_proj.weight", pre, l), 2 * qd, H);
            if (st == Q_OK) st = add_linear(w, pool, L("%s.%d.self_attn.k_proj.weight", pre, l), kvd, H);
            if (st == Q_OK) st = add_linear(w, pool, L("%s.%d.self_attn.v_proj.weight", pre, l), kvd, H);
            if (st == Q_OK) st = add_linear(w, pool, L("%s.%d.self_attn.o_proj.weight", pre, l), H, qd);
            if (st == Q_OK) st = add_vec(w, pool, L("%s.%d.self_attn.q_norm.weight", pre, l), HEAD_DIM, 0, 0, 0, 0);
            if (st == Q_OK) st = add_vec(w, pool, L("%s.%d.self_attn.k_norm.weight", pre, l), HEAD_DIM, 0, 0, 0, 0);
        } else {
            int64_t cshape[3] = {conv, 1, 4};
            if (st == Q_OK) st = add_linear(w, pool, L("%s.%d.linear_attn.in_proj_qkv.weight", pre, l), conv, H);
            if (st == Q_OK) st = add_linear(w, pool, L("%s.%d.linear_attn.in_proj_z.weight", pre, l), vd, H);
            if (st == Q_OK) st = add_linear(w, pool, L("%s.%d.linear_attn.in_proj_b.weight", pre, l), p->lin_v_heads, H);
            if (st == Q_OK) st = add_linear(w, pool, L("%s.%d.linear_attn.in_proj_a.weight", pre, l), p->lin_v_heads, H);
            if (st == Q_OK) st = add_linear(w, pool, L("%s.%d.linear_attn.out_proj.weight", pre, l), H, vd);
            if (st == Q_OK) st = add_tensor(w, pool, L("%s.%d.linear_attn.conv1d.weight", pre, l), 3, cshape, -0.87f, 0.87f, 0, 0);
            if (st == Q_OK) st = add_vec(w, pool, L("%s.%d.linear_attn.dt_bias", pre, l), p->lin_v_heads, -0.5f, 0.5f, 0, 0);
            if (st == Q_OK) st = add_vec(w, pool, L("%s.%d.linear_attn.A_log", pre, l), p->lin_v_heads, 1.0f, 16.0f, 1, 1);
            if (st == Q_OK) st = add_vec(w, pool, L("%s.%d.linear_attn.norm.weight", pre, l), LIN_DIM, 1, 1, 0, 0);
        }
        if (st == Q_OK) st = add_linear(w, pool, L("%s.%d.mlp.gate_proj.weight", pre, l), p->inter, H);
        if (st == Q_OK) st = add_linear(w, pool, L("%s.%d.mlp.up_proj.weight", pre, l), p->inter, H);
        if (st == Q_OK) st = add_linear(w, pool, L("%s.%d.mlp.down_proj.weight", pre, l), H, p->inter);
        if (st == Q_OK) fprintf(stderr, "\rsynth: layer %d/%d", l + 1, p->layers);
    }
#undef L
    if (st == Q_OK) st = add_vec(w, pool, "model.language_model.norm.weight", H, 0, 0, 0, 0);
    if (st == Q_OK && !p->tie) st = add_linear(w, pool, "lm_head.weight", VOCAB, H);
    fprintf(stderr, "\n");
    if (st != Q_OK) {
        st_shards_abort(w);
        return st;
    }
    return st_shards_finish(w);
}

int cmd_synth(int argc, char **argv) {
    const char *pname = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--preset") && i + 1 < argc) pname = argv[++i];
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: quill synth --preset 9b|27b|4b|0.8b OUT_DIR\n");
            return 0;
        } else if (argv[i][0] != '-' && !out) out = argv[i];
        else { fprintf(stderr, "quill synth: unexpected argument '%s'\n", argv[i]); return 2; }
    }
    const preset *p = NULL;
    for (size_t i = 0; pname && i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(presets[i].name, pname)) p = &presets[i];
    if (!p || !out) { fprintf(stderr, "usage: quill synth --preset 9b|27b|4b|0.8b OUT_DIR\n"); return 2; }
    if (mkdir(out, 0755) != 0) {
        struct stat sb;
        if (stat(out, &sb) != 0 || !S_ISDIR(sb.st_mode)) { fprintf(stderr, "quill synth: cannot create %s\n", out); return 1; }
    }
    q_pool *pool = NULL;
    if (q_pool_create(0, &pool) != Q_OK) { fprintf(stderr, "quill synth: %s\n", q_lasterr()); return 1; }
    qstatus st = synth(p, out, pool);
    q_pool_destroy(pool);
    if (st != Q_OK) { fprintf(stderr, "quill synth: %s\n", q_lasterr()); return 1; }
    fprintf(stderr, "synth: %s preset written to %s\n", p->name, out);
    return 0;
}
