/* quant.h: MLX affine quantization metadata (config.json "quantization": {"group_size", "bits",
 * "mode": "affine", and per-module overrides "<module path>": {"group_size", "bits"} or false}).
 * Whether a module is quantized at all is decided by the presence of "<path>.scales" in the
 * checkpoint; this only answers which bits and group size it uses. */
#ifndef QUILL_QUANT_H
#define QUILL_QUANT_H

#include "../util/status.h"

typedef struct qquant_override {
    char *path;  /* module path as written in config.json, e.g. "language_model.model.layers.0.mlp.down_proj" */
    int bits, group;
    int disabled; /* the override was `false`: not quantized */
} qquant_override;

typedef struct qquant_config {
    int enabled;
    int bits, group;         /* defaults */
    qquant_override *overrides;
    int n_overrides;
} qquant_config;

struct json_t; /* jansson's json_t */
/* Parses a "quantization" object (src names the file and key in messages) into q, which must be
 * zeroed or freed. Defaults: group_size 64, bits 4 (mlx.core.quantize). "mode" other than "affine"
 * is Q_EUNSUPPORTED. Every object- or false-valued key is a per-module override. On failure q is
 * left empty. */
qstatus qquant_parse(const struct json_t *obj, const char *src, qquant_config *q);

/* Bits and group size for the module at `path` (no ".weight" suffix). Returns 0 if the module is
 * not quantized per the config, 1 if it is. */
int qquant_lookup(const qquant_config *q, const char *path, int *bits, int *group);
/* bits in {2,3,4,5,6,8}, group in {32,64,128}. */
int qquant_valid(int bits, int group);
void qquant_free(qquant_config *q);

#endif
