/* pretok.c: the normalizer (NFC via utf8proc) and the split pre-tokenizer (PCRE2).
 *
 * HF `tokenizers` runs Split regexes with Oniguruma. PCRE2 with PCRE2_UTF | PCRE2_UCP agrees with it
 * on \p{L}, \p{N}, \p{M}, (?i:...) (Unicode case folding: "'S" and "'s" both match) and lookahead,
 * but not on \s: Oniguruma's Unicode \s is [\t\n\v\f\r\x{85}] plus \p{Z}, while PCRE2 10.42's UCP
 * \s also takes U+180E (MONGOLIAN VOWEL SEPARATOR, a format character since Unicode 6.3), so "!\u180e"
 * would split differently. So \s / \S outside a class, and \s inside one, are rewritten to
 * Oniguruma's set (tests/unit/tokenizer/test_pretok.c holds HF's splits of such texts).
 * (\S inside a class is left to PCRE2; no known tokenizer uses it.)
 * Behavior "Isolated" keeps every match and every gap between matches as its own piece, so the
 * `invert` flag changes nothing for it.
 * Invariants: input is valid UTF-8 (tok_encode repairs it first), so matching uses
 * PCRE2_NO_UTF_CHECK. Not here: added-token splitting (tok_encode.c). */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "tok_internal.h"

#define ONIG_SPACE "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Z}"

qstatus tok_regex_compile(const char *pattern, const char *file, const char *field,
                          pcre2_code **out) {
    size_t n = strlen(pattern);
    char *t = malloc(n * 24 + 1);
    if (!t) return q_fail(Q_ENOMEM, "%s: out of memory (%s)", file, field);
    size_t k = 0;
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = pattern[i];
        if (c == '\\' && i + 1 < n) {
            char d = pattern[i + 1];
            if (d == 's' || (d == 'S' && !in_class)) {
                const char *rep = in_class ? ONIG_SPACE
                                  : d == 's' ? "[" ONIG_SPACE "]"
                                             : "[^" ONIG_SPACE "]";
                memcpy(t + k, rep, strlen(rep));
                k += strlen(rep);
            } else {
                t[k++] = c;
                t[k++] = d;
            }
            i++;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
            t[k++] = c;
            /* A ']' right after '[' or '[^' is a literal. */
            if (i + 1 < n && pattern[i + 1] == '^') t[k++] = pattern[++i];
            if (i + 1 < n && pattern[i + 1] == ']') t[k++] = pattern[++i];
            continue;
        }
        if (c == '[' && in_class && i + 1 < n && pattern[i + 1] == ':') {
            const char *end = strstr(pattern + i + 2, ":]");
            if (end) {
                size_t len = (size_t)(end + 2 - (pattern + i));
                memcpy(t + k, pattern + i, len);
                k += len;
                i += len - 1;
                continue;
            }
        }
        if (c == ']' && in_class) in_class = 0;
        t[k++] = c;
    }
    t[k] = '\0';
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)t, k, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
    free(t);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return q_fail(Q_EFORMAT, "%s: %s: bad regex \"%s\": %s", file, field, pattern, (char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* failure leaves the interpreter: still correct */
    *out = re;
    return Q_OK;
}

qstatus tok_nfc(const char *s, size_t n, char **owned, const char **out, size_t *n_out) {
    *owned = NULL;
    size_t i = 0;
    /* ASCII characters are NFC-stable and never compose with each other (composition needs a
     * combining mark, U+0300 and up), so all-ASCII text is already NFC: skip utf8proc. */
    while (i < n && (unsigned char)s[i] < 0x80) i++;
    if (i == n) {
        *out = s;
        *n_out = n;
        return Q_OK;
    }
    utf8proc_uint8_t *r = NULL;
    utf8proc_ssize_t len = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &r,
                                        UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (len < 0) {
        /* Input is valid UTF-8, so only allocation can fail here. */
        return q_fail(len == UTF8PROC_ERROR_NOMEM ? Q_ENOMEM : Q_EINVAL,
                      "tokenizer: NFC normalization failed: %s", utf8proc_errmsg(len));
    }
    *owned = (char *)r;
    *out = (const char *)r;
    *n_out = (size_t)len;
    return Q_OK;
}

/* Splits s[0..n) with regex k and hands the pieces to regex k + 1 (or to fn after the last). */
static qstatus split_level(const qtokenizer *tok, pcre2_match_data **md, int k, const char *s,
                           size_t n, tok_piece_fn fn, void *ctx) {
    if (n == 0) return Q_OK;
    if (k == tok->n_split) return fn(ctx, s, n);
    pcre2_code *re = tok->split_re[k];
    size_t pos = 0, gap = 0;
    while (pos <= n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md[k], NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return q_fail(Q_EINVAL, "tokenizer: split regex failed: %s", (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md[k]);
        size_t a = ov[0], b = ov[1];
        if (b == a) {
            /* Empty match: no piece; step over one character. */
            if (a >= n) break;
            pos = a + 1;
            while (pos < n && ((unsigned char)s[pos] & 0xC0) == 0x80) pos++;
            continue;
        }
        if (a > gap) Q_TRY(split_level(tok, md, k + 1, s + gap, a - gap, fn, ctx));
        Q_TRY(split_level(tok, md, k + 1, s + a, b - a, fn, ctx));
        gap = pos = b;
    }
    if (gap < n) Q_TRY(split_level(tok, md, k + 1, s + gap, n - gap, fn, ctx));
    return Q_OK;
}

qstatus tok_pretokenize(const qtokenizer *tok, pcre2_match_data **md, const char *s, size_t n,
                        tok_piece_fn fn, void *ctx) {
    return split_level(tok, md, 0, s, n, fn, ctx);
}
