/* openai_request.h: the body of POST /v1/chat/completions and /v1/completions, parsed and validated
 * into an oai_request before anything reaches the engine. Every malformed or wrongly typed field is an
 * oai_error (HTTP 400, OpenAI error body naming the field). Not here: turning messages into prompt
 * ids (chat.h) or checking the prompt against the context (completion.c, which knows n_ctx). */
#ifndef QUILL_OPENAI_REQUEST_H
#define QUILL_OPENAI_REQUEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "../engine/sample.h"

#define OAI_MAX_STOP 16        /* stop strings per request */
#define OAI_MAX_STOP_BYTES 256 /* bytes per stop string */

/* An error for the client: HTTP status, the OpenAI "param" (field name, "" for none), a message. */
typedef struct oai_error {
    int http;           /* 400, 404, 413, 500, 503 */
    char param[64];
    char message[512];
} oai_error;

typedef struct oai_request {
    int is_chat;
    json_t *root;            /* owned: the whole body (chat_prompt_ids reads messages/tools from it) */
    json_t *messages;        /* chat: borrowed from root, a non-empty array of checked messages */
    const char *prompt_text; /* completions: borrowed from root, or NULL when given as ids */
    size_t prompt_len;
    int32_t *prompt_ids;     /* completions: owned (free via oai_request_fini), or NULL */
    int n_prompt_ids;
    int max_tokens;          /* -1: not given (the rest of the context) */
    qsampling sampling;
    int has_seed;
    char *stop[OAI_MAX_STOP]; /* owned copies */
    int n_stop;
    int stream, include_usage, ignore_eos, draft;
    json_t *chat_template_kwargs; /* borrowed from root, NULL or an object */
    char model[128];         /* what the client asked for ("" if absent); echoed back */
} oai_request;

/* Parses body (n bytes, need not be NUL-terminated). On success *req is filled (free its parts with
 * oai_request_fini); on failure *err says why and *req holds nothing. Never aborts on any input. */
int oai_request_parse(const char *body, size_t n, int is_chat, oai_request *req, oai_error *err);
void oai_request_fini(oai_request *req);

/* Fills err (printf-style message). Returns -1 so callers can `return oai_fail(...)`. */
int oai_fail(oai_error *err, int http, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
