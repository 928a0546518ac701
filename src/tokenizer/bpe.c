/* bpe.c: byte-level BPE on one pre-tokenized piece, and the hash maps behind it.
 *
 * A piece starts as one symbol per byte (the id of that byte's GPT-2 symbol), then the pair of
 * adjacent symbols with the lowest merge rank is merged, leftmost first among equal ranks, until no
 * adjacent pair has a merge. This is HF's `Word::merge_all`: a min-heap of (rank, position); an
 * entry whose pair has changed since it was pushed is stale and skipped. Example: "aaa" with merge
 * (a,a) pushes (r,0) and (r,1); (r,0) merges first, (r,1) is then stale, giving [aa][a].
 * Invariants: symbols form a doubly linked list over positions 0..n-1; a merged-away symbol has
 * len 0; a heap entry's pos is the left symbol of its pair. Cost O(n log n) per piece, so a 10 KB
 * run of one letter stays fast.
 * Not here: the word cache (tok_encode.c), splitting (pretok.c). */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"
#include "util/hash.h"

/* ---------- maps ---------- */

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

qstatus tok_strmap_init(tok_strmap *m, size_t n_expected) {
    memset(m, 0, sizeof *m);
    m->cap = pow2_at_least(n_expected * 2 + 1);
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->key_len = calloc(m->cap, sizeof *m->key_len);
    m->vals = calloc(m->cap, sizeof *m->vals);
    if (!m->keys || !m->key_len || !m->vals) {
        tok_strmap_fini(m);
        return q_fail(Q_ENOMEM, "tokenizer: out of memory (vocabulary map)");
    }
    return Q_OK;
}

void tok_strmap_fini(tok_strmap *m) {
    free(m->keys);
    free(m->key_len);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

qstatus tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val) {
    if ((m->n + 1) * 2 > m->cap) return q_fail(Q_EFULL, "tokenizer: vocabulary map full");
    size_t mask = m->cap - 1, i = q_fnv1a(Q_FNV_OFFSET, key, len) & mask;
    while (m->keys[i]) {
        if (m->key_len[i] == len && memcmp(m->keys[i], key, len) == 0) return Q_OK;
        i = (i + 1) & mask;
    }
    m->keys[i] = key;
    m->key_len[i] = (uint32_t)len;
    m->vals[i] = val;
    m->n++;
    return Q_OK;
}

int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len) {
    if (!m->cap) return -1;
    size_t mask = m->cap - 1, i = q_fnv1a(Q_FNV_OFFSET, key, len) & mask;
    while (m->keys[i]) {
        if (m->key_len[i] == len && memcmp(m->keys[i], key, len) == 0) return m->vals[i];
        i = (i + 1) & mask;
    }
    return -1;
}

static uint64_t pair_key(int32_t a, int32_t b) {
    return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
}

static size_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

qstatus tok_pairmap_init(tok_pairmap *m, size_t n_expected) {
    memset(m, 0, sizeof *m);
    m->cap = pow2_at_least(n_expected * 2 + 1);
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->rank = malloc(m->cap * sizeof *m->rank);
    m->merged = malloc(m->cap * sizeof *m->merged);
    if (!m->keys || !m->rank || !m->merged) {
        tok_pairmap_fini(m);
        return q_fail(Q_ENOMEM, "tokenizer: out of memory (merge map)");
    }
    return Q_OK;
}

void tok_pairmap_fini(tok_pairmap *m) {
    free(m->keys);
    free(m->rank);
    free(m->merged);
    memset(m, 0, sizeof *m);
}

void tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    uint64_t k = pair_key(a, b);
    size_t mask = m->cap - 1, i = pair_hash(k) & mask;
    while (m->keys[i] && m->keys[i] != k) i = (i + 1) & mask;
    m->keys[i] = k;
    m->rank[i] = rank;
    m->merged[i] = merged;
}

int tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *merged) {
    uint64_t k = pair_key(a, b);
    size_t mask = m->cap - 1, i = pair_hash(k) & mask;
    while (m->keys[i]) {
        if (m->keys[i] == k) {
            *rank = m->rank[i];
            *merged = m->merged[i];
            return 1;
        }
        i = (i + 1) & mask;
    }
    return 0;
}

/* ---------- byte-level map ---------- */

/* GPT-2's table: printable Latin-1 bytes (! .. ~, ¡ .. ¬, ® .. ÿ) stand for themselves; the other
 * 68 bytes take code points 256, 257, ... in byte order (so ' ' = 0x20 -> U+0120 'Ġ'). */
static int byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

/* The 68 other bytes in order: 0x00-0x20 (33), 0x7F-0xA0 (34), 0xAD (1). */
uint32_t tok_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    if (b <= 0x20) return 256u + b;
    if (b <= 0xA0) return 256u + 33u + (b - 0x7Fu);
    return 256u + 67u; /* 0xAD */
}

int tok_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp < 256 + 33) return (int)(cp - 256);
    if (cp < 256 + 67) return (int)(cp - 256 - 33 + 0x7F);
    return cp == 256 + 67 ? 0xAD : -1;
}

/* ---------- BPE ---------- */

typedef struct sym {
    int32_t id;
    int32_t prev, next; /* positions; -1 = none */
    int32_t len;        /* bytes covered; 0 = merged into its left neighbour */
} sym;

