/* openai_response.h: the JSON and SSE text of OpenAI responses. One oai_resp per request holds what
 * every chunk repeats (id, created, model), so all chunks of a stream carry the same id and created.
 * Text passed in must be valid UTF-8 (reply.c guarantees it); bytes that are not are replaced by
 * U+FFFD rather than failing. Not here: when to send what (completion.c). */
#ifndef QUILL_OPENAI_RESPONSE_H
#define QUILL_OPENAI_RESPONSE_H

#include <stddef.h>
#include <stdint.h>

#include "openai_request.h"
#include "sbuf.h"

typedef struct oai_resp {
    int is_chat;
    char id[48];          /* "chatcmpl-<16 hex>" or "cmpl-<16 hex>" */
    long long created;    /* unix seconds */
    char model[128];
    int include_usage;    /* stream: "usage": null on each chunk, then a usage chunk */
} oai_resp;

/* A reply's totals, for usage and the final chunk. */
typedef struct oai_usage {
    int prompt_tokens, completion_tokens;
    uint64_t hash;        /* q_hash_tokens of the completion's ids: "quill": {"completion_hash"} */
} oai_usage;

void oai_resp_init(oai_resp *r, int is_chat, const char *model, uint64_t serial, long long created);

/* Non-stream body. reasoning may be NULL (no reasoning_content field). finish: "stop" | "length".
 * Returns 0, -1 when out of memory. */
int oai_response_body(sbuf *out, const oai_resp *r, const char *content, size_t n, const char *reasoning,
                      size_t rn, const char *finish, const oai_usage *u);

/* One SSE event `data: {chunk}\n\n`. role: 1 on the first chunk of a chat stream. content/reasoning:
 * NULL to leave the field out. finish: NULL (null) until the last chunk; u: non-NULL on the last
 * chunk only, to attach the completion hash. */
int oai_sse_chunk(sbuf *out, const oai_resp *r, int role, const char *content, size_t n, const char *reasoning,
                  size_t rn, const char *finish, const oai_usage *u);
/* The include_usage chunk: choices [] and the totals. */
int oai_sse_usage(sbuf *out, const oai_resp *r, const oai_usage *u);
int oai_sse_error(sbuf *out, const oai_error *e);
int oai_sse_done(sbuf *out);

/* {"error": {"message", "type", "param", "code": null}}. type: invalid_request_error for 4xx,
 * server_error for 5xx. */
int oai_error_body(sbuf *out, const oai_error *e);

/* Appends n bytes as UTF-8, replacing each invalid byte by U+FFFD. */
int oai_utf8_sanitize(sbuf *out, const char *s, size_t n);
/* Length of the longest prefix of s[0, n) that does not end inside an incomplete (but so far valid)
 * UTF-8 sequence: the bytes after it may still become a character. */
size_t oai_utf8_complete_prefix(const char *s, size_t n);

#endif
