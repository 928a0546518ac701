/* config.c: config.json -> qwen35_config (jansson).
 *
 * Where keys live: nested configs (Qwen3_5ForConditionalGeneration) keep the text keys under
 * "text_config"; flat ones (Qwen3_5ForCausalLM, re-packaged checkpoints) at the top level.
 * tie_word_embeddings and eos_token_id are read from the top level first, then the text keys; the
 * quantization block ("quantization", else "quantization_config" without a "quant_method") from the
 * top level.
 *
 * Defaults follow HF Qwen3_5TextConfig (transformers configuration_qwen3_5.py) for head_dim (256),
 * the linear_* keys (16/32 heads, 128/128 dims, kernel 4), rms_norm_eps (1e-6),
 * max_position_embeddings (32768), full_attention_interval (4), partial_rotary_factor (0.25), and
 * rope_theta (10000, PreTrainedConfig's default_theta when no rope parameters are given; every
 * released Qwen3.5 config writes 1e7 in rope_parameters). HF also defaults the six core shape keys
 * (vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
 * num_key_value_heads) to the 9B's; we require them instead, since a config without them is not a
 * real checkpoint's and a 9B default would only surface later as a confusing tensor shape error.
 *
 * Invariants after a successful parse: every size is positive; n_heads % n_kv_heads == 0;
 * lin_n_v_heads % lin_n_k_heads == 0; rot_dim is even and <= head_dim; n_layers <= QCFG_MAX_LAYERS;
 * attn_output_gate == 1. Errors name the file and the key (with "text_config." when nested).
 * Not here: tensor names and shapes (model/weights.c). */
#include "config.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/fileio.h"

typedef struct cfgctx {
    const char *src;  /* file name for messages */
    json_t *root, *text;
    const char *tp;   /* "text_config." or "" */
} cfgctx;

/* An int key of `obj`; has_def == 0 makes it required. Must be a positive integer. */
static qstatus get_pos_int(const cfgctx *c, json_t *obj, const char *pfx, const char *key, int has_def, int def,
                           int *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (!has_def) return q_fail(Q_EFORMAT, "%s: missing required key \"%s%s\"", c->src, pfx, key);
        *out = def;
        return Q_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > (1 << 30))
        return q_fail(Q_EFORMAT, "%s: \"%s%s\" must be a positive integer", c->src, pfx, key);
    *out = (int)json_integer_value(v);
    return Q_OK;
}

static qstatus get_real(const cfgctx *c, json_t *obj, const char *pfx, const char *key, double def, double *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) { *out = def; return Q_OK; }
    if (!json_is_number(v)) return q_fail(Q_EFORMAT, "%s: \"%s%s\" must be a number", c->src, pfx, key);
    *out = json_number_value(v);
    return Q_OK;
}

/* A bool from the top level first, then the text keys. */
static qstatus get_bool_top_first(const cfgctx *c, const char *key, int def, int *out) {
    json_t *v = json_object_get(c->root, key);
    const char *pfx = "";
    if ((!v || json_is_null(v)) && c->text != c->root) { v = json_object_get(c->text, key); pfx = c->tp; }
    if (!v || json_is_null(v)) { *out = def; return Q_OK; }
    if (!json_is_boolean(v)) return q_fail(Q_EFORMAT, "%s: \"%s%s\" must be true or false", c->src, pfx, key);
    *out = json_is_true(v);
    return Q_OK;
}

static qstatus parse_layers(const cfgctx *c, qwen35_config *cfg) {
    json_t *lt = json_object_get(c->text, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || json_array_size(lt) != (size_t)cfg->n_layers)
            return q_fail(Q_EFORMAT, "%s: \"%slayer_types\" must be a list of num_hidden_layers (%d) strings",
                          c->src, c->tp, cfg->n_layers);
        for (int i = 0; i < cfg->n_layers; i++) {
            const char *s = json_string_value(json_array_get(lt, (size_t)i));
            /* "attention" / "mamba": legacy names HF remaps (remap_legacy_layer_types). */
            if (s && (strcmp(s, "full_attention") == 0 || strcmp(s, "attention") == 0)) cfg->layer_is_attn[i] = 1;
            else if (s && (strcmp(s, "linear_attention") == 0 || strcmp(s, "mamba") == 0)) cfg->layer_is_attn[i] = 0;
            else
                return q_fail(Q_EUNSUPPORTED, "%s: \"%slayer_types\"[%d] is %s%s%s, expected \"full_attention\" "
                              "or \"linear_attention\"", c->src, c->tp, i, s ? "\"" : "", s ? s : "not a string",
                              s ? "\"" : "");
        }
        return Q_OK;
    }
    int interval = 4;
    Q_TRY(get_pos_int(c, c->text, c->tp, "full_attention_interval", 1, 4, &interval));
    for (int i = 0; i < cfg->n_layers; i++) cfg->layer_is_attn[i] = (i + 1) % interval == 0;
    return Q_OK;
}

/* rope_parameters (or legacy rope_scaling) {rope_theta, partial_rotary_factor}, else the legacy
 * top-level keys of the text config. */
