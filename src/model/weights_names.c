/* weights_names.c: which checkpoint convention we are reading, decided once before any tensor is
 * loaded (the one place for naming and norm-storage quirks; mlx-lm calls this `sanitize`).
 *
 * Conventions (reference/qwen35-architecture.md 1.1, 3.2):
 *   HF nested  model.language_model.*          lm_head.*
 *   MLX        language_model.model.*          language_model.lm_head.*
 *   HF flat    model.*                         lm_head.*
 * model.visual.*, vision_tower.* and mtp.* are never looked up, so they are skipped.
 * Zero-centred norms (input/post_attention_layernorm, final norm, q_norm, k_norm) are stored as w by
 * HF (initialised to 0) and as 1+w by MLX and other converters (reference 2.2). One decision holds for
 * the whole checkpoint: the mean over every layer's input_layernorm weight, > 0.5 means 1+w.
 * Not here: shapes and uploads (weights.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/log.h"
#include "weights_internal.h"

static const struct {
    const char *model, *head;
} conventions[] = {
    {"model.language_model.", "lm_head"},
    {"language_model.model.", "language_model.lm_head"},
    {"model.", "lm_head"},
};
#define N_CONV ((int)(sizeof conventions / sizeof conventions[0]))

qstatus weights_name(const wload *c, char *buf, size_t cap, int layer, const char *suffix) {
    int n = layer < 0 ? snprintf(buf, cap, "%s%s", c->pfx, suffix)
                      : snprintf(buf, cap, "%slayers.%d.%s", c->pfx, layer, suffix);
    if (n < 0 || (size_t)n >= cap) return q_fail(Q_EINVAL, "%s: tensor name too long: %s...", c->dir, suffix);
    return Q_OK;
}

qstatus weights_need(const wload *c, const char *name, const st_tensor **out) {
    *out = st_find(c->st, name);
    if (*out) return Q_OK;
    /* name the file(s) it was looked for in: the checkpoint's one file, or its shards */
    const char *file = st_count(c->st) ? st_at(c->st, 0)->file : NULL;
    for (int i = 1; file && i < st_count(c->st); i++)
        if (strcmp(st_at(c->st, i)->file, file)) file = NULL;
    if (file) return q_fail(Q_EFORMAT, "%s: missing tensor %s", file, name);
    return q_fail(Q_EFORMAT, "%s: missing tensor %s (in none of its safetensors files)", c->dir, name);
}

static qstatus detect_prefix(wload *c) {
    char name[256];
    for (int i = 0; i < N_CONV && !c->pfx; i++) {
        snprintf(name, sizeof name, "%sembed_tokens.weight", conventions[i].model);
        if (!st_find(c->st, name)) continue;
        c->pfx = conventions[i].model;
        c->head_pfx = conventions[i].head;
        /* A head saved under another convention's name still counts (re-packaged checkpoints); when
         * none exists the head is tied, or its absence is an error at load. */
        snprintf(name, sizeof name, "%s.weight", c->head_pfx);
        for (int j = 0; j < N_CONV && !st_find(c->st, name); j++) {
            snprintf(name, sizeof name, "%s.weight", conventions[j].head);
            if (st_find(c->st, name)) c->head_pfx = conventions[j].head;
        }
    }
    if (!c->pfx)
        return q_fail(Q_EFORMAT, "%s: no embed_tokens.weight under model.language_model., language_model.model. "
                      "or model.: not a Qwen3.5 text checkpoint", c->dir);
    return Q_OK;
}

qstatus qwen35_norms_plus_one(const st_set *set, const char *dir, int *out) {
    static const char suffix[] = "input_layernorm.weight";
    const size_t ns = sizeof suffix - 1;
    double sum = 0;
    int64_t count = 0;
    for (int i = 0; i < st_count(set); i++) {
        const st_tensor *t = st_at(set, i);
        size_t n = strlen(t->name);
        if (n < ns || strcmp(t->name + n - ns, suffix) || !strncmp(t->name, "mtp.", 4)) continue;
        int64_t k = st_numel(t);
        float *v = malloc((size_t)(k > 0 ? k : 1) * sizeof *v);
        if (!v) return q_fail(Q_ENOMEM, "%s: out of memory", dir);
        qstatus st = st_read_f32(t, v, k);
        double tensor_sum = 0;
        for (int64_t e = 0; e < k && !st; e++) tensor_sum += v[e];
        free(v);
        if (st) return st;
        if (tensor_sum != tensor_sum || tensor_sum - tensor_sum != 0) /* NaN, or an infinity */
            return q_fail(Q_EFORMAT, "%s: tensor %s: not finite (NaN or infinity among its values)", t->file, t->name);
        sum += tensor_sum;
        count += k;
    }
    if (count == 0) return q_fail(Q_EFORMAT, "%s: no input_layernorm weights", dir);
    double mean = sum / (double)count;
    *out = mean > 0.5;
    q_debug("%s: input_layernorm mean %.4f: norms stored as %s", dir, mean, *out ? "1+w" : "w");
    return Q_OK;
}

qstatus weights_detect_layout(wload *c) {
    Q_TRY(detect_prefix(c));
    return qwen35_norms_plus_one(c->st, c->dir, &c->norms_plus_one);
}
