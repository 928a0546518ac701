/* test_config.c: format/config.c and format/quant.c. Nested (text_config) and flat configs,
 * tie_word_embeddings top level vs text_config, layer_types vs full_attention_interval, rope
 * parameters and their legacy spellings, eos int or list, the quantization block with overrides,
 * and errors naming the key (missing key, bad values, bad JSON). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "harness.h"
#include "format/config.h"

/* The 9B text config (reference 1.2), trimmed to what we read. */
#define TEXT_9B                                                                                         \
    "\"vocab_size\": 248320, \"hidden_size\": 4096, \"intermediate_size\": 12288,"                      \
    "\"num_hidden_layers\": 32, \"num_attention_heads\": 16, \"num_key_value_heads\": 4,"               \
    "\"head_dim\": 256, \"linear_num_key_heads\": 16, \"linear_num_value_heads\": 32,"                  \
    "\"linear_key_head_dim\": 128, \"linear_value_head_dim\": 128, \"linear_conv_kernel_dim\": 4,"      \
    "\"rms_norm_eps\": 1e-06, \"max_position_embeddings\": 262144, \"attn_output_gate\": true,"         \
    "\"full_attention_interval\": 4, \"eos_token_id\": 248044, \"dtype\": \"bfloat16\","                \
    "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000000,"                       \
    "\"partial_rotary_factor\": 0.25, \"mrope_section\": [11, 11, 10], \"mrope_interleaved\": true}"

static void expect_err(const char *json, qstatus want, const char *needle) {
    qwen35_config cfg;
    qstatus st = qwen35_config_parse(json, "cfg.json", &cfg);
    if (st != want) fail_msg("status %s, expected %s (%s)", q_status_name(st), q_status_name(want), q_lasterr());
    if (!strstr(q_lasterr(), "cfg.json")) fail_msg("message \"%s\" lacks the file name", q_lasterr());
    if (needle && !strstr(q_lasterr(), needle)) fail_msg("message \"%s\" lacks \"%s\"", q_lasterr(), needle);
    assert_null(cfg.quant.overrides);
}

static void test_nested(void **state) {
    (void)state;
    const char *json = "{\"architectures\": [\"Qwen3_5ForConditionalGeneration\"], \"model_type\": \"qwen3_5\","
                       "\"tie_word_embeddings\": true, \"eos_token_id\": 248046,"
                       "\"text_config\": {" TEXT_9B ", \"tie_word_embeddings\": false},"
                       "\"vision_config\": {\"depth\": 27}}";
    qwen35_config cfg;
    assert_ok(qwen35_config_parse(json, "cfg.json", &cfg));
    assert_string_equal(cfg.architecture, "Qwen3_5ForConditionalGeneration");
    assert_int_equal(cfg.nested, 1);
    assert_int_equal(cfg.vocab_size, 248320);
    assert_int_equal(cfg.hidden, 4096);
    assert_int_equal(cfg.intermediate, 12288);
    assert_int_equal(cfg.n_layers, 32);
    assert_int_equal(cfg.n_heads, 16);
    assert_int_equal(cfg.n_kv_heads, 4);
    assert_int_equal(cfg.head_dim, 256);
    assert_int_equal(cfg.rot_dim, 64);
    assert_true(cfg.rope_theta == 1e7f);
    assert_int_equal(cfg.lin_n_k_heads, 16);
    assert_int_equal(cfg.lin_n_v_heads, 32);
    assert_int_equal(cfg.conv_kernel, 4);
    assert_true(cfg.rms_eps == 1e-6f);
    assert_int_equal(cfg.max_positions, 262144);
    assert_int_equal(cfg.attn_output_gate, 1);
    assert_int_equal(cfg.tie_embeddings, 1); /* the top level wins over text_config */
    assert_int_equal(cfg.n_eos, 1);
    assert_int_equal(cfg.eos_ids[0], 248046); /* the top level wins */
    assert_string_equal(cfg.torch_dtype, "bfloat16");
    assert_int_equal(cfg.quant.enabled, 0);
    for (int i = 0; i < 32; i++) assert_int_equal(cfg.layer_is_attn[i], (i + 1) % 4 == 0);
    qwen35_config_free(&cfg);
}

