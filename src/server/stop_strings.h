/* stop_strings.h: cutting a reply at the first stop string, as text streams out token by token.
 * Text that could be the start of a stop string is held back until the next text decides it, so a
 * stop string split across tokens still stops and no byte of a matched stop string is ever sent.
 * Not here: telling the engine (completion.c calls engine_cancel(r, QFINISH_STOP) on a match). */
#ifndef QUILL_STOP_STRINGS_H
#define QUILL_STOP_STRINGS_H

#include <stddef.h>

#include "sbuf.h"

typedef struct qstop {
    const char *const *stops; /* borrowed; non-empty strings */
    int n_stops;
    sbuf held;                /* a suffix of the text so far that is a proper prefix of a stop string */
    int matched;              /* write-once: 1 after a stop string was found */
} qstop;

/* Borrows stops (must outlive s). */
void stop_init(qstop *s, const char *const *stops, int n_stops);
void stop_fini(qstop *s);

/* Feeds n bytes of reply text; appends the bytes that can no longer be part of a stop string to out.
 * Returns 1 when a stop string matched (out got the text before it; the rest is dropped, and later
 * feeds add nothing), 0 otherwise, -1 when out of memory. */
int stop_feed(qstop *s, const char *text, size_t n, sbuf *out);
/* The reply ended without a match: appends the held text. Returns 0 or -1 (out of memory). */
int stop_flush(qstop *s, sbuf *out);

/* Length of the longest suffix of text[0, n) that is a proper, non-empty prefix of one of pats. */
size_t stop_partial_suffix(const char *text, size_t n, const char *const *pats, int n_pats);

#endif
