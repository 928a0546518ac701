/* quant.c: MLX affine quantization metadata from config.json "quantization".
 *
 * MLX (mlx_lm.utils / mlx-vlm) writes {"group_size": G, "bits": B, "mode": "affine", <module path>:
 * {"group_size", "bits"} | false, ...}; the module paths are those of the checkpoint, e.g.
 * "language_model.model.layers.0.mlp.gate_proj". Invariants: when enabled, bits/group of the
 * defaults and of every non-disabled override pass qquant_valid; override paths are owned strings.
 * Not here: whether a module is actually quantized (that is "<path>.scales" in the checkpoint, see
 * model/weights.c) or the packing itself (backend). */
#include "quant.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

int qquant_valid(int bits, int group) {
    int bits_ok = bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8;
    int group_ok = group == 32 || group == 64 || group == 128;
    return bits_ok && group_ok;
}

void qquant_free(qquant_config *q) {
    if (!q) return;
    for (int i = 0; i < q->n_overrides; i++) free(q->overrides[i].path);
    free(q->overrides);
    memset(q, 0, sizeof *q);
}

/* Reads obj[key] as a positive int into *out, keeping *out when absent. */
static qstatus get_int(const json_t *obj, const char *key, const char *src, const char *where, int *out) {
    json_t *v = json_object_get(obj, key);
    if (!v) return Q_OK;
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > 1024)
        return q_fail(Q_EFORMAT, "%s: \"%s%s\" is not a small positive integer", src, where, key);
    *out = (int)json_integer_value(v);
    return Q_OK;
}

qstatus qquant_parse(const json_t *obj, const char *src, qquant_config *q) {
    memset(q, 0, sizeof *q);
    if (!json_is_object(obj)) return q_fail(Q_EFORMAT, "%s: \"quantization\" is not an object", src);
    q->bits = 4;
    q->group = 64;
    Q_TRY(get_int(obj, "bits", src, "quantization.", &q->bits));
    Q_TRY(get_int(obj, "group_size", src, "quantization.", &q->group));
    json_t *mode = json_object_get(obj, "mode");
    if (mode && !(json_is_string(mode) && strcmp(json_string_value(mode), "affine") == 0))
        return q_fail(Q_EUNSUPPORTED, "%s: quantization.mode %s%s%s is not supported (only \"affine\")", src,
                      json_is_string(mode) ? "\"" : "", json_is_string(mode) ? json_string_value(mode) : "(non-string)",
                      json_is_string(mode) ? "\"" : "");
    if (!qquant_valid(q->bits, q->group))
        return q_fail(Q_EUNSUPPORTED, "%s: quantization bits %d / group_size %d not supported", src, q->bits,
                      q->group);
    size_t n = 0;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val) n += json_is_object(val) || json_is_false(val);
    if (n > 0) {
        q->overrides = calloc(n, sizeof *q->overrides);
        if (!q->overrides) return q_fail(Q_ENOMEM, "%s: out of memory", src);
    }
    qstatus st = Q_OK;
    json_object_foreach((json_t *)obj, key, val) {
        if (!json_is_object(val) && !json_is_false(val)) continue;
        qquant_override *o = &q->overrides[q->n_overrides];
        if (!(o->path = strdup(key))) { st = q_fail(Q_ENOMEM, "%s: out of memory", src); break; }
        q->n_overrides++;
        if (json_is_false(val)) { o->disabled = 1; continue; }
        o->bits = q->bits;
        o->group = q->group;
        char where[320];
        snprintf(where, sizeof where, "quantization.%.256s.", key);
        if ((st = get_int(val, "bits", src, where, &o->bits))) break;
        if ((st = get_int(val, "group_size", src, where, &o->group))) break;
        if (!qquant_valid(o->bits, o->group)) {
            st = q_fail(Q_EUNSUPPORTED, "%s: quantization[\"%s\"]: bits %d / group_size %d not supported", src, key,
                        o->bits, o->group);
            break;
        }
    }
    q->enabled = 1;
    if (st) qquant_free(q);
    return st;
}

/* The path with a known model prefix removed, so "model.language_model.layers.0.mlp.gate_proj" and
 * "language_model.model.layers.0.mlp.gate_proj" compare equal when written in different conventions. */
static const char *strip_prefix(const char *p) {
    static const char *const prefixes[] = {"model.language_model.", "language_model.model.", "language_model.",
                                           "model."};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        size_t n = strlen(prefixes[i]);
        if (strncmp(p, prefixes[i], n) == 0) return p + n;
    }
    return p;
}

static const qquant_override *find_override(const qquant_config *q, const char *path) {
    for (int i = 0; i < q->n_overrides; i++)
        if (strcmp(q->overrides[i].path, path) == 0) return &q->overrides[i];
    const char *bare = strip_prefix(path);
    for (int i = 0; i < q->n_overrides; i++)
        if (strcmp(strip_prefix(q->overrides[i].path), bare) == 0) return &q->overrides[i];
    return NULL;
}

int qquant_lookup(const qquant_config *q, const char *path, int *bits, int *group) {
    if (!q || !q->enabled) return 0;
    const qquant_override *o = path ? find_override(q, path) : NULL;
    if (o && o->disabled) return 0;
    if (bits) *bits = o ? o->bits : q->bits;
    if (group) *group = o ? o->group : q->group;
    return 1;
}
