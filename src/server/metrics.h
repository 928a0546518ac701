/* metrics.h: counters and histograms for GET /metrics (Prometheus text format 0.0.4). Safe to call
 * from any thread. Not here: the engine's own counters (engine_get_stats), which metrics_render reads. */
#ifndef QUILL_METRICS_H
#define QUILL_METRICS_H

#include "../engine/engine.h"
#include "sbuf.h"

typedef struct qmetrics qmetrics;

/* Owned; free with metrics_destroy. */
qstatus metrics_create(qmetrics **out);
void metrics_destroy(qmetrics *m);

/* One HTTP request answered with this status. */
void metrics_request(qmetrics *m, int http_status);
/* One reply finished: its token counts, time to first token and decode time (first to last token). */
void metrics_reply(qmetrics *m, int prompt_tokens, int completion_tokens, double ttft_s, double decode_s);

/* Appends the whole exposition; st (may be NULL) adds running/waiting streams and engine throughput. */
int metrics_render(qmetrics *m, const qengine_stats *st, sbuf *out);

#endif
