/* test_quantize_drafter.c: `quill quantize` on a DFlash drafter (z-lab layout, reference/dflash.md
 * 1.1): a tiny random drafter is written here, quantized to 4 bits in groups of 64, and the result
 * must keep the z-lab names (no language_model. prefix), quantize every Linear including fc (uint32
 * codes + bf16 scales and biases that dequantize to within one step of the input), copy the plain
 * RMSNorm weights unchanged (never 1+w), and keep dflash_config in config.json beside the new
 * "quantization" block. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/mlx_quant.h"
#include "format/safetensors.h"
#include "harness.h"

#define H 64
#define I 128
#define TAPS 2
#define HD 16

typedef struct spec { const char *name; int64_t rows, cols; int linear; } spec;

static const spec tensors[] = {
    {"fc.weight", H, TAPS * H, 1},
    {"hidden_norm.weight", H, 0, 0},
    {"layers.0.input_layernorm.weight", H, 0, 0},
    {"layers.0.self_attn.q_proj.weight", 4 * HD, H, 1},
    {"layers.0.self_attn.k_proj.weight", 2 * HD, H, 1},
    {"layers.0.self_attn.v_proj.weight", 2 * HD, H, 1},
    {"layers.0.self_attn.o_proj.weight", H, 4 * HD, 1},
    {"layers.0.self_attn.q_norm.weight", HD, 0, 0},
    {"layers.0.self_attn.k_norm.weight", HD, 0, 0},
    {"layers.0.post_attention_layernorm.weight", H, 0, 0},
    {"layers.0.mlp.gate_proj.weight", I, H, 1},
    {"layers.0.mlp.up_proj.weight", I, H, 1},
    {"layers.0.mlp.down_proj.weight", H, I, 1},
    {"norm.weight", H, 0, 0},
};
#define N_T (sizeof tensors / sizeof tensors[0])

static uint32_t rng = 12345u;
static float frand(void) { /* deterministic, in [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / (float)(1u << 23) - 1.0f;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void test_quantize_drafter(void **state) {
    (void)state;
    char dir[] = "/tmp/quill-qdraft-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char in[1200], out[1200], path[1300], cmd[4096];
    snprintf(in, sizeof in, "%s/in", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", in);
    assert_int_equal(system(cmd), 0);

    st_write_entry e[N_T];
    uint16_t *data[N_T];
    for (size_t i = 0; i < N_T; i++) {
        int64_t n = tensors[i].rows * (tensors[i].linear ? tensors[i].cols : 1);
        data[i] = malloc((size_t)n * sizeof(uint16_t));
        assert_non_null(data[i]);
        for (int64_t k = 0; k < n; k++) /* norms near 1 (plain RMSNorm weights), matrices small */
            data[i][k] = st_f32_to_bf16(tensors[i].linear ? 0.05f * frand() : 1.0f + 0.1f * frand());
        e[i] = (st_write_entry){.name = tensors[i].name, .dtype = ST_BF16, .n_dims = tensors[i].linear ? 2 : 1,
                                .shape = {tensors[i].rows, tensors[i].cols}, .data = data[i]};
    }
    snprintf(path, sizeof path, "%s/model.safetensors", in);
    const char *meta[] = {"format", "pt"};
    assert_ok(st_write_file(path, e, (int)N_T, meta, 1));
    snprintf(path, sizeof path, "%s/config.json", in);
    write_text(path, "{\"architectures\": [\"DFlashDraftModel\"], \"model_type\": \"qwen3\", \"hidden_size\": 64,"
                     " \"num_hidden_layers\": 1, \"block_size\": 16,"
                     " \"dflash_config\": {\"target_layer_ids\": [1, 2], \"mask_token_id\": 5}}");

    snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s' --bits 4 --group-size 64 2>/dev/null", QUILL_BINARY, in, out);
    assert_int_equal(system(cmd), 0);

    st_set *got = NULL;
    assert_ok(st_open_dir(out, &got));
    for (int i = 0; i < st_count(got); i++)
        if (strstr(st_at(got, i)->name, "language_model")) fail_msg("renamed: %s", st_at(got, i)->name);
    int n_linear = 0;
    for (size_t i = 0; i < N_T; i++) {
        const spec *s = &tensors[i];
        const st_tensor *w = st_find(got, s->name);
        if (!w) fail_msg("missing %s", s->name);
        if (!s->linear) { /* copied as is: same bf16 bytes */
            assert_int_equal(w->dtype, ST_BF16);
            assert_int_equal(w->n_bytes, (uint64_t)s->rows * 2);
            if (memcmp(w->data, data[i], w->n_bytes)) fail_msg("%s changed", s->name);
            continue;
        }
        n_linear++;
        char base[200], nm[220];
        snprintf(base, sizeof base, "%.*s", (int)(strlen(s->name) - 7), s->name);
        snprintf(nm, sizeof nm, "%s.scales", base);
        const st_tensor *sc = st_find(got, nm);
        snprintf(nm, sizeof nm, "%s.biases", base);
        const st_tensor *bi = st_find(got, nm);
        if (!sc || !bi) fail_msg("%s: no scales/biases", s->name);
        assert_int_equal(w->dtype, ST_U32);
        assert_int_equal(w->shape[0], s->rows);
        assert_int_equal(w->shape[1], s->cols * 4 / 32);
        assert_int_equal(sc->dtype, ST_BF16);
        assert_int_equal(sc->shape[1], s->cols / 64);
        int64_t ng = s->cols / 64, words = s->cols / 8;
        uint32_t *codes = malloc((size_t)(s->rows * words) * 4);
        uint16_t *sv = malloc((size_t)(s->rows * ng) * 2), *bv = malloc((size_t)(s->rows * ng) * 2);
        assert_true(codes && sv && bv);
        memcpy(codes, w->data, w->n_bytes);
        memcpy(sv, sc->data, sc->n_bytes);
        memcpy(bv, bi->data, bi->n_bytes);
        for (int64_t r = 0; r < s->rows; r++)
            for (int64_t c = 0; c < s->cols; c++) {
                float scale = st_bf16_to_f32(sv[r * ng + c / 64]), bias = st_bf16_to_f32(bv[r * ng + c / 64]);
                float v = scale * (float)mlx_code_at(codes + r * words, c, 4) + bias;
                float x = st_bf16_to_f32(data[i][r * s->cols + c]);
                if (fabsf(v - x) > 1.1f * fabsf(scale) + 1e-3f * fabsf(bias) + 1e-6f)
                    fail_msg("%s[%lld][%lld]: dequantized %g, input %g (scale %g)", s->name, (long long)r,
                             (long long)c, v, x, scale);
            }
        free(codes);
        free(sv);
        free(bv);
    }
    assert_int_equal(n_linear, 8);
    st_close(got);

    snprintf(path, sizeof path, "%s/config.json", out);
    json_error_t jerr;
    json_t *cfg = json_load_file(path, 0, &jerr);
    assert_non_null(cfg);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(cfg, "quantization"), "bits")), 4);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(cfg, "dflash_config"), "mask_token_id")), 5);
    json_decref(cfg);
    for (size_t i = 0; i < N_T; i++) free(data[i]);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_quantize_drafter)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