static qstatus parse_rope(const cfgctx *c, qwen35_config *cfg) {
    double theta = 10000.0, prf = 0.25;
    Q_TRY(get_real(c, c->text, c->tp, "rope_theta", theta, &theta));
    Q_TRY(get_real(c, c->text, c->tp, "partial_rotary_factor", prf, &prf));
    const char *rk = "rope_parameters";
    json_t *rp = json_object_get(c->text, rk);
    if (!rp || json_is_null(rp)) rp = json_object_get(c->text, rk = "rope_scaling");
    if (rp && !json_is_null(rp)) {
        if (!json_is_object(rp)) return q_fail(Q_EFORMAT, "%s: \"%s%s\" is not an object", c->src, c->tp, rk);
        char pfx[64];
        snprintf(pfx, sizeof pfx, "%s%s.", c->tp, rk);
        Q_TRY(get_real(c, rp, pfx, "rope_theta", theta, &theta));
        Q_TRY(get_real(c, rp, pfx, "partial_rotary_factor", prf, &prf));
        json_t *type = json_object_get(rp, "rope_type");
        if (!type) type = json_object_get(rp, "type");
        /* "mrope" with equal position rows (text only) is plain RoPE (reference 2.3). */
        const char *ts = json_string_value(type);
        if (type && !(ts && (strcmp(ts, "default") == 0 || strcmp(ts, "mrope") == 0)))
            return q_fail(Q_EUNSUPPORTED, "%s: \"%srope_type\" must be \"default\" (scaled RoPE is not supported)",
                          c->src, pfx);
    }
    if (!(theta > 0) || !isfinite(theta)) return q_fail(Q_EFORMAT, "%s: \"%srope_theta\" must be positive", c->src, c->tp);
    if (!(prf > 0 && prf <= 1))
        return q_fail(Q_EFORMAT, "%s: \"%spartial_rotary_factor\" must be in (0, 1]", c->src, c->tp);
    cfg->rope_theta = (float)theta;
    cfg->rot_dim = (int)(cfg->head_dim * prf); /* HF: int(head_dim * partial_rotary_factor) */
    if (cfg->rot_dim <= 0 || cfg->rot_dim % 2 != 0 || cfg->rot_dim > cfg->head_dim)
        return q_fail(Q_EFORMAT, "%s: rotary dim %d (head_dim %d * partial_rotary_factor %g) must be even, "
                      "positive and <= head_dim", c->src, cfg->rot_dim, cfg->head_dim, prf);
    return Q_OK;
}

static qstatus parse_eos(const cfgctx *c, qwen35_config *cfg) {
    json_t *v = json_object_get(c->root, "eos_token_id");
    const char *pfx = "";
    if ((!v || json_is_null(v)) && c->text != c->root) { v = json_object_get(c->text, "eos_token_id"); pfx = c->tp; }
    cfg->n_eos = 0;
    if (!v || json_is_null(v)) return Q_OK;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (n > QCFG_MAX_EOS)
        return q_fail(Q_EFULL, "%s: \"%seos_token_id\" lists %zu ids, at most %d supported", c->src, pfx, n,
                      QCFG_MAX_EOS);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX)
            return q_fail(Q_EFORMAT, "%s: \"%seos_token_id\" must be a token id or a list of them", c->src, pfx);
        cfg->eos_ids[cfg->n_eos++] = (int)json_integer_value(e);
    }
    return Q_OK;
}

static qstatus parse_quant(const cfgctx *c, qwen35_config *cfg) {
    json_t *q = json_object_get(c->root, "quantization");
    if (q && !json_is_null(q)) return qquant_parse(q, c->src, &cfg->quant);
    q = json_object_get(c->root, "quantization_config");
    if (!q || json_is_null(q)) return Q_OK;
    json_t *method = json_object_get(q, "quant_method");
    if (method) /* an HF quantizer (gptq, awq, fp8, ...), not MLX's repeated block */
        return q_fail(Q_EUNSUPPORTED, "%s: quantization_config.quant_method %s is not supported (only MLX affine)",
                      c->src, json_is_string(method) ? json_string_value(method) : "(non-string)");
    return qquant_parse(q, c->src, &cfg->quant);
}

static void copy_str(char *dst, size_t cap, json_t *v) {
    const char *s = json_string_value(v);
    snprintf(dst, cap, "%s", s ? s : "");
}

