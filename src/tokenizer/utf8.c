/* utf8.c: UTF-8 classification and lossy repair for the tokenizer.
 *
 * One policy everywhere: a maximal invalid subpart (Unicode 15, section 3.9, "U+FFFD substitution of
 * maximal subparts") becomes one U+FFFD. That is what Python's bytes.decode('utf-8',
 * errors='replace') does to encode input (the goldens feed transformers such strings) and what Rust's
 * String::from_utf8_lossy does in HF's decoder, so encode and decode both match HF.
 * Example: "\xF0\x9F\x98" (a cut emoji) is one U+FFFD; "\xC0\x80" is two (C0 is never a lead byte).
 * Not here: normalization (pretok.c). */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

int tok_utf8_next(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    int len;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return -1; /* 80..C1, F5..FF: never a lead byte */
    }
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return 0; /* cut short: could still complete */
        uint8_t b = s[i];
        uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) return -i;
    }
    return len;
}

uint32_t tok_utf8_cp(const uint8_t *s, int len) {
    switch (len) {
    case 1: return s[0];
    case 2: return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
               ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
}

int tok_utf8_put(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

qstatus tok_utf8_lossy(const uint8_t *s, size_t n, int final, char **out, size_t *n_out,
                       size_t *used) {
    /* Worst case: every byte becomes a 3-byte U+FFFD. */
    if (n > (SIZE_MAX - 1) / 3) return q_fail(Q_ENOMEM, "tokenizer: text of %zu bytes too large", n);
    char *o = malloc(3 * n + 1);
    if (!o) return q_fail(Q_ENOMEM, "tokenizer: out of memory (%zu bytes)", 3 * n + 1);
    size_t i = 0, k = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            o[k++] = (char)s[i++];
            continue;
        }
        int r = tok_utf8_next(s + i, n - i);
        if (r > 0) {
            memcpy(o + k, s + i, (size_t)r);
            k += (size_t)r;
            i += (size_t)r;
        } else if (r == 0 && !final) {
            break; /* incomplete tail: wait for more bytes */
        } else {
            size_t bad = r == 0 ? n - i : (size_t)-r;
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i += bad;
        }
    }
    o[k] = '\0';
    *out = o;
    *n_out = k;
    if (used) *used = i;
    return Q_OK;
}