static void test_flat_and_defaults(void **state) {
    (void)state;
    /* Flat, tie only in... the top level (the only level); HF defaults fill what is missing; legacy
     * top-level rope_theta / partial_rotary_factor; eos as a list; layer_types wins over interval. */
    const char *json = "{\"architectures\": [\"Qwen3_5ForCausalLM\"], \"vocab_size\": 512, \"hidden_size\": 64,"
                       "\"intermediate_size\": 128, \"num_hidden_layers\": 3, \"num_attention_heads\": 4,"
                       "\"num_key_value_heads\": 2, \"head_dim\": 16, \"linear_num_key_heads\": 2,"
                       "\"linear_num_value_heads\": 4, \"linear_key_head_dim\": 8, \"linear_value_head_dim\": 8,"
                       "\"rope_theta\": 5000.0, \"partial_rotary_factor\": 0.5, \"tie_word_embeddings\": true,"
                       "\"eos_token_id\": [7, 9], \"full_attention_interval\": 2, \"torch_dtype\": \"float32\","
                       "\"layer_types\": [\"full_attention\", \"linear_attention\", \"full_attention\"]}";
    qwen35_config cfg;
    assert_ok(qwen35_config_parse(json, "cfg.json", &cfg));
    assert_int_equal(cfg.nested, 0);
    assert_string_equal(cfg.architecture, "Qwen3_5ForCausalLM");
    assert_int_equal(cfg.tie_embeddings, 1);
    assert_int_equal(cfg.rot_dim, 8);
    assert_true(cfg.rope_theta == 5000.0f);
    assert_int_equal(cfg.conv_kernel, 4);          /* HF default */
    assert_int_equal(cfg.max_positions, 32768);    /* HF default */
    assert_true(cfg.rms_eps == 1e-6f);             /* HF default */
    assert_int_equal(cfg.n_eos, 2);
    assert_int_equal(cfg.eos_ids[1], 9);
    assert_string_equal(cfg.torch_dtype, "float32");
    assert_int_equal(cfg.layer_is_attn[0], 1);
    assert_int_equal(cfg.layer_is_attn[1], 0);
    assert_int_equal(cfg.layer_is_attn[2], 1);
    qwen35_config_free(&cfg);

    /* Nothing about rope at all: HF's defaults (theta 10000, factor 0.25); head_dim 256 by default. */
    json = "{\"vocab_size\": 10, \"hidden_size\": 8, \"intermediate_size\": 8, \"num_hidden_layers\": 4,"
           "\"num_attention_heads\": 2, \"num_key_value_heads\": 1}";
    assert_ok(qwen35_config_parse(json, "cfg.json", &cfg));
    assert_true(cfg.rope_theta == 10000.0f);
    assert_int_equal(cfg.head_dim, 256);
    assert_int_equal(cfg.rot_dim, 64);
    assert_int_equal(cfg.tie_embeddings, 0);
    assert_int_equal(cfg.n_eos, 0);
    assert_string_equal(cfg.architecture, "");
    assert_int_equal(cfg.layer_is_attn[3], 1);
    assert_int_equal(cfg.layer_is_attn[2], 0);
    qwen35_config_free(&cfg);

    /* Legacy layer type names HF still accepts. */
    json = "{\"vocab_size\": 10, \"hidden_size\": 8, \"intermediate_size\": 8, \"num_hidden_layers\": 2,"
           "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"layer_types\": [\"mamba\", \"attention\"]}";
    assert_ok(qwen35_config_parse(json, "cfg.json", &cfg));
    assert_int_equal(cfg.layer_is_attn[0], 0);
    assert_int_equal(cfg.layer_is_attn[1], 1);
    qwen35_config_free(&cfg);
}

static void test_tie_in_text_config_only(void **state) {
    (void)state;
    const char *json = "{\"text_config\": {" TEXT_9B ", \"tie_word_embeddings\": true}}";
    qwen35_config cfg;
    assert_ok(qwen35_config_parse(json, "cfg.json", &cfg));
    assert_int_equal(cfg.tie_embeddings, 1);
    assert_int_equal(cfg.eos_ids[0], 248044); /* from text_config when the top level has none */
    qwen35_config_free(&cfg);
    json = "{\"tie_word_embeddings\": false, \"text_config\": {" TEXT_9B ", \"tie_word_embeddings\": true}}";
    assert_ok(qwen35_config_parse(json, "cfg.json", &cfg));
    assert_int_equal(cfg.tie_embeddings, 0);
    qwen35_config_free(&cfg);
}

