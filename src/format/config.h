/* config.h: config.json -> qwen35_config. Accepts the nested form (Qwen3_5ForConditionalGeneration,
 * text keys under "text_config") and the flat form (Qwen3_5ForCausalLM). tie_word_embeddings is read
 * from the top level first, then text_config. rope_theta and partial_rotary_factor come from
 * "rope_parameters" (or legacy top-level "rope_theta"/"partial_rotary_factor"). Missing keys take the
 * HF Qwen3_5TextConfig defaults only where HF has one; a missing shape key with no default is an error
 * naming the key. */
#ifndef QUILL_CONFIG_H
#define QUILL_CONFIG_H

#include "../util/status.h"
#include "quant.h"

#define QCFG_MAX_LAYERS 256
#define QCFG_MAX_EOS 8

/* K/V cache element types (--kv-type f32 | bf16 | q8). */
enum { QKV_F32, QKV_BF16, QKV_Q8 };
/* GDN recurrent state element types (--gdn-state-type f32 | bf16). */
enum { QSTATE_F32, QSTATE_BF16 };

typedef struct qwen35_config {
    char architecture[64]; /* architectures[0], e.g. "Qwen3_5ForCausalLM" */
    int nested;            /* 1 when the text keys came from text_config */
    int vocab_size;        /* embedding rows */
    int hidden;            /* hidden_size */
    int intermediate;      /* intermediate_size */
    int n_layers;          /* num_hidden_layers */
    int layer_is_attn[QCFG_MAX_LAYERS]; /* from layer_types, or (i+1) % full_attention_interval == 0 */
    /* full attention */
    int n_heads, n_kv_heads, head_dim;
    int attn_output_gate;  /* must be 1 for Qwen3.5 */
    int rot_dim;           /* head_dim * partial_rotary_factor */
    float rope_theta;
    /* Gated DeltaNet */
    int lin_n_k_heads, lin_n_v_heads, lin_k_dim, lin_v_dim, conv_kernel;
    float rms_eps;
    int tie_embeddings;
    int max_positions;     /* max_position_embeddings */
    int eos_ids[QCFG_MAX_EOS], n_eos; /* top-level eos_token_id (int or list), else text_config's */
    char torch_dtype[16];  /* "bfloat16", ... ("" if absent) */
    qquant_config quant;   /* config["quantization"]; quant.enabled == 0 when absent */
    /* Not from config.json: a serving choice the caller sets before states are made (--kv-type). */
    int kv_type;           /* K/V caches: QKV_F32 (0 after parsing), QKV_BF16 or QKV_Q8 (qwen35_kv_fmt) */
    int gdn_state_type;    /* GDN recurrent states (--gdn-state-type): QSTATE_F32 (0, the config's mamba_ssm_dtype) or
                            * QSTATE_BF16 (backend.h's qgdn_dims.state_bf16) */
} qwen35_config;

/* Parses the JSON text `json` (src names the file in messages). */
qstatus qwen35_config_parse(const char *json, const char *src, qwen35_config *cfg);
/* Reads dir/config.json. */
qstatus qwen35_config_load(const char *dir, qwen35_config *cfg);
void qwen35_config_free(qwen35_config *cfg);

#endif