static qstatus parse_all(cfgctx *c, qwen35_config *cfg) {
    json_t *arch = json_object_get(c->root, "architectures");
    copy_str(cfg->architecture, sizeof cfg->architecture, json_is_array(arch) ? json_array_get(arch, 0) : NULL);
    json_t *tc = json_object_get(c->root, "text_config");
    if (tc && !json_is_null(tc)) {
        if (!json_is_object(tc)) return q_fail(Q_EFORMAT, "%s: \"text_config\" is not an object", c->src);
        c->text = tc;
        c->tp = "text_config.";
        cfg->nested = 1;
    }
    json_t *t = c->text;
    const char *tp = c->tp;
    Q_TRY(get_pos_int(c, t, tp, "vocab_size", 0, 0, &cfg->vocab_size));
    Q_TRY(get_pos_int(c, t, tp, "hidden_size", 0, 0, &cfg->hidden));
    Q_TRY(get_pos_int(c, t, tp, "intermediate_size", 0, 0, &cfg->intermediate));
    Q_TRY(get_pos_int(c, t, tp, "num_hidden_layers", 0, 0, &cfg->n_layers));
    Q_TRY(get_pos_int(c, t, tp, "num_attention_heads", 0, 0, &cfg->n_heads));
    Q_TRY(get_pos_int(c, t, tp, "num_key_value_heads", 0, 0, &cfg->n_kv_heads));
    Q_TRY(get_pos_int(c, t, tp, "head_dim", 1, 256, &cfg->head_dim));
    Q_TRY(get_pos_int(c, t, tp, "linear_num_key_heads", 1, 16, &cfg->lin_n_k_heads));
    Q_TRY(get_pos_int(c, t, tp, "linear_num_value_heads", 1, 32, &cfg->lin_n_v_heads));
    Q_TRY(get_pos_int(c, t, tp, "linear_key_head_dim", 1, 128, &cfg->lin_k_dim));
    Q_TRY(get_pos_int(c, t, tp, "linear_value_head_dim", 1, 128, &cfg->lin_v_dim));
    Q_TRY(get_pos_int(c, t, tp, "linear_conv_kernel_dim", 1, 4, &cfg->conv_kernel));
    Q_TRY(get_pos_int(c, t, tp, "max_position_embeddings", 1, 32768, &cfg->max_positions));
    double eps = 1e-6;
    Q_TRY(get_real(c, t, tp, "rms_norm_eps", 1e-6, &eps));
    if (!(eps > 0 && eps < 1)) return q_fail(Q_EFORMAT, "%s: \"%srms_norm_eps\" must be in (0, 1)", c->src, tp);
    cfg->rms_eps = (float)eps;

    if (cfg->n_layers > QCFG_MAX_LAYERS)
        return q_fail(Q_EUNSUPPORTED, "%s: \"%snum_hidden_layers\" is %d, at most %d supported", c->src, tp,
                      cfg->n_layers, QCFG_MAX_LAYERS);
    if (cfg->n_heads % cfg->n_kv_heads != 0)
        return q_fail(Q_EFORMAT, "%s: \"%snum_attention_heads\" (%d) is not a multiple of \"%snum_key_value_heads\" "
                      "(%d)", c->src, tp, cfg->n_heads, tp, cfg->n_kv_heads);
    if (cfg->lin_n_v_heads % cfg->lin_n_k_heads != 0)
        return q_fail(Q_EFORMAT, "%s: \"%slinear_num_value_heads\" (%d) is not a multiple of "
                      "\"%slinear_num_key_heads\" (%d)", c->src, tp, cfg->lin_n_v_heads, tp, cfg->lin_n_k_heads);
    Q_TRY(get_bool_top_first(c, "attn_output_gate", 1, &cfg->attn_output_gate));
    if (!cfg->attn_output_gate)
        return q_fail(Q_EUNSUPPORTED, "%s: \"attn_output_gate\" is false; Qwen3.5 attention is gated", c->src);
    Q_TRY(parse_layers(c, cfg));
    Q_TRY(parse_rope(c, cfg));
    Q_TRY(get_bool_top_first(c, "tie_word_embeddings", 0, &cfg->tie_embeddings));
    Q_TRY(parse_eos(c, cfg));
    json_t *dt = json_object_get(t, "torch_dtype");
    if (!json_is_string(dt)) dt = json_object_get(t, "dtype");
    if (!json_is_string(dt)) dt = json_object_get(c->root, "torch_dtype");
    if (!json_is_string(dt)) dt = json_object_get(c->root, "dtype");
    copy_str(cfg->torch_dtype, sizeof cfg->torch_dtype, json_is_string(dt) ? dt : NULL);
    return parse_quant(c, cfg);
}

qstatus qwen35_config_parse(const char *json, const char *src, qwen35_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    if (!src) src = "config.json";
    if (!json) return q_fail(Q_EINVAL, "%s: no text", src);
    json_error_t jerr;
    json_t *root = json_loads(json, 0, &jerr);
    if (!root) return q_fail(Q_EFORMAT, "%s: bad JSON: %s (line %d, column %d)", src, jerr.text, jerr.line, jerr.column);
    cfgctx c = {src, root, root, ""};
    qstatus st = json_is_object(root) ? parse_all(&c, cfg) : q_fail(Q_EFORMAT, "%s: not a JSON object", src);
    json_decref(root);
    if (st) qwen35_config_free(cfg);
    return st;
}

qstatus qwen35_config_load(const char *dir, qwen35_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    char path[4096];
    Q_TRY(q_path_join(path, sizeof path, dir, "config.json"));
    char *text = NULL;
    Q_TRY(q_read_file(path, &text, NULL));
    qstatus st = qwen35_config_parse(text, path, cfg);
    free(text);
    return st;
}

void qwen35_config_free(qwen35_config *cfg) {
    if (!cfg) return;
    qquant_free(&cfg->quant);
}
