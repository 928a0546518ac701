/* engine_fixture.h: what the engine's memory tests share: the golden fixture model on the CPU
 * backend, deterministic prompts, the reference run through generate(), reading a reply to its end,
 * and waiting for the engine thread to publish a memory figure. Header-only (static functions). */
#ifndef QUILL_TEST_ENGINE_FIXTURE_H
#define QUILL_TEST_ENGINE_FIXTURE_H

#include <stdio.h>
#include <time.h>

#include "engine/engine.h"
#include "engine/generate.h"
#include "harness.h"
#include "util/hash.h"

typedef struct env {
    qbackend *be;
    qwen35_model *m;
    int V;
} env;

static inline int env_setup(void **state) {
    static env e;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/gqa4-v2k", QUILL_FIXTURES);
    if (cpu_backend_create(0, &e.be) != Q_OK) return -1;
    if (qwen35_open(dir, e.be, &e.m) != Q_OK) {
        fprintf(stderr, "%s\n", q_lasterr());
        e.be->ops->destroy(e.be);
        return -1;
    }
    e.V = e.m->cfg.vocab_size;
    *state = &e;
    return 0;
}

static inline int env_teardown(void **state) {
    env *e = *state;
    qwen35_close(e->m);
    e->be->ops->destroy(e->be);
    return 0;
}

static inline void make_prompt(int32_t *ids, int n, int V, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        ids[i] = (int32_t)((seed >> 8) % (unsigned)V);
    }
}

/* The reference: one stream through generate() in a whole-context state, eos excluded as the engine
 * hands it over. */
static inline int run_alone(env *e, int n_ctx, const int32_t *prompt, int n_prompt, int max_tokens, qsampling sp,
                     int ignore_eos, int32_t *out) {
    qwen35_state *st = NULL;
    assert_ok(qwen35_state_create(e->m, n_ctx, &st));
    qgen_params gp = {.n_predict = max_tokens, .prefill_chunk = 64, .ignore_eos = ignore_eos, .sampling = sp};
    qgen_result res;
    assert_ok(generate(e->m, st, prompt, n_prompt, &gp, out, NULL, &res));
    qwen35_state_destroy(e->m, st);
    return res.n_tokens - res.stopped_eos;
}

/* Reads every token of r until it finishes. */
static inline int collect(qreq *r, int32_t *buf, int cap, qfinish *fin) {
    int n = 0;
    *fin = QFINISH_NONE;
    while (*fin == QFINISH_NONE) {
        n += engine_next(r, n, buf + n, cap - n, 10000, fin);
        if (n == cap && *fin == QFINISH_NONE) {
            assert_int_equal(engine_next(r, n, NULL, 0, 10000, fin), 0);
            assert_int_not_equal(*fin, QFINISH_NONE);
        }
    }
    return n;
}

static inline qreq *submit_req(qengine *eng, const int32_t *prompt, int n_prompt, int max_tokens, qsampling sp,
                        int ignore_eos) {
    qreq_params rp = {.prompt = prompt, .n_prompt = n_prompt, .max_tokens = max_tokens, .sampling = sp,
                      .ignore_eos = ignore_eos};
    qreq *r = NULL;
    assert_ok(engine_submit(eng, &rp, &r));
    return r;
}

static inline void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits (up to 10 s) until the engine reports kv_held_rows == rows; returns the last snapshot. */
static inline qengine_memory wait_held_rows(qengine *eng, int64_t rows) {
    qengine_memory m;
    for (int i = 0; i < 1000; i++) {
        engine_get_memory(eng, &m, NULL, NULL, 0);
        if (m.kv_held_rows == rows) break;
        sleep_ms(10);
    }
    return m;
}

#endif
