/* tok_encode.c: text -> ids, in HF `tokenizers` order (see tok_internal.h for the pipeline).
 *
 * Added tokens: found leftmost-longest, like HF's Aho-Corasick (MatchKind::LeftmostLongest), first
 * the tokens with normalized = false on the raw text, then those with normalized = true on each
 * NFC-normalized gap. A single_word token next to a word character is skipped and the scan resumes
 * after it (as HF's find_iter does); lstrip / rstrip pull the whitespace beside the match into the
 * token. With parse_special = 0, special added tokens are not matched (HF's encode_special_tokens
 * / transformers' split_special_tokens); non-special ones such as Qwen's <think> still are.
 * Invalid UTF-8 input: each maximal invalid subpart becomes U+FFFD first (utf8.c), which is what
 * the goldens feed HF: Python's bytes.decode('utf-8', errors='replace').
 * Word cache: per call, not per tokenizer, so encode needs no lock and the tokenizer stays
 * immutable (several server threads share one). A 1 MB English text repeats most words, so the
 * cache still takes most pieces.
 * Not here: BPE itself (bpe.c), regexes and NFC (pretok.c). */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "tok_internal.h"
#include "util/hash.h"

#define CACHE_MAX_PIECE 128      /* bytes: longer pieces are rare and not cached */
#define CACHE_MAX_ENTRIES (1 << 16)

typedef struct cache_ent {
    uint64_t hash; /* 0 = empty */
    uint32_t key_off, key_len, ids_off, ids_len;
} cache_ent;

typedef struct enc_ctx {
    const qtokenizer *tok;
    int parse_special;
    int32_t *ids;
    size_t n_ids, cap_ids;
    tok_bpe_scratch bpe;
    pcre2_match_data *md[TOK_MAX_SPLITS];
    cache_ent *cache;
    size_t cache_cap, cache_n;
    char *keys;
    size_t keys_n, keys_cap;
    int32_t *cids;
    size_t cids_n, cids_cap;
} enc_ctx;

static qstatus grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return Q_OK;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return q_fail(Q_ENOMEM, "tokenizer: out of memory (%zu bytes)", c * elem);
    *p = q;
    *cap = c;
    return Q_OK;
}

static cache_ent *cache_find(enc_ctx *c, const char *s, size_t n, uint64_t h) {
    size_t mask = c->cache_cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        cache_ent *e = &c->cache[i];
        if (e->hash == 0) return e;
        if (e->hash == h && e->key_len == n && memcmp(c->keys + e->key_off, s, n) == 0) return e;
    }
}

static qstatus cache_insert(enc_ctx *c, cache_ent *slot, const char *s, size_t n, uint64_t h,
                            const int32_t *ids, size_t n_ids) {
    if (c->cache_n >= CACHE_MAX_ENTRIES) return Q_OK;
    Q_TRY(grow((void **)&c->keys, &c->keys_cap, c->keys_n + n, 1));
    Q_TRY(grow((void **)&c->cids, &c->cids_cap, c->cids_n + n_ids, sizeof *c->cids));
    memcpy(c->keys + c->keys_n, s, n);
    memcpy(c->cids + c->cids_n, ids, n_ids * sizeof *ids);
    *slot = (cache_ent){h, (uint32_t)c->keys_n, (uint32_t)n, (uint32_t)c->cids_n, (uint32_t)n_ids};
    c->keys_n += n;
    c->cids_n += n_ids;
    c->cache_n++;
    if (c->cache_n * 2 > c->cache_cap) {
        /* Rehash into twice the slots. */
        size_t ncap = c->cache_cap * 2;
        cache_ent *old = c->cache, *nc = calloc(ncap, sizeof *nc);
        if (!nc) return q_fail(Q_ENOMEM, "tokenizer: out of memory (word cache)");
        for (size_t i = 0; i < c->cache_cap; i++) {
            if (!old[i].hash) continue;
            size_t j = old[i].hash & (ncap - 1);
            while (nc[j].hash) j = (j + 1) & (ncap - 1);
            nc[j] = old[i];
        }
        c->cache = nc;
        c->cache_cap = ncap;
        free(old);
    }
    return Q_OK;
}

