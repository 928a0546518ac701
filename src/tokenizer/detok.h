/* detok.h: incremental detokenizer for streaming. Feed ids one at a time; each call returns the text
 * that became final, never half a UTF-8 character (a byte-level token can end inside one: the
 * emoji U+1F917 is often two tokens). detok_flush at the end returns what is still held.
 * Invariant: the concatenation of every chunk of a stream (feeds + flush) equals tok_decode of all
 * its ids with the same skip_special: bytes that can never form a character become U+FFFD as soon
 * as that is certain; a trailing incomplete character becomes U+FFFD at the flush.
 * Not thread-safe per object (one per stream); the tokenizer may be shared. */
#ifndef QUILL_DETOK_H
#define QUILL_DETOK_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

typedef struct detok detok;

/* Borrows tok (must outlive the detok). skip_special drops special added tokens. Owned *out;
 * free with detok_destroy. */
qstatus detok_create(const qtokenizer *tok, int skip_special, detok **out);
void detok_destroy(detok *d);

/* Feeds one id. *text (borrowed: valid until the next call on d; NUL-terminated) gets the new
 * final text, *n its length, often 0. An id that is not a token fails with Q_EINVAL and changes
 * nothing. */
qstatus detok_feed(detok *d, int32_t id, const char **text, size_t *n);

/* Ends the stream: returns the held bytes (an incomplete character as U+FFFD) and resets d. */
qstatus detok_flush(detok *d, const char **text, size_t *n);

/* Drops held bytes without emitting them (a new stream on the same object). */
void detok_reset(detok *d);

#endif
