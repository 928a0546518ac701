/* cmd_quantize.c: `quill quantize IN_DIR OUT_DIR --bits 4 --group-size 64`: writes the MLX affine
 * layout that quill and mlx-lm load (reference §3.1-3.2): names language_model.model.* and
 * language_model.lm_head.*; every Linear and the embedding quantized (uint32 codes, bf16 scales and
 * biases) when its input dim divides by the group; zero-centred norms stored as 1+w; conv1d as
 * [C, K, 1]; A_log in f32; everything else copied; config.json gains "quantization" and
 * "quantization_config"; tokenizer and template files are copied. Vision and mtp.* tensors are
 * dropped (mlx-lm drops them too).
 * A DFlash drafter (config.json names the DFlashDraftModel architecture or has "dflash_config";
 * reference/dflash.md 1.1) keeps its z-lab names (fc, hidden_norm, layers.*, norm): its Linear
 * weights, fc included, are quantized the same way, and its norms, plain RMSNorm weights, are
 * copied as they are (never 1+w). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "format/mlx_quant.h"
#include "format/quant.h"
#include "format/safetensors.h"
#include "format/st_shards.h"
#include "model/qwen35.h"
#include "util/fileio.h"
#include "util/threadpool.h"

static const char *linear_modules[] = {"q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z",
                                       "in_proj_a", "in_proj_b", "out_proj", "gate_proj", "up_proj",
                                       "down_proj", "embed_tokens", "lm_head"};
static const char *zc_norms[] = {"input_layernorm.weight", "post_attention_layernorm.weight", "q_norm.weight",
                                 "k_norm.weight"};

/* MLX name for a text tensor, or 0 for a tensor to drop. A drafter's names stay as they are. */
static int mlx_name(const char *in, char *out, size_t cap, int drafter) {
    if (drafter) {
        snprintf(out, cap, "%s", in);
        return strlen(in) < cap;
    }
    static const struct { const char *from, *to; } maps[] = {
        {"language_model.", "language_model."}, {"model.language_model.", "language_model.model."},
        {"lm_head.", "language_model.lm_head."}, {"model.", "language_model.model."}};
    if (strstr(in, "visual.") || strstr(in, "vision_tower") || !strncmp(in, "mtp.", 4)) return 0;
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++) {
        size_t n = strlen(maps[i].from);
        if (!strncmp(in, maps[i].from, n)) {
            snprintf(out, cap, "%s%s", maps[i].to, in + n);
            return 1;
        }
    }
    return 0;
}

static int is_linear(const char *name, const st_tensor *t, int drafter) {
    if (t->n_dims != 2 || !st_name_ends(name, ".weight")) return 0;
    if (drafter && !strcmp(name, "fc.weight")) return 1; /* the drafter's fusion of the target taps */
    for (size_t i = 0; i < sizeof linear_modules / sizeof linear_modules[0]; i++) {
        char pat[64];
        snprintf(pat, sizeof pat, "%s.weight", linear_modules[i]);
        if (st_name_ends(name, pat)) return 1;
    }
    return 0;
}

static int is_zc_norm(const char *mlx) {
    if (!strcmp(mlx, "language_model.model.norm.weight")) return 1;
    for (size_t i = 0; i < sizeof zc_norms / sizeof zc_norms[0]; i++)
        if (st_name_ends(mlx, zc_norms[i]) && !strstr(mlx, "linear_attn.norm")) return 1;
    return 0;
}

typedef struct qjob {
    const float *w;
    int64_t n_in;
    int bits, group;
    uint32_t *codes;
    uint16_t *scales, *biases;
} qjob;

static void quantize_rows(void *ctx, int64_t r0, int64_t r1, int t) {
    (void)t;
    qjob *j = ctx;
    int64_t ng = j->n_in / j->group, words = j->n_in * j->bits / 32;
    float s[1024], b[1024];
    for (int64_t r = r0; r < r1; r++) {
        mlx_quantize_row(j->w + r * j->n_in, j->n_in, j->bits, j->group, j->codes + r * words, s, b);
        for (int64_t g = 0; g < ng; g++) {
            j->scales[r * ng + g] = st_f32_to_bf16(s[g]);
            j->biases[r * ng + g] = st_f32_to_bf16(b[g]);
        }
    }
}