static void test_quantization(void **state) {
    (void)state;
    const char *json =
        "{\"text_config\": {" TEXT_9B "},"
        "\"quantization\": {\"group_size\": 64, \"bits\": 4, \"mode\": \"affine\","
        "  \"language_model.model.layers.0.mlp.down_proj\": {\"group_size\": 32, \"bits\": 8},"
        "  \"language_model.model.layers.0.linear_attn.in_proj_a\": false,"
        "  \"language_model.lm_head\": {\"bits\": 6}},"
        "\"quantization_config\": {\"group_size\": 64, \"bits\": 4}}";
    qwen35_config cfg;
    assert_ok(qwen35_config_parse(json, "cfg.json", &cfg));
    assert_int_equal(cfg.quant.enabled, 1);
    assert_int_equal(cfg.quant.bits, 4);
    assert_int_equal(cfg.quant.group, 64);
    assert_int_equal(cfg.quant.n_overrides, 3);
    int bits = 0, group = 0;
    assert_int_equal(qquant_lookup(&cfg.quant, "language_model.model.layers.0.mlp.down_proj", &bits, &group), 1);
    assert_int_equal(bits, 8);
    assert_int_equal(group, 32);
    /* The same module under the HF name matches the MLX-keyed override. */
    assert_int_equal(qquant_lookup(&cfg.quant, "model.language_model.layers.0.mlp.down_proj", &bits, &group), 1);
    assert_int_equal(bits, 8);
    assert_int_equal(qquant_lookup(&cfg.quant, "language_model.model.layers.0.linear_attn.in_proj_a", &bits, &group), 0);
    assert_int_equal(qquant_lookup(&cfg.quant, "language_model.lm_head", &bits, &group), 1);
    assert_int_equal(bits, 6);
    assert_int_equal(group, 64); /* group from the defaults */
    assert_int_equal(qquant_lookup(&cfg.quant, "language_model.model.layers.1.mlp.down_proj", &bits, &group), 1);
    assert_int_equal(bits, 4);
    assert_int_equal(group, 64);
    /* layers.1 must not match layers.10's override or vice versa */
    assert_int_equal(qquant_lookup(&cfg.quant, "language_model.model.layers.0.mlp.down_proj2", &bits, &group), 1);
    assert_int_equal(bits, 4);
    qwen35_config_free(&cfg);
    assert_null(cfg.quant.overrides);

    /* Only quantization_config (MLX repeats it there). */
    json = "{\"text_config\": {" TEXT_9B "}, \"quantization_config\": {\"group_size\": 128, \"bits\": 3}}";
    assert_ok(qwen35_config_parse(json, "cfg.json", &cfg));
    assert_int_equal(cfg.quant.enabled, 1);
    assert_int_equal(qquant_lookup(&cfg.quant, "x", &bits, &group), 1);
    assert_int_equal(bits, 3);
    assert_int_equal(group, 128);
    qwen35_config_free(&cfg);

    qquant_config none = {0};
    assert_int_equal(qquant_lookup(&none, "x", &bits, &group), 0);
    assert_int_equal(qquant_lookup(NULL, "x", &bits, &group), 0);
    assert_true(qquant_valid(5, 32));
    assert_false(qquant_valid(7, 64));
    assert_false(qquant_valid(4, 16));
}

static void test_quantization_errors(void **state) {
    (void)state;
    expect_err("{\"text_config\": {" TEXT_9B "}, \"quantization\": {\"bits\": 7}}", Q_EUNSUPPORTED, "bits 7");
    expect_err("{\"text_config\": {" TEXT_9B "}, \"quantization\": {\"bits\": 4, \"mode\": \"mxfp4\"}}",
               Q_EUNSUPPORTED, "mxfp4");
    expect_err("{\"text_config\": {" TEXT_9B "}, \"quantization\": {\"a.b\": {\"group_size\": 48}}}",
               Q_EUNSUPPORTED, "a.b");
    expect_err("{\"text_config\": {" TEXT_9B "}, \"quantization\": {\"a.b\": {\"bits\": \"4\"}}}", Q_EFORMAT,
               "\"quantization.a.b.bits\"");
    expect_err("{\"text_config\": {" TEXT_9B "}, \"quantization\": 4}", Q_EFORMAT, "quantization");
    expect_err("{\"text_config\": {" TEXT_9B "}, \"quantization_config\": {\"quant_method\": \"fp8\"}}",
               Q_EUNSUPPORTED, "fp8");
}

