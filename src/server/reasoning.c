/* reasoning.c: the think-block split (see reasoning.h).
 *
 * Example: prompt "...<|im_start|>assistant\n<think>\n", reply tokens "Let me", " see.</th", "ink>\n\n",
 * "Hi" -> reasoning "Let me see." (the "</th" is held, then recognised), content "Hi" (the newlines
 * after "</think>" are dropped: they are template spacing, not the answer). A reply that never closes
 * the block (max_tokens hit while thinking) is all reasoning. Not here: stop strings (applied before
 * this split, to the whole reply text, as vLLM does). */
#include "reasoning.h"

#include <string.h>

#include "stop_strings.h"

void reason_init(qreason *r, int opened) {
    memset(r, 0, sizeof *r);
    r->in_think = opened;
}

void reason_fini(qreason *r) {
    if (r) sbuf_free(&r->held);
}

int reason_prompt_opened(const char *tail, size_t n) {
    size_t k = strlen(REASON_OPEN);
    return n >= k && !memcmp(tail + n - k, REASON_OPEN, k);
}

static int add_content(qreason *r, const char *t, size_t n, sbuf *content) {
    if (r->strip_nl) {
        while (n && (*t == '\n' || *t == '\r')) t++, n--;
        if (n) r->strip_nl = 0;
    }
    return sbuf_add(content, t, n);
}

int reason_feed(qreason *r, const char *text, size_t n, sbuf *reasoning, sbuf *content) {
    if (!r->in_think) return add_content(r, text, n, content);
    if (sbuf_add(&r->held, text, n)) return -1;
    const char *t = r->held.p;
    size_t tn = r->held.n, cl = strlen(REASON_CLOSE);
    for (size_t p = 0; p + cl <= tn; p++) {
        if (!memcmp(t + p, REASON_CLOSE, cl)) {
            if (sbuf_add(reasoning, t, p)) return -1;
            r->in_think = 0;
            r->strip_nl = 1;
            int rc = add_content(r, t + p + cl, tn - p - cl, content);
            sbuf_clear(&r->held);
            return rc;
        }
    }
    static const char *const close[] = {REASON_CLOSE};
    size_t keep = stop_partial_suffix(t, tn, close, 1);
    if (sbuf_add(reasoning, t, tn - keep)) return -1;
    sbuf_consume(&r->held, tn - keep);
    return 0;
}

int reason_flush(qreason *r, sbuf *reasoning) {
    if (!r->in_think || r->held.n == 0) return 0;
    int rc = sbuf_add(reasoning, r->held.p, r->held.n);
    sbuf_clear(&r->held);
    return rc;
}