static qstatus quantize_dir(const char *in, const char *out, int bits, int group, int drafter, q_pool *pool) {
    st_set *set = NULL;
    Q_TRY(st_open_dir(in, &set));
    st_shards *w = NULL;
    qstatus st = st_shards_create(out, (int64_t)4 << 30, &w);
    int plus_one = 0;
    if (st == Q_OK && !drafter) st = qwen35_norms_plus_one(set, in, &plus_one);
    const int add_one = st == Q_OK && !plus_one && !drafter;
    int n_quant = 0;
    for (int i = 0; st == Q_OK && i < st_count(set); i++) {
        const st_tensor *t = st_at(set, i);
        char name[512];
        if (!mlx_name(t->name, name, sizeof name, drafter)) continue;
        int64_t n = st_numel(t);
        float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
        if (!f) { st = q_fail(Q_ENOMEM, "%s: out of memory", t->name); break; }
        if (t->dtype == ST_F32 || t->dtype == ST_F16 || t->dtype == ST_BF16) st = st_read_f32(t, f, n);
        else st = q_fail(Q_EUNSUPPORTED, "%s: %s: input must be f32/f16/bf16 (got %s)", t->file, t->name,
                         st_dtype_name(t->dtype));
        if (st != Q_OK) { free(f); break; }
        if (is_linear(name, t, drafter) && t->shape[1] % group == 0 && (t->shape[1] * bits) % 32 == 0 &&
            t->shape[1] / group <= 1024) {
            int64_t rows = t->shape[0], cols = t->shape[1], ng = cols / group;
            qjob j = {f, cols, bits, group, malloc((size_t)(rows * cols * bits / 32) * 4),
                      malloc((size_t)(rows * ng) * 2), malloc((size_t)(rows * ng) * 2)};
            if (!j.codes || !j.scales || !j.biases) {
                free(j.codes); free(j.scales); free(j.biases); free(f);
                st = q_fail(Q_ENOMEM, "%s: out of memory", t->name);
                break;
            }
            q_parallel_for(pool, rows, 16, quantize_rows, &j);
            free(f);
            char base[512];
            snprintf(base, sizeof base, "%.*s", (int)(strlen(name) - 7), name); /* without ".weight" */
            char nm[600];
            int64_t wshape[2] = {rows, cols * bits / 32}, gshape[2] = {rows, ng};
            snprintf(nm, sizeof nm, "%s.weight", base);
            st = st_shards_add(w, nm, ST_U32, 2, wshape, j.codes);
            snprintf(nm, sizeof nm, "%s.scales", base);
            if (st == Q_OK) st = st_shards_add(w, nm, ST_BF16, 2, gshape, j.scales);
            else free(j.scales);
            snprintf(nm, sizeof nm, "%s.biases", base);
            if (st == Q_OK) st = st_shards_add(w, nm, ST_BF16, 2, gshape, j.biases);
            else free(j.biases);
            n_quant++;
            continue;
        }
        int64_t shape[ST_MAX_DIMS];
        int nd = t->n_dims;
        for (int d = 0; d < nd; d++) shape[d] = t->shape[d];
        if (st_name_ends(name, "conv1d.weight") && nd == 3 && shape[1] == 1) { /* [C,1,K] -> [C,K,1] */
            shape[1] = shape[2];
            shape[2] = 1;
        }
        if (add_one && is_zc_norm(name))
            for (int64_t e = 0; e < n; e++) f[e] += 1.0f;
        if (st_name_ends(name, "A_log") || t->dtype == ST_F32) {
            st = st_shards_add(w, name, ST_F32, nd, shape, f);
        } else {
            uint16_t *h = malloc((size_t)(n ? n : 1) * 2);
            if (!h) { free(f); st = q_fail(Q_ENOMEM, "out of memory"); break; }
            for (int64_t e = 0; e < n; e++) h[e] = st_f32_to_bf16(f[e]);
            free(f);
            st = st_shards_add(w, name, ST_BF16, nd, shape, h); /* f16 inputs become bf16 */
        }
    }
    st_close(set);
    if (st != Q_OK) {
        st_shards_abort(w);
        return st;
    }
    fprintf(stderr, "quantize: %s%d linear weights to %d bits, group %d%s\n", drafter ? "DFlash drafter: " : "",
            n_quant, bits, group, add_one ? "; zero-centred norms stored as 1+w" : "");
    return st_shards_finish(w);
}