static void test_errors_name_the_key(void **state) {
    (void)state;
    expect_err("{\"text_config\": {\"vocab_size\": 10, \"intermediate_size\": 8, \"num_hidden_layers\": 4,"
               "\"num_attention_heads\": 2, \"num_key_value_heads\": 1}}",
               Q_EFORMAT, "missing required key \"text_config.hidden_size\"");
    expect_err("{\"vocab_size\": 10, \"hidden_size\": 8, \"intermediate_size\": 8, \"num_hidden_layers\": 4,"
               "\"num_attention_heads\": 2}", Q_EFORMAT, "\"num_key_value_heads\"");
    expect_err("{\"vocab_size\": 10, \"hidden_size\": -8, \"intermediate_size\": 8, \"num_hidden_layers\": 4,"
               "\"num_attention_heads\": 2, \"num_key_value_heads\": 1}", Q_EFORMAT, "\"hidden_size\"");
    expect_err("{\"vocab_size\": 10, \"hidden_size\": \"8\", \"intermediate_size\": 8, \"num_hidden_layers\": 4,"
               "\"num_attention_heads\": 2, \"num_key_value_heads\": 1}", Q_EFORMAT, "\"hidden_size\"");
#define BASE "\"vocab_size\": 10, \"hidden_size\": 8, \"intermediate_size\": 8, \"num_hidden_layers\": 4, "
    expect_err("{" BASE "\"num_attention_heads\": 3, \"num_key_value_heads\": 2}", Q_EFORMAT, "num_key_value_heads");
    expect_err("{" BASE "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"linear_num_key_heads\": 3,"
               "\"linear_num_value_heads\": 4}", Q_EFORMAT, "linear_num_value_heads");
    expect_err("{" BASE "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 10,"
               "\"partial_rotary_factor\": 0.3}", Q_EFORMAT, "rotary dim 3");
    expect_err("{" BASE "\"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
               "\"rope_parameters\": {\"rope_theta\": \"big\"}}", Q_EFORMAT, "\"rope_parameters.rope_theta\"");
    expect_err("{" BASE "\"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
               "\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4}}", Q_EUNSUPPORTED, "rope_type");
    expect_err("{" BASE "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"partial_rotary_factor\": 2}",
               Q_EFORMAT, "partial_rotary_factor");
    expect_err("{" BASE "\"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
               "\"layer_types\": [\"full_attention\"]}", Q_EFORMAT, "layer_types");
    expect_err("{" BASE "\"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
               "\"layer_types\": [\"full_attention\", \"linear_attention\", \"sliding_attention\", \"x\"]}",
               Q_EUNSUPPORTED, "layer_types\"[2]");
    expect_err("{" BASE "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"full_attention_interval\": 0}",
               Q_EFORMAT, "full_attention_interval");
    expect_err("{" BASE "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"tie_word_embeddings\": 1}",
               Q_EFORMAT, "tie_word_embeddings");
    expect_err("{" BASE "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"eos_token_id\": \"x\"}",
               Q_EFORMAT, "eos_token_id");
    expect_err("{" BASE "\"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
               "\"eos_token_id\": [1,2,3,4,5,6,7,8,9]}", Q_EFULL, "eos_token_id");
    expect_err("{" BASE "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"attn_output_gate\": false}",
               Q_EUNSUPPORTED, "attn_output_gate");
    expect_err("{" BASE "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"rms_norm_eps\": 0}", Q_EFORMAT,
               "rms_norm_eps");
    expect_err("{\"vocab_size\": 10, \"hidden_size\": 8, \"intermediate_size\": 8, \"num_hidden_layers\": 300,"
               "\"num_attention_heads\": 2, \"num_key_value_heads\": 1}", Q_EUNSUPPORTED, "num_hidden_layers");
    expect_err("{\"text_config\": [1]}", Q_EFORMAT, "text_config");
#undef BASE
}

static void test_bad_json(void **state) {
    (void)state;
    expect_err("{\"vocab_size\": 10,", Q_EFORMAT, "bad JSON");
    expect_err("[1, 2]", Q_EFORMAT, "not a JSON object");
    expect_err("", Q_EFORMAT, NULL);
}

static void test_load_from_dir(void **state) {
    (void)state;
    char dir[] = "/tmp/quill_cfg_XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/config.json", dir);
    qwen35_config cfg;
    assert_int_equal(qwen35_config_load(dir, &cfg), Q_EIO); /* no config.json yet */
    assert_non_null(strstr(q_lasterr(), "config.json"));
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"text_config\": {" TEXT_9B "}}", f);
    fclose(f);
    assert_ok(qwen35_config_load(dir, &cfg));
    assert_int_equal(cfg.hidden, 4096);
    qwen35_config_free(&cfg);
    f = fopen(path, "w");
    fputs("{\"text_config\": {\"hidden_size\": 4}}", f);
    fclose(f);
    assert_int_equal(qwen35_config_load(dir, &cfg), Q_EFORMAT);
    assert_non_null(strstr(q_lasterr(), path)); /* the message names the file */
    assert_non_null(strstr(q_lasterr(), "text_config.vocab_size"));
    unlink(path);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nested),
        cmocka_unit_test(test_flat_and_defaults),
        cmocka_unit_test(test_tie_in_text_config_only),
        cmocka_unit_test(test_quantization),
        cmocka_unit_test(test_quantization_errors),
        cmocka_unit_test(test_errors_name_the_key),
        cmocka_unit_test(test_bad_json),
        cmocka_unit_test(test_load_from_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
