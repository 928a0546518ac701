/* tokenizer.h: the checkpoint's own tokenizer.json (byte-level BPE), encode and decode.
 * (Implementation: the files of src/tokenizer. The function names below are the contract other layers use.) */
#ifndef QUILL_TOKENIZER_H
#define QUILL_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "../util/status.h"

typedef struct qtokenizer qtokenizer;

/* Loads `path`: a tokenizer.json file, or a directory holding one. Owned; free with tok_free.
 * Malformed input fails with Q_EFORMAT naming the file and the field. */
qstatus tok_load(const char *path, qtokenizer **out);
void tok_free(qtokenizer *tok);

/* Encodes n bytes of text (any bytes: each maximal invalid UTF-8 subpart becomes U+FFFD first, as
 * Python's bytes.decode('utf-8', errors='replace') presents such bytes to HF). parse_special = 1:
 * match added tokens' strings (special or not) as tokens, as HF's encode does by default;
 * parse_special = 0: special added tokens are encoded as plain text, non-special added tokens
 * (Qwen's <think>, <tool_call>) are still matched (HF split_special_tokens=True).
 * *ids is owned (free(); never NULL on success, also for n_ids == 0). Thread-safe. */
qstatus tok_encode(const qtokenizer *tok, const char *text, size_t n, int parse_special,
                   int32_t **ids, size_t *n_ids);

/* Decodes ids to text (owned, NUL-terminated; *n_out without the NUL). skip_special drops special
 * added tokens. Like HF, bytes that do not form valid UTF-8 (a character cut by the last id) come
 * out as U+FFFD; stream with detok.h to hold them back instead. Ids out of range fail with Q_EINVAL
 * naming the id. */
qstatus tok_decode(const qtokenizer *tok, const int32_t *ids, size_t n, int skip_special,
                   char **out, size_t *n_out);

/* Id of a token given as its vocabulary string (e.g. "<|im_end|>"), or -1. */
int32_t tok_token_id(const qtokenizer *tok, const char *token);
/* Number of ids (base vocabulary plus added tokens). */
int tok_n_vocab(const qtokenizer *tok);
int tok_is_special(const qtokenizer *tok, int32_t id);

/* The bytes id decodes to (borrowed, valid while tok lives; not NUL-terminated; may be part of a
 * UTF-8 character). Fails with Q_EINVAL for an id that is not a token. */
qstatus tok_token_bytes(const qtokenizer *tok, int32_t id, const char **bytes, size_t *n);
/* The token's string as tokenizer.json spells it (byte-level form, e.g. "Ġthe"), or NULL. Borrowed. */
const char *tok_token_str(const qtokenizer *tok, int32_t id);

/* Classifies the bytes at s[0..n), n > 0 (utf8.c): > 0 the length of a valid UTF-8 character; 0 when s[0..n)
 * is a proper prefix of a valid character (more bytes could complete it); < 0 the negated length of the
 * maximal invalid subpart, which becomes one U+FFFD (Unicode 3.9, Python, Rust lossy). */
int tok_utf8_next(const uint8_t *s, size_t n);

#endif