/* Whether config.json describes a DFlash drafter: "DFlashDraftModel" among "architectures", or a
 * "dflash_config" object. */
static int is_drafter(const json_t *cfg) {
    if (json_is_object(json_object_get(cfg, "dflash_config"))) return 1;
    json_t *arch = json_object_get(cfg, "architectures"), *a;
    size_t i;
    json_array_foreach(arch, i, a) {
        if (json_is_string(a) && strstr(json_string_value(a), "DFlashDraftModel")) return 1;
    }
    return 0;
}

static qstatus write_config(const char *in, const char *out, int bits, int group, int *drafter) {
    char path[1200];
    Q_TRY(q_path_join(path, sizeof path, in, "config.json"));
    json_error_t err;
    json_t *cfg = json_load_file(path, 0, &err);
    if (!cfg || !json_is_object(cfg)) {
        json_decref(cfg);
        return q_fail(Q_EFORMAT, "%s: %s", path, err.text);
    }
    *drafter = is_drafter(cfg);
    json_t *q = json_pack("{s:i, s:i, s:s}", "group_size", group, "bits", bits, "mode", "affine");
    json_object_set(cfg, "quantization", q);
    json_object_set_new(cfg, "quantization_config", q);
    Q_TRY(q_path_join(path, sizeof path, out, "config.json"));
    int rc = json_dump_file(cfg, path, JSON_INDENT(2));
    json_decref(cfg);
    return rc == 0 ? Q_OK : q_fail(Q_EIO, "%s: cannot write", path);
}

static qstatus copy_file(const char *in, const char *out, const char *name) {
    char src[1200], dst[1200];
    Q_TRY(q_path_join(src, sizeof src, in, name));
    if (!q_file_exists(src)) return Q_OK;
    Q_TRY(q_path_join(dst, sizeof dst, out, name));
    char *buf = NULL;
    size_t n = 0;
    Q_TRY(q_read_file(src, &buf, &n));
    FILE *f = fopen(dst, "wb");
    int ok = f && fwrite(buf, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    free(buf);
    return ok ? Q_OK : q_fail(Q_EIO, "%s: cannot write", dst);
}

int cmd_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    long long bits = 4, group = 64;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bits") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 2, 8, &bits)) { fprintf(stderr, "quill quantize: bad --bits\n"); return 2; }
        } else if (!strcmp(argv[i], "--group-size") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 32, 128, &group)) { fprintf(stderr, "quill quantize: bad --group-size\n"); return 2; }
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: quill quantize IN_DIR OUT_DIR [--bits 2|3|4|5|6|8] [--group-size 32|64|128]\n");
            return 0;
        } else if (argv[i][0] != '-' && !in) in = argv[i];
        else if (argv[i][0] != '-' && !out) out = argv[i];
        else { fprintf(stderr, "quill quantize: unexpected argument '%s'\n", argv[i]); return 2; }
    }
    if (!in || !out) { fprintf(stderr, "usage: quill quantize IN_DIR OUT_DIR --bits 4 --group-size 64\n"); return 2; }
    if (!qquant_valid((int)bits, (int)group)) {
        fprintf(stderr, "quill quantize: bits must be 2,3,4,5,6,8 and group size 32,64,128\n");
        return 2;
    }
    struct stat sb;
    if (mkdir(out, 0755) != 0 && (stat(out, &sb) != 0 || !S_ISDIR(sb.st_mode))) {
        fprintf(stderr, "quill quantize: cannot create %s\n", out);
        return 1;
    }
    q_pool *pool = NULL;
    int drafter = 0;
    qstatus st = q_pool_create(0, &pool);
    if (st == Q_OK) st = write_config(in, out, (int)bits, (int)group, &drafter);
    if (st == Q_OK) st = quantize_dir(in, out, (int)bits, (int)group, drafter, pool);
    const char *extra[] = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"};
    for (size_t i = 0; st == Q_OK && i < sizeof extra / sizeof extra[0]; i++) st = copy_file(in, out, extra[i]);
    q_pool_destroy(pool);
    if (st != Q_OK) { fprintf(stderr, "quill quantize: %s\n", q_lasterr()); return 1; }
    return 0;
}
