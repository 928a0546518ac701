/* metrics.c: Prometheus exposition (see metrics.h). One mutex guards everything: it is taken once per
 * request and once per finished reply, never per token, so it cannot slow a round.
 * Buckets: TTFT 10 ms .. 60 s (CPU prefill of a long prompt takes seconds); per-token latency
 * 1 ms .. 2.5 s (CPU decode of a large model is ~100s of ms a token). */
#include "metrics.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

static const double TTFT_BUCKETS[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double TPOT_BUCKETS[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
#define N_TTFT (sizeof TTFT_BUCKETS / sizeof TTFT_BUCKETS[0])
#define N_TPOT (sizeof TPOT_BUCKETS / sizeof TPOT_BUCKETS[0])

static const int STATUSES[] = {200, 400, 404, 405, 413, 500, 503};
#define N_STATUS (sizeof STATUSES / sizeof STATUSES[0])

typedef struct hist {
    uint64_t counts[16]; /* per bucket, not cumulative; [n] is +Inf */
    uint64_t n;
    double sum;
} hist;

struct qmetrics {
    pthread_mutex_t mu;
    uint64_t requests[N_STATUS + 1]; /* [N_STATUS]: any other status */
    uint64_t prompt_tokens, completion_tokens, replies;
    hist ttft, tpot;
};

qstatus metrics_create(qmetrics **out) {
    qmetrics *m = calloc(1, sizeof *m);
    if (!m) return q_fail(Q_ENOMEM, "metrics: out of memory");
    if (pthread_mutex_init(&m->mu, NULL)) {
        free(m);
        return q_fail(Q_ENOMEM, "metrics: cannot create a mutex");
    }
    *out = m;
    return Q_OK;
}

void metrics_destroy(qmetrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void metrics_request(qmetrics *m, int http_status) {
    size_t i = 0;
    while (i < N_STATUS && STATUSES[i] != http_status) i++;
    pthread_mutex_lock(&m->mu);
    m->requests[i]++;
    pthread_mutex_unlock(&m->mu);
}

static void observe(hist *h, const double *b, size_t nb, double v) {
    size_t i = 0;
    while (i < nb && v > b[i]) i++;
    h->counts[i]++;
    h->n++;
    h->sum += v;
}

void metrics_reply(qmetrics *m, int prompt_tokens, int completion_tokens, double ttft_s, double decode_s) {
    pthread_mutex_lock(&m->mu);
    m->replies++;
    m->prompt_tokens += (uint64_t)(prompt_tokens > 0 ? prompt_tokens : 0);
    m->completion_tokens += (uint64_t)(completion_tokens > 0 ? completion_tokens : 0);
    if (completion_tokens > 0) observe(&m->ttft, TTFT_BUCKETS, N_TTFT, ttft_s);
    if (completion_tokens > 1) observe(&m->tpot, TPOT_BUCKETS, N_TPOT, decode_s / (completion_tokens - 1));
    pthread_mutex_unlock(&m->mu);
}

static int render_hist(sbuf *o, const char *name, const char *help, const hist *h, const double *b, size_t nb) {
    int bad = sbuf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t i = 0; i < nb; i++) {
        cum += h->counts[i];
        bad |= sbuf_printf(o, "%s_bucket{le=\"%g\"} %llu\n", name, b[i], (unsigned long long)cum);
    }
    bad |= sbuf_printf(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                       (unsigned long long)h->n, name, h->sum, name, (unsigned long long)h->n);
    return bad ? -1 : 0;
}

int metrics_render(qmetrics *m, const qengine_stats *st, sbuf *o) {
    pthread_mutex_lock(&m->mu);
    qmetrics c = *m; /* a consistent snapshot; render without the lock */
    pthread_mutex_unlock(&m->mu);
    int bad = sbuf_adds(o, "# HELP quill_requests_total HTTP requests answered, by status.\n"
                           "# TYPE quill_requests_total counter\n");
    for (size_t i = 0; i <= N_STATUS; i++) {
        if (i < N_STATUS)
            bad |= sbuf_printf(o, "quill_requests_total{status=\"%d\"} %llu\n", STATUSES[i],
                               (unsigned long long)c.requests[i]);
        else
            bad |= sbuf_printf(o, "quill_requests_total{status=\"other\"} %llu\n", (unsigned long long)c.requests[i]);
    }
    bad |= sbuf_printf(o,
                       "# HELP quill_prompt_tokens_total Prompt tokens of finished replies.\n"
                       "# TYPE quill_prompt_tokens_total counter\nquill_prompt_tokens_total %llu\n"
                       "# HELP quill_completion_tokens_total Completion tokens of finished replies.\n"
                       "# TYPE quill_completion_tokens_total counter\nquill_completion_tokens_total %llu\n"
                       "# HELP quill_replies_total Finished replies.\n"
                       "# TYPE quill_replies_total counter\nquill_replies_total %llu\n",
                       (unsigned long long)c.prompt_tokens, (unsigned long long)c.completion_tokens,
                       (unsigned long long)c.replies);
    bad |= render_hist(o, "quill_time_to_first_token_seconds", "Time from request to first token.", &c.ttft,
                       TTFT_BUCKETS, N_TTFT);
    bad |= render_hist(o, "quill_time_per_output_token_seconds", "Decode time per token after the first.", &c.tpot,
                       TPOT_BUCKETS, N_TPOT);
    if (st) {
        double pre = st->prefill_seconds > 0 ? (double)st->prompt_tokens / st->prefill_seconds : 0;
        double dec = st->decode_seconds > 0 ? (double)st->completion_tokens / st->decode_seconds : 0;
        bad |= sbuf_printf(o,
                           "# HELP quill_streams_running Streams holding a slot.\n"
                           "# TYPE quill_streams_running gauge\nquill_streams_running %d\n"
                           "# HELP quill_streams_waiting Requests queued for a slot.\n"
                           "# TYPE quill_streams_waiting gauge\nquill_streams_waiting %d\n"
                           "# HELP quill_prefill_tokens_per_second Prompt tokens per second of prefill forward time.\n"
                           "# TYPE quill_prefill_tokens_per_second gauge\nquill_prefill_tokens_per_second %.3f\n"
                           "# HELP quill_decode_tokens_per_second Tokens per second of decode forward time.\n"
                           "# TYPE quill_decode_tokens_per_second gauge\nquill_decode_tokens_per_second %.3f\n",
                           st->running, st->waiting, pre, dec);
    }
    return bad ? -1 : 0;
}