typedef struct merge_ent {
    int32_t rank, pos, merged;
} merge_ent;

void tok_bpe_scratch_fini(tok_bpe_scratch *s) {
    free(s->sym);
    free(s->heap);
    memset(s, 0, sizeof *s);
}

static int ent_less(const merge_ent *a, const merge_ent *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(merge_ent *h, size_t *n, merge_ent e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ent_less(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static merge_ent heap_pop(merge_ent *h, size_t *n) {
    merge_ent top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const merge_ent *best = &last;
        if (l < *n && ent_less(&h[l], best)) { m = l; best = &h[l]; }
        if (r < *n && ent_less(&h[r], best)) { m = r; }
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (*n > 0) h[i] = last;
    return top;
}

static qstatus push_ids(int32_t **ids, size_t *n_ids, size_t *cap, size_t extra) {
    if (*n_ids + extra <= *cap) return Q_OK;
    size_t c = *cap ? *cap : 64;
    while (c < *n_ids + extra) c *= 2;
    int32_t *p = realloc(*ids, c * sizeof *p);
    if (!p) return q_fail(Q_ENOMEM, "tokenizer: out of memory (%zu ids)", c);
    *ids = p;
    *cap = c;
    return Q_OK;
}

qstatus tok_bpe_word(const qtokenizer *tok, tok_bpe_scratch *s, const uint8_t *w, size_t n,
                     int32_t **ids, size_t *n_ids, size_t *cap_ids) {
    if (n == 0) return Q_OK;
    if (n > INT32_MAX / 2) return q_fail(Q_EINVAL, "tokenizer: piece of %zu bytes too long", n);
    if (tok->ignore_merges) {
        /* model.ignore_merges: a piece that is itself a vocabulary entry is one token. */
        char buf[1024];
        size_t k = 0;
        for (size_t i = 0; i < n && k + 2 <= sizeof buf; i++) k += (size_t)tok_utf8_put(tok_byte_to_cp(w[i]), buf + k);
        int32_t id = k + 2 <= sizeof buf ? tok_strmap_get(&tok->vocab, buf, k) : -1;
        if (id >= 0) {
            Q_TRY(push_ids(ids, n_ids, cap_ids, 1));
            (*ids)[(*n_ids)++] = id;
            return Q_OK;
        }
    }
    if (s->cap_sym < n) {
        size_t c = n < 64 ? 64 : n;
        sym *p = realloc(s->sym, c * sizeof *p);
        merge_ent *h = realloc(s->heap, 2 * c * sizeof *h);
        if (p) s->sym = p;
        if (h) s->heap = h;
        if (!p || !h) return q_fail(Q_ENOMEM, "tokenizer: out of memory (BPE of %zu bytes)", n);
        s->cap_sym = c;
        s->cap_heap = 2 * c;
    }
    sym *sy = s->sym;
    merge_ent *heap = s->heap;
    /* One symbol per byte; a byte missing from the vocabulary is dropped (HF: no unk token). */
    int32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = tok->byte_id[w[i]];
        if (id < 0) continue;
        sy[m] = (sym){id, m - 1, m + 1, 1};
        m++;
    }
    if (m == 0) return Q_OK;
    sy[m - 1].next = -1;
    size_t nh = 0;
    int32_t rank, merged;
    for (int32_t i = 0; i + 1 < m; i++)
        if (tok_pairmap_get(&tok->merges, sy[i].id, sy[i + 1].id, &rank, &merged))
            heap_push(heap, &nh, (merge_ent){rank, i, merged});
    while (nh > 0) {
        merge_ent top = heap_pop(heap, &nh);
        sym *cur = &sy[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        sym *right = &sy[cur->next];
        if (!tok_pairmap_get(&tok->merges, cur->id, right->id, &rank, &merged) ||
            merged != top.merged)
            continue; /* stale entry */
        cur->id = merged;
        cur->len += right->len;
        right->len = 0;
        cur->next = right->next;
        if (cur->next >= 0) sy[cur->next].prev = top.pos;
        /* Each merge removes a symbol and pushes at most two entries; the heap never exceeds
         * (n - 1) + 2 * (n - 1) < 3n, but stale entries are popped before pushes, so 2n holds:
         * every live pair has at most one entry plus one stale per merge. Guard anyway. */
        if (nh + 2 > s->cap_heap) {
            merge_ent *h = realloc(s->heap, 2 * s->cap_heap * sizeof *h);
            if (!h) return q_fail(Q_ENOMEM, "tokenizer: out of memory (BPE queue)");
            s->heap = heap = h;
            s->cap_heap *= 2;
        }
        if (cur->prev >= 0 &&
            tok_pairmap_get(&tok->merges, sy[cur->prev].id, cur->id, &rank, &merged))
            heap_push(heap, &nh, (merge_ent){rank, cur->prev, merged});
        if (cur->next >= 0 &&
            tok_pairmap_get(&tok->merges, cur->id, sy[cur->next].id, &rank, &merged))
            heap_push(heap, &nh, (merge_ent){rank, top.pos, merged});
    }
    size_t out = 0;
    for (int32_t i = 0; i >= 0; i = sy[i].next) out++;
    Q_TRY(push_ids(ids, n_ids, cap_ids, out));
    for (int32_t i = 0; i >= 0; i = sy[i].next) (*ids)[(*n_ids)++] = sy[i].id;
    return Q_OK;
}
