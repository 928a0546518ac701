/* reasoning.h: splitting a reply into reasoning_content and content. When the rendered prompt opened a
 * think block (it ends with "<think>\n", as Qwen3.5's template does unless enable_thinking is false),
 * the reply's text up to "</think>" is reasoning and the rest is content; otherwise all of it is
 * content. Partial "</think>" at the end of a feed is held back until the next feed decides it. */
#ifndef QUILL_REASONING_H
#define QUILL_REASONING_H

#include <stddef.h>

#include "sbuf.h"

#define REASON_OPEN "<think>\n"
#define REASON_CLOSE "</think>"

typedef struct qreason {
    int in_think;   /* 1 until "</think>" is seen */
    int strip_nl;   /* 1 right after "</think>": newlines before the content are dropped */
    sbuf held;      /* a proper prefix of "</think>" at the end of the reasoning so far */
} qreason;

/* opened: 1 when the prompt ended with REASON_OPEN. */
void reason_init(qreason *r, int opened);
void reason_fini(qreason *r);
/* 1 when the prompt text (n bytes) ends with REASON_OPEN. */
int reason_prompt_opened(const char *prompt_tail, size_t n);

/* Appends the reply text's reasoning part to reasoning and the rest to content. 0 or -1 (no memory). */
int reason_feed(qreason *r, const char *text, size_t n, sbuf *reasoning, sbuf *content);
/* End of the reply: a held partial "</think>" was reasoning after all. */
int reason_flush(qreason *r, sbuf *reasoning);

#endif
