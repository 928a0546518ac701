/* stop_strings.c: stop-string matching with hold-back (see stop_strings.h).
 *
 * Invariant: `held` never contains a whole stop string, and it is at most (longest stop - 1) bytes, so
 * each feed searches at most that much old text plus the new text. Example: stops ["END"], tokens
 * "xE", "N", "D!" -> feed 1 sends "x" and holds "E"; feed 2 holds "EN"; feed 3 finds "END" at 0, sends
 * nothing more and reports the match ("!" is dropped). The earliest match over all stop strings wins
 * (vLLM's rule), so ["B", "AB"] on "xAB" stops before "AB". */
#include "stop_strings.h"

#include <string.h>

void stop_init(qstop *s, const char *const *stops, int n_stops) {
    memset(s, 0, sizeof *s);
    s->stops = stops;
    s->n_stops = n_stops;
}

void stop_fini(qstop *s) {
    if (s) sbuf_free(&s->held);
}

size_t stop_partial_suffix(const char *text, size_t n, const char *const *pats, int n_pats) {
    size_t best = 0;
    for (int i = 0; i < n_pats; i++) {
        size_t len = strlen(pats[i]);
        size_t k = len - 1 < n ? len - 1 : n; /* proper prefix */
        for (; k > best; k--) {
            if (!memcmp(text + n - k, pats[i], k)) {
                best = k;
                break;
            }
        }
    }
    return best;
}

int stop_feed(qstop *s, const char *text, size_t n, sbuf *out) {
    if (s->matched) return 1;
    if (s->n_stops == 0) return sbuf_add(out, text, n);
    if (sbuf_add(&s->held, text, n)) return -1;
    const char *t = s->held.p ? s->held.p : "";
    size_t tn = s->held.n;
    size_t first = tn; /* earliest match start */
    for (int i = 0; i < s->n_stops; i++) {
        size_t len = strlen(s->stops[i]);
        for (size_t p = 0; p + len <= tn && p < first; p++) {
            if (t[p] == s->stops[i][0] && !memcmp(t + p, s->stops[i], len)) {
                first = p;
                break;
            }
        }
    }
    if (first < tn) {
        if (sbuf_add(out, t, first)) return -1;
        s->matched = 1;
        sbuf_clear(&s->held);
        return 1;
    }
    size_t keep = stop_partial_suffix(t, tn, s->stops, s->n_stops);
    if (sbuf_add(out, t, tn - keep)) return -1;
    sbuf_consume(&s->held, tn - keep);
    return 0;
}

int stop_flush(qstop *s, sbuf *out) {
    if (s->matched || s->held.n == 0) return 0;
    if (sbuf_add(out, s->held.p, s->held.n)) return -1;
    sbuf_clear(&s->held);
    return 0;
}
