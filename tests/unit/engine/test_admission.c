/* test_admission.c: K/V admission by charges (issue 6 item 4), fixture model on the CPU backend.
 * - five slots, a budget for four large requests (+ the fifth slot's first rows): the fifth large
 *   request waits although a slot is free, a small one behind it waits too (FIFO: the head blocks,
 *   no starvation), and both run once one large stream ends; the fifth's tokens equal generate()'s;
 *   committed rows never exceed the budget;
 * - a request whose charge could never fit is refused at submit, naming max_tokens or prompt;
 * - a stream never grows past its charge. */
#include <string.h>

#include "engine_fixture.h"

#define N_CTX 1024
#define GROW 16

static qengine *make(env *e, int n_parallel, int64_t budget) {
    qengine_params p = engine_params_default();
    p.n_parallel = n_parallel;
    p.n_ctx = N_CTX;
    p.prefill_chunk = 64;
    p.queue_cap = 8;
    p.kv_grow = GROW;
    p.kv_budget_rows = budget;
    qengine *eng = NULL;
    assert_ok(engine_create(e->m, &p, &eng));
    return eng;
}

static void wait_stats(qengine *eng, int running, int waiting) {
    qengine_stats st;
    for (int i = 0; i < 1000; i++) {
        engine_get_stats(eng, &st);
        if (st.running == running && st.waiting == waiting) return;
        sleep_ms(1);
    }
    fail_msg("stats: running %d waiting %d, wanted %d and %d", st.running, st.waiting, running, waiting);
}

static void test_fifth_waits(void **state) {
    env *e = *state;
    enum { BIG = 1008 }; /* 8 + 1000 rows, rounded up to 16: the streams outlast the checks */
    int32_t prompts[5][8], small[4], ref[16], got[1024];
    for (int s = 0; s < 5; s++) make_prompt(prompts[s], 8, e->V, 40u + (unsigned)s);
    make_prompt(small, 4, e->V, 49);
    qsampling sp = qsampling_default();
    int n_ref = run_alone(e, N_CTX, prompts[4], 8, 12, sp, 1, ref);
    qengine *eng = make(e, 5, 4 * BIG + GROW);
    qreq *r[5];
    for (int s = 0; s < 4; s++) r[s] = submit_req(eng, prompts[s], 8, 1000, sp, 1);
    /* The fifth is as large (charge 1008); it is compared with generate() on its first 12 tokens
     * (greedy: the first 12 of 1000 are the 12 of a 12-token run), then cancelled. */
    r[4] = submit_req(eng, prompts[4], 8, 1000, sp, 1);
    qreq *q = submit_req(eng, small, 4, 4, sp, 1); /* charge 16: would fit, but the head blocks it */
    wait_stats(eng, 4, 2);
    int rows[5], charge[5], n_busy = 0;
    qengine_memory m;
    for (int k = 0; k < 1000 && n_busy < 4; k++) { /* slot figures are published after each round */
        sleep_ms(1);
        engine_get_memory(eng, &m, rows, charge, 5);
        n_busy = 0;
        for (int i = 0; i < 5; i++) {
            n_busy += charge[i] == BIG;
            assert_true(rows[i] <= (charge[i] ? charge[i] : GROW)); /* never past the charge */
        }
    }
    assert_int_equal(n_busy, 4);
    assert_int_equal(m.kv_budget_rows, 4 * BIG + GROW);
    assert_int_equal(m.kv_committed_rows, 4 * BIG + GROW);
    qfinish fin;
    assert_int_equal(engine_next(r[4], 0, got, 1024, 0, &fin), 0);
    assert_int_equal(engine_next(q, 0, got, 1024, 0, &fin), 0);
    engine_cancel(r[0], QFINISH_CANCELLED); /* one large stream ends: the fifth, then the small, go */
    int n = 0;
    while (n < n_ref) {
        n += engine_next(r[4], n, got + n, 1024 - n, 10000, &fin);
        assert_int_equal(fin, QFINISH_NONE);
    }
    assert_true(q_hash_tokens(got, (size_t)n_ref) == q_hash_tokens(ref, (size_t)n_ref));
    n = collect(q, got, 1024, &fin);
    assert_int_equal(fin, QFINISH_LENGTH);
    assert_int_equal(n, 4);
    for (int s = 0; s < 5; s++) {
        engine_cancel(r[s], QFINISH_CANCELLED);
        collect(r[s], got, 1024, &fin);
        engine_release(r[s]);
    }
    engine_release(q);
    wait_stats(eng, 0, 0);
    engine_get_memory(eng, &m, NULL, NULL, 0);
    assert_int_equal(m.kv_committed_rows, 5 * GROW);
    m = wait_held_rows(eng, 5 * GROW);
    assert_int_equal(m.kv_held_rows, 5 * GROW);
    engine_destroy(eng);
}

static void test_never_fits(void **state) {
    env *e = *state;
    int32_t prompt[200];
    make_prompt(prompt, 200, e->V, 3);
    qengine *eng = make(e, 2, 160); /* one stream may hold 160 - 16 = 144 rows */
    qreq_params rp = {.prompt = prompt, .n_prompt = 8, .max_tokens = 150, .sampling = qsampling_default()};
    qreq *r = NULL;
    assert_int_equal(engine_submit(eng, &rp, &r), Q_EINVAL);
    assert_null(r);
    assert_non_null(strstr(q_lasterr(), "max_tokens"));
    rp.n_prompt = 150;
    rp.max_tokens = 1;
    assert_int_equal(engine_submit(eng, &rp, &r), Q_EINVAL);
    assert_true(strncmp(q_lasterr(), "prompt", 6) == 0);
    rp.n_prompt = 100; /* 100 + 40 = 140 -> 144 rows: fits exactly */
    rp.max_tokens = 40;
    rp.ignore_eos = 1;
    assert_ok(engine_submit(eng, &rp, &r));
    int32_t got[64];
    qfinish fin;
    assert_int_equal(collect(r, got, 64, &fin), 40);
    engine_release(r);
    engine_destroy(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifth_waits),
        cmocka_unit_test(test_never_fits),
    };
    return cmocka_run_group_tests(tests, env_setup, env_teardown);
}
