/* sbuf.c: growable byte strings (see sbuf.h). Growth doubles, so appending n bytes costs O(n). */
#include "sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int reserve(sbuf *b, size_t extra) {
    if (extra > (size_t)-1 / 2 - b->n) return -1;
    size_t need = b->n + extra + 1;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

int sbuf_add(sbuf *b, const char *s, size_t n) {
    if (reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int sbuf_adds(sbuf *b, const char *s) { return sbuf_add(b, s, strlen(s)); }

int sbuf_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (len < 0 || reserve(b, (size_t)len)) return -1;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)len + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)len;
    return 0;
}

void sbuf_consume(sbuf *b, size_t n) {
    if (n >= b->n) {
        sbuf_clear(b);
        return;
    }
    memmove(b->p, b->p + n, b->n - n);
    b->n -= n;
    b->p[b->n] = 0;
}

void sbuf_clear(sbuf *b) {
    b->n = 0;
    if (b->p) b->p[0] = 0;
}

void sbuf_free(sbuf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}
