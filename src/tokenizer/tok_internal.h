/* tok_internal.h: the qtokenizer struct and the functions the tokenizer's own files share. Not for
 * other layers (they use tokenizer.h and detok.h).
 *
 * Pipeline (the order HF `tokenizers` runs, reproduced exactly):
 *   input bytes -> utf8 (invalid bytes -> U+FFFD, as Python's bytes.decode(errors='replace'))
 *   -> split on non-normalized added tokens (tok_encode.c) -> NFC on the rest (pretok.c)
 *   -> split on normalized added tokens -> split regexes (pretok.c, PCRE2)
 *   -> BPE per piece on raw bytes (bpe.c; the byte-level map is applied to the vocabulary at load,
 *      so encode never builds byte-level strings).
 * Invariants: (1) every id in [0, n_vocab) that the file names has a decoded byte string (dec_off);
 * (2) merges map (left id, right id) -> (rank, merged id) with both parts and the result in the
 * vocabulary; (3) the struct is immutable after tok_load, so encode/decode are thread-safe. */
#ifndef QUILL_TOK_INTERNAL_H
#define QUILL_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer.h"

#define TOK_MAX_SPLITS 8

/* Open-addressing map: byte string -> int32 (keys borrowed from the owner's storage). */
typedef struct tok_strmap {
    const char **keys;  /* [cap] NULL = empty slot */
    uint32_t *key_len;  /* [cap] */
    int32_t *vals;      /* [cap] */
    size_t cap;         /* power of two */
    size_t n;
} tok_strmap;

/* Open-addressing map: (left id, right id) -> (rank, merged id). */
typedef struct tok_pairmap {
    uint64_t *keys;  /* [cap] (left << 32 | right) + 1; 0 = empty */
    int32_t *rank;   /* [cap] */
    int32_t *merged; /* [cap] */
    size_t cap;
} tok_pairmap;

typedef struct tok_added {
    char *content; /* owned, NUL-terminated UTF-8 */
    size_t len;
    char *norm;    /* owned: NFC(content) when normalized, else NULL */
    size_t norm_len;
    int32_t id;
    uint8_t special, lstrip, rstrip, normalized, single_word;
} tok_added;

struct qtokenizer {
    char *path;              /* owned: the tokenizer.json read */
    int n_vocab;             /* max id + 1 over the BPE vocabulary and the added tokens */
    int n_base;              /* number of BPE vocabulary entries */
    char *str_blob;          /* owned: every token string (file form) NUL-terminated */
    uint32_t *str_off;       /* [n_vocab] offset into str_blob, UINT32_MAX = no token */
    uint8_t *dec_blob;       /* owned: every token's decoded bytes */
    uint32_t *dec_off;       /* [n_vocab + 1] dec bytes of id i: dec_blob[dec_off[i]..dec_off[i+1]) */
    uint8_t *is_special;     /* [n_vocab] 1 for special added tokens */
    tok_strmap vocab;        /* BPE token string -> id */
    tok_pairmap merges;
    int32_t byte_id[256];    /* id of the one-byte symbol, -1 when the vocabulary lacks it */
    int ignore_merges;       /* model.ignore_merges: a whole word in the vocabulary wins */
    tok_added *added;        /* [n_added] */
    int n_added;
    int32_t *added_first;    /* [257] added_order[added_first[b] .. added_first[b + 1]) start with byte b */
    int32_t *added_order;    /* [n_added] indexes into added, by first byte of the raw content */
    int nfc;                 /* normalizer: 1 = NFC */
    pcre2_code *split_re[TOK_MAX_SPLITS]; /* owned; applied in order (Split, or ByteLevel's regex) */
    int n_split;
};

/* --- maps (bpe.c) --- */
qstatus tok_strmap_init(tok_strmap *m, size_t n_expected);
void tok_strmap_fini(tok_strmap *m);
/* Inserts key (borrowed) unless present; returns Q_OK either way. */
qstatus tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val);
int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len); /* -1 if absent */
qstatus tok_pairmap_init(tok_pairmap *m, size_t n_expected);
void tok_pairmap_fini(tok_pairmap *m);
/* A later insert of the same pair overwrites (HF builds its merge map the same way). */
void tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged);
int tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *merged);

/* --- byte-level map (bpe.c) --- */
/* The GPT-2 byte -> code point table, and its inverse (-1 for code points not in the table). */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);

/* --- BPE (bpe.c) --- */
/* Scratch reused across words of one encode call (owned by the caller; fini frees). */
typedef struct tok_bpe_scratch {
    void *sym;   /* symbols */
    void *heap;  /* merge queue */
    size_t cap_sym, cap_heap;
} tok_bpe_scratch;
void tok_bpe_scratch_fini(tok_bpe_scratch *s);
/* BPE on one pre-tokenized piece of raw bytes. Appends ids to *ids (grown with realloc). */
qstatus tok_bpe_word(const qtokenizer *tok, tok_bpe_scratch *s, const uint8_t *w, size_t n,
                     int32_t **ids, size_t *n_ids, size_t *cap_ids);

/* --- UTF-8 (utf8.c) --- */
/* tok_utf8_next: tokenizer.h (the server's response text uses it too). */
/* Copies s[0..n) with each maximal invalid subpart replaced by U+FFFD. final = 0 leaves a trailing
 * incomplete character unconsumed (*used < n). Owned *out (NUL-terminated), *n_out. */
qstatus tok_utf8_lossy(const uint8_t *s, size_t n, int final, char **out, size_t *n_out,
                       size_t *used);
/* Decodes the code point of a valid character of length len. */
uint32_t tok_utf8_cp(const uint8_t *s, int len);
int tok_utf8_put(uint32_t cp, char *out); /* writes 1..4 bytes, returns the count */

/* --- normalizer and pre-tokenizer (pretok.c) --- */
/* Compiles a tokenizer.json Split regex (Oniguruma syntax) for PCRE2, translating where the engines
 * differ. `field` names the JSON field for errors. */
qstatus tok_regex_compile(const char *pattern, const char *file, const char *field,
                          pcre2_code **out);
/* NFC of valid UTF-8 s[0..n). Returns s itself (and *owned = NULL) when it is already NFC-stable
 * cheaply (ASCII); else an owned buffer in *owned. */
qstatus tok_nfc(const char *s, size_t n, char **owned, const char **out, size_t *n_out);

/* Callback for each pre-tokenized piece. */
typedef qstatus (*tok_piece_fn)(void *ctx, const char *s, size_t n);
/* Runs the split regexes over valid UTF-8 s[0..n) and calls fn for each non-empty piece in order. */
qstatus tok_pretokenize(const qtokenizer *tok, pcre2_match_data **md, const char *s, size_t n,
                        tok_piece_fn fn, void *ctx);

#endif
