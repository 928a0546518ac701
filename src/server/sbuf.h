/* sbuf.h: a growable byte string, always NUL-terminated once anything was added. The server builds
 * text deltas and response bodies in these. An allocation failure is a return value (-1); the buffer
 * keeps what it had. */
#ifndef QUILL_SBUF_H
#define QUILL_SBUF_H

#include <stddef.h>

typedef struct sbuf {
    char *p;    /* owned; NULL until the first add */
    size_t n;   /* bytes, without the NUL */
    size_t cap;
} sbuf;

int sbuf_add(sbuf *b, const char *s, size_t n);
int sbuf_adds(sbuf *b, const char *s);
int sbuf_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drops the first n bytes. */
void sbuf_consume(sbuf *b, size_t n);
void sbuf_clear(sbuf *b);
void sbuf_free(sbuf *b);

#endif