/* One pre-tokenized piece -> ids (through the cache). */
static qstatus on_piece(void *vctx, const char *s, size_t n) {
    enc_ctx *c = vctx;
    const qtokenizer *tok = c->tok;
    if (n == 1 && !tok->ignore_merges) {
        int32_t id = tok->byte_id[(unsigned char)s[0]];
        if (id < 0) return Q_OK;
        Q_TRY(grow((void **)&c->ids, &c->cap_ids, c->n_ids + 1, sizeof *c->ids));
        c->ids[c->n_ids++] = id;
        return Q_OK;
    }
    cache_ent *slot = NULL;
    uint64_t h = 0;
    if (n <= CACHE_MAX_PIECE) {
        if (!c->cache) {
            c->cache_cap = 4096;
            c->cache = calloc(c->cache_cap, sizeof *c->cache);
            if (!c->cache) return q_fail(Q_ENOMEM, "tokenizer: out of memory (word cache)");
        }
        h = q_fnv1a(Q_FNV_OFFSET, s, n) | 1;
        slot = cache_find(c, s, n, h);
        if (slot->hash) {
            Q_TRY(grow((void **)&c->ids, &c->cap_ids, c->n_ids + slot->ids_len, sizeof *c->ids));
            memcpy(c->ids + c->n_ids, c->cids + slot->ids_off, slot->ids_len * sizeof *c->ids);
            c->n_ids += slot->ids_len;
            return Q_OK;
        }
    }
    size_t first = c->n_ids;
    Q_TRY(tok_bpe_word(tok, &c->bpe, (const uint8_t *)s, n, &c->ids, &c->n_ids, &c->cap_ids));
    if (slot) Q_TRY(cache_insert(c, slot, s, n, h, c->ids + first, c->n_ids - first));
    return Q_OK;
}

/* Unicode White_Space (Rust regex \s, which HF's lstrip/rstrip use). */
static int is_space_cp(uint32_t cp) {
    return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

/* Rust regex \w: alphabetic, marks, decimal digits, connector punctuation, join controls. */
static int is_word_cp(uint32_t cp) {
    if (cp == 0x200C || cp == 0x200D) return 1;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
        return 1;
    default:
        return 0;
    }
}

static size_t prev_char(const char *s, size_t i) {
    do i--;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80);
    return i;
}

static uint32_t cp_at(const char *s, size_t n, size_t i) {
    int len = tok_utf8_next((const uint8_t *)s + i, n - i);
    return len > 0 ? tok_utf8_cp((const uint8_t *)s + i, len) : 0xFFFD;
}

/* Leftmost-longest added token of this pass at or after `from`; returns its index or -1. */
static int find_added(const enc_ctx *c, const char *s, size_t n, size_t from, int pass,
                      size_t *start, size_t *stop) {
    const qtokenizer *tok = c->tok;
    for (size_t p = from; p < n; p++) {
        unsigned b = (unsigned char)s[p];
        int best = -1;
        size_t best_len = 0;
        for (int k = tok->added_first[b]; k < tok->added_first[b + 1]; k++) {
            const tok_added *a = &tok->added[tok->added_order[k]];
            if (a->normalized != pass || (a->special && !c->parse_special)) continue;
            const char *pat = a->norm ? a->norm : a->content;
            size_t len = a->norm ? a->norm_len : a->len;
            if (len > best_len && len <= n - p && memcmp(s + p, pat, len) == 0) {
                best = tok->added_order[k];
                best_len = len;
            }
        }
        if (best >= 0) {
            *start = p;
            *stop = p + best_len;
            return best;
        }
    }
    return -1;
}

static qstatus encode_segment(enc_ctx *c, const char *s, size_t n, int pass);

