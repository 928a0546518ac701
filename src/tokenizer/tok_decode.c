/* tok_decode.c: ids -> text, and the per-id lookups of tokenizer.h.
 *
 * HF's ByteLevel decoder maps every token's characters back to bytes, joins them and returns
 * String::from_utf8_lossy of the result; tok_decode does the same (the bytes per id are computed
 * once at load, tok_load.c), so ids that cut a character in two decode to U+FFFD, as in
 * transformers. Streaming output uses detok.c instead, which holds such bytes back.
 * Not here: encoding (tok_encode.c). */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

static int has_id(const qtokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->n_vocab && tok->str_off[id] != UINT32_MAX;
}

qstatus tok_token_bytes(const qtokenizer *tok, int32_t id, const char **bytes, size_t *n) {
    if (!has_id(tok, id)) return q_fail(Q_EINVAL, "tokenizer: id %d is not a token (vocabulary of %d)", (int)id, tok->n_vocab);
    *bytes = (const char *)tok->dec_blob + tok->dec_off[id];
    *n = tok->dec_off[id + 1] - tok->dec_off[id];
    return Q_OK;
}

const char *tok_token_str(const qtokenizer *tok, int32_t id) {
    return has_id(tok, id) ? tok->str_blob + tok->str_off[id] : NULL;
}

qstatus tok_decode(const qtokenizer *tok, const int32_t *ids, size_t n, int skip_special,
                   char **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (!has_id(tok, ids[i])) return q_fail(Q_EINVAL, "tok_decode: ids[%zu] = %d is not a token (vocabulary of %d)", i, (int)ids[i], tok->n_vocab);
        if (skip_special && tok->is_special[ids[i]]) continue;
        total += tok->dec_off[ids[i] + 1] - tok->dec_off[ids[i]];
    }
    uint8_t *raw = malloc(total + 1);
    if (!raw) return q_fail(Q_ENOMEM, "tok_decode: out of memory (%zu bytes)", total + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (skip_special && tok->is_special[id]) continue;
        size_t len = tok->dec_off[id + 1] - tok->dec_off[id];
        memcpy(raw + k, tok->dec_blob + tok->dec_off[id], len);
        k += len;
    }
    qstatus rc = tok_utf8_lossy(raw, k, 1, out, n_out, NULL);
    free(raw);
    return rc;
}

int32_t tok_token_id(const qtokenizer *tok, const char *token) {
    size_t len = strlen(token);
    for (int i = 0; i < tok->n_added; i++)
        if (tok->added[i].len == len && memcmp(tok->added[i].content, token, len) == 0) return tok->added[i].id;
    return tok_strmap_get(&tok->vocab, token, len);
}

int tok_n_vocab(const qtokenizer *tok) { return tok->n_vocab; }

int tok_is_special(const qtokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->n_vocab && tok->is_special[id];
}
