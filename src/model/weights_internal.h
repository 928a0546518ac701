/* weights_internal.h: shared between model/weights.c (loading into backend memory) and
 * model/weights_names.c (which naming convention and norm storage a checkpoint uses). Not a public
 * interface: qwen35.h declares qwen35_weights_load / qwen35_weights_free. */
#ifndef QUILL_WEIGHTS_INTERNAL_H
#define QUILL_WEIGHTS_INTERNAL_H

#include <stddef.h>

#include "../format/safetensors.h"
#include "qwen35.h"

/* One load in progress. */
typedef struct wload {
    qbackend *be;               /* borrowed */
    const qwen35_config *cfg;   /* borrowed */
    const char *dir;            /* checkpoint directory, for messages */
    st_set *st;                 /* owned by qwen35_weights_load */
    const char *pfx;            /* text model prefix: "model.language_model.", "language_model.model.", "model." */
    const char *head_pfx;       /* lm_head module path: "lm_head" or "language_model.lm_head" */
    int norms_plus_one;         /* 1: zero-centred norms are stored as 1+w (MLX, converted) */
    qwen35_weights *w;          /* being filled */
} wload;

/* Sets c->pfx and c->head_pfx from which embed_tokens.weight exists, then c->norms_plus_one from the
 * mean of all layers' input_layernorm weights (> 0.5: already 1+w). Fails naming the dir or tensor. */
qstatus weights_detect_layout(wload *c);

/* buf = c->pfx + "layers.<layer>." + suffix, or c->pfx + suffix when layer < 0. Fails (Q_EINVAL)
 * only if it does not fit. */
qstatus weights_name(const wload *c, char *buf, size_t cap, int layer, const char *suffix);

/* The tensor `name`, or Q_EFORMAT "<dir>: missing tensor <name>". */
qstatus weights_need(const wload *c, const char *name, const st_tensor **out);

#endif