static qstatus encode_gap(enc_ctx *c, const char *s, size_t n, int pass) {
    if (n == 0) return Q_OK;
    if (pass == 1) return tok_pretokenize(c->tok, c->md, s, n, on_piece, c);
    char *owned = NULL;
    const char *t = s;
    size_t m = n;
    if (c->tok->nfc) Q_TRY(tok_nfc(s, n, &owned, &t, &m));
    qstatus rc = encode_segment(c, t, m, 1);
    free(owned);
    return rc;
}

/* Pass 0: raw text, tokens with normalized = false; gaps go to NFC then pass 1: tokens with
 * normalized = true; gaps go to the pre-tokenizer and BPE. */
static qstatus encode_segment(enc_ctx *c, const char *s, size_t n, int pass) {
    const qtokenizer *tok = c->tok;
    size_t done = 0, from = 0, start, stop;
    int k;
    while (from < n && (k = find_added(c, s, n, from, pass, &start, &stop)) >= 0) {
        const tok_added *a = &tok->added[k];
        from = stop;
        if (a->single_word) {
            int left_ok = start == 0 || !is_word_cp(cp_at(s, n, prev_char(s, start)));
            int right_ok = stop == n || !is_word_cp(cp_at(s, n, stop));
            if (!left_ok || !right_ok) continue;
        }
        if (a->lstrip) {
            while (start > done && is_space_cp(cp_at(s, n, prev_char(s, start)))) start = prev_char(s, start);
        }
        if (a->rstrip) {
            while (stop < n && is_space_cp(cp_at(s, n, stop))) {
                int len = tok_utf8_next((const uint8_t *)s + stop, n - stop);
                stop += len > 0 ? (size_t)len : 1;
            }
        }
        if (start < done) start = done;
        Q_TRY(encode_gap(c, s + done, start - done, pass));
        Q_TRY(grow((void **)&c->ids, &c->cap_ids, c->n_ids + 1, sizeof *c->ids));
        c->ids[c->n_ids++] = a->id;
        done = stop;
        if (from < stop) from = stop;
    }
    return encode_gap(c, s + done, n - done, pass);
}

static int utf8_valid(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        int r = tok_utf8_next((const uint8_t *)s + i, n - i);
        if (r <= 0) return 0;
        i += (size_t)r;
    }
    return 1;
}

qstatus tok_encode(const qtokenizer *tok, const char *text, size_t n, int parse_special,
                   int32_t **ids, size_t *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    if (!tok || (!text && n)) return q_fail(Q_EINVAL, "tok_encode: NULL argument");
    char *fixed = NULL;
    if (n && !utf8_valid(text, n)) {
        size_t m;
        Q_TRY(tok_utf8_lossy((const uint8_t *)text, n, 1, &fixed, &m, NULL));
        text = fixed;
        n = m;
    }
    enc_ctx c;
    memset(&c, 0, sizeof c);
    c.tok = tok;
    c.parse_special = parse_special;
    qstatus rc = Q_OK;
    for (int i = 0; i < tok->n_split; i++) {
        c.md[i] = pcre2_match_data_create_from_pattern(tok->split_re[i], NULL);
        if (!c.md[i]) {
            rc = q_fail(Q_ENOMEM, "tokenizer: out of memory (match data)");
            goto out;
        }
    }
    rc = grow((void **)&c.ids, &c.cap_ids, n / 3 + 16, sizeof *c.ids);
    if (!rc) rc = encode_segment(&c, text ? text : "", n, 0);
out:
    for (int i = 0; i < tok->n_split; i++) pcre2_match_data_free(c.md[i]);
    tok_bpe_scratch_fini(&c.bpe);
    free(c.cache);
    free(c.keys);
    free(c.cids);
    free(fixed);
    if (rc) {
        free(c.ids);
        return rc;
    }
    *ids = c.ids;
    *n_ids = c.n_ids;
    return Q_OK;
}
