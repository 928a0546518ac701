/* detok.c: incremental detokenizer (see detok.h for the contract).
 *
 * State: `held` holds at most 3 bytes, a proper prefix of a valid UTF-8 character (tok_utf8_next
 * returned 0 for it). Each feed appends the id's bytes to held, emits everything up to the last
 * such prefix through the lossy repair of utf8.c, and keeps that prefix. Example: U+1F917 as the
 * tokens [F0 9F] [A4 97]: the first feed emits "" and holds F0 9F; the second emits the emoji.
 * Not here: whole-sequence decoding (tok_decode.c). */
#include <stdlib.h>
#include <string.h>

#include "detok.h"
#include "tok_internal.h"

struct detok {
    const qtokenizer *tok; /* borrowed */
    int skip_special;
    uint8_t held[4];
    size_t n_held;         /* < 4 */
    uint8_t *in;           /* scratch: held + the id's bytes */
    size_t cap_in;
    char *out;             /* last returned chunk, owned */
};

qstatus detok_create(const qtokenizer *tok, int skip_special, detok **out) {
    *out = NULL;
    if (!tok) return q_fail(Q_EINVAL, "detok_create: NULL tokenizer");
    detok *d = calloc(1, sizeof *d);
    if (!d) return q_fail(Q_ENOMEM, "detok_create: out of memory");
    d->tok = tok;
    d->skip_special = skip_special;
    *out = d;
    return Q_OK;
}

void detok_destroy(detok *d) {
    if (!d) return;
    free(d->in);
    free(d->out);
    free(d);
}

void detok_reset(detok *d) { d->n_held = 0; }

/* Repairs in[0..n) (final: also the tail) into d->out; keeps an unfinished tail in held. */
static qstatus emit(detok *d, size_t n, int final, const char **text, size_t *n_text) {
    free(d->out);
    d->out = NULL;
    size_t used = 0, len = 0;
    Q_TRY(tok_utf8_lossy(d->in, n, final, &d->out, &len, &used));
    d->n_held = n - used;
    memcpy(d->held, d->in + used, d->n_held);
    *text = d->out;
    *n_text = len;
    return Q_OK;
}

qstatus detok_feed(detok *d, int32_t id, const char **text, size_t *n) {
    *text = "";
    *n = 0;
    const char *bytes;
    size_t nb;
    Q_TRY(tok_token_bytes(d->tok, id, &bytes, &nb));
    if (d->skip_special && tok_is_special(d->tok, id)) nb = 0;
    size_t need = d->n_held + nb;
    if (need > d->cap_in) {
        size_t c = need < 64 ? 64 : 2 * need;
        uint8_t *p = realloc(d->in, c);
        if (!p) return q_fail(Q_ENOMEM, "detok_feed: out of memory");
        d->in = p;
        d->cap_in = c;
    }
    if (d->cap_in == 0) return Q_OK;
    memcpy(d->in, d->held, d->n_held);
    memcpy(d->in + d->n_held, bytes, nb);
    return emit(d, need, 0, text, n);
}

qstatus detok_flush(detok *d, const char **text, size_t *n) {
    *text = "";
    *n = 0;
    if (d->n_held == 0) return Q_OK;
    size_t held = d->n_held;
    memcpy(d->in, d->held, held); /* in has room: it held these bytes before */
    qstatus rc = emit(d, held, 1, text, n);
    d->n_held = 0;
    return rc;
}
