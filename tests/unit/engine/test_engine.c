/* test_engine.c: continuous batching on the golden fixture model (CPU backend), ~5 s under ASan.
 * - EXACT(batch)/EXACT(chunk): 8 prompts (3..150 tokens) alone through generate() and all at once
 *   through an engine with 4 slots, prefill chunks of 64 and a queue of 16 give identical token
 *   hashes, greedy and sampled (temperature 0.8, own seeds) streams sharing rounds; the statistics
 *   add up and the streams did share rounds;
 * - short prompts share a round's prefill rows (3 rounds for prompts of 128, 9, 12 and 15 rows, chunk 64);
 * - the queue: with 1 slot and queue_cap 2 the 4th concurrent request gets Q_EFULL;
 * - cancel: a running stream ends CANCELLED at the next round, a waiting one never starts, and the
 *   freed slot's next tenant gives the same tokens as alone;
 * - end of sequence: STOP without handing the eos over; ignore_eos runs to max_tokens;
 * - a failing forward ends the batch's streams with ERROR and the slots work again afterwards;
 * - bad requests and bad engine parameters are refused naming the field;
 * - releasing before the end, and holding a request across engine_destroy, are safe (ASan);
 * - an idle engine sleeps (no CPU burnt). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "engine_fixture.h"

#define N_CTX 192

/* env, env_setup/env_teardown, make_prompt, collect and run_alone (with the context) come from the
 * fixture the engine's memory tests share. */
static int run_alone_ctx(env *e, const int32_t *prompt, int n_prompt, int max_tokens, qsampling sp,
                         int ignore_eos, int32_t *out) {
    return run_alone(e, N_CTX, prompt, n_prompt, max_tokens, sp, ignore_eos, out);
}

static qengine *make_engine(env *e, int n_parallel, int queue_cap) {
    qengine_params p = engine_params_default();
    p.n_parallel = n_parallel;
    p.n_ctx = N_CTX;
    p.prefill_chunk = 64;
    p.queue_cap = queue_cap;
    qengine *eng = NULL;
    assert_ok(engine_create(e->m, &p, &eng));
    return eng;
}

static qreq *submit(qengine *eng, const int32_t *prompt, int n_prompt, int max_tokens, qsampling sp) {
    qreq_params rp = {.prompt = prompt, .n_prompt = n_prompt, .max_tokens = max_tokens, .sampling = sp};
    qreq *r = NULL;
    assert_ok(engine_submit(eng, &rp, &r));
    return r;
}

/* ---- alone vs batched ------------------------------------------------------------------------- */

/* One engine run covers greedy and sampled streams side by side (the sampled ones at temperature 0.8
 * with their own seeds), which also checks that streams with different sampling share rounds
 * cleanly. Lengths straddle the 64-row chunk (64, 65) and span three chunks (150). Sizes are kept
 * small: under ASan a model row costs ~15 ms, and the reference runs every row a second time. */
#define N_STREAMS 8
static const int prompt_lens[N_STREAMS] = {3, 150, 17, 64, 65, 9, 70, 33};
static const int sampled[N_STREAMS] = {1, 0, 1, 0, 1, 1, 0, 1};
static uint64_t pass_hash[2][N_STREAMS]; /* per flip: shows that sampling changed the tokens */

/* flip: 0 samples the streams marked in sampled[], 1 the others, so over both runs every prompt
 * length is checked greedy and sampled. */
static void alone_vs_batched(env *e, int flip) {
    int32_t prompts[N_STREAMS][150], ref[N_STREAMS][16], got[N_STREAMS][16];
    int n_ref[N_STREAMS], max_tokens[N_STREAMS];
    qsampling sp[N_STREAMS];
    uint64_t sum_prompt = 0, sum_gen = 0, alone_forwards = 0;
    for (int s = 0; s < N_STREAMS; s++) {
        make_prompt(prompts[s], prompt_lens[s], e->V, 100u + (unsigned)s);
        max_tokens[s] = 9 + s % 4; /* long enough for T=0.8 to leave the greedy path on this model */
        sp[s] = qsampling_default();
        if (sampled[s] != flip) {
            sp[s].temperature = 0.8f;
            sp[s].top_p = 0.95f;
            sp[s].seed = 1234u + 7u * (unsigned)s + 100u * (unsigned)flip;
        }
        n_ref[s] = run_alone_ctx(e, prompts[s], prompt_lens[s], max_tokens[s], sp[s], 0, ref[s]);
        sum_prompt += (uint64_t)prompt_lens[s];
        sum_gen += (uint64_t)n_ref[s];
        alone_forwards += (uint64_t)((prompt_lens[s] + 63) / 64 + n_ref[s] - 1);
    }
    qengine *eng = make_engine(e, 4, 16);
    qreq *r[N_STREAMS];
    for (int s = 0; s < N_STREAMS; s++) r[s] = submit(eng, prompts[s], prompt_lens[s], max_tokens[s], sp[s]);
    for (int s = 0; s < N_STREAMS; s++) {
        qfinish fin;
        int n = collect(r[s], got[s], 16, &fin);
        uint64_t ha = q_hash_tokens(ref[s], (size_t)n_ref[s]), hb = q_hash_tokens(got[s], (size_t)n);
        printf("  stream %d: prompt %3d, %s, %2d tokens, alone %016llx, engine %016llx\n", s, prompt_lens[s],
               sampled[s] != flip ? "T=0.8 " : "greedy", n, (unsigned long long)ha, (unsigned long long)hb);
        assert_int_equal(n, n_ref[s]);
        assert_true(ha == hb);
        pass_hash[flip][s] = hb;
        assert_int_equal(fin, n == max_tokens[s] ? QFINISH_LENGTH : QFINISH_STOP);
        assert_true(engine_ttft(r[s]) > 0);
        assert_true(engine_decode_seconds(r[s]) >= 0);
        assert_string_equal(engine_error(r[s]), "");
        engine_release(r[s]);
    }
    qengine_stats st;
    engine_get_stats(eng, &st);
    assert_int_equal(st.running, 0);
    assert_int_equal(st.waiting, 0);
    assert_true(st.prompt_tokens == sum_prompt);
    assert_true(st.completion_tokens == sum_gen);
    assert_true(st.prefill_seconds > 0 && st.decode_seconds > 0);
    printf("  %llu rounds for what takes %llu forwards alone\n", (unsigned long long)st.rounds,
           (unsigned long long)alone_forwards);
    assert_true(st.rounds < alone_forwards); /* streams did share rounds */
    if (flip) {
        int n_differ = 0;
        for (int s = 0; s < N_STREAMS; s++) n_differ += pass_hash[0][s] != pass_hash[1][s];
        printf("  %d of %d streams differ between greedy and sampled\n", n_differ, N_STREAMS);
        assert_true(n_differ >= N_STREAMS / 2);
    }
    engine_destroy(eng);
}

static void test_alone_vs_batched(void **state) { alone_vs_batched(*state, 0); }
static void test_alone_vs_batched_flipped(void **state) { alone_vs_batched(*state, 1); }

/* ---- prompts sharing a round ------------------------------------------------------------------- */

/* Short prompts share a round's prefill rows (up to prefill_chunk of them): A's 128-row prompt takes two whole
 * rounds of 64 rows while B, C and D (9 + 12 + 15 rows) wait, then all three run in the third round, where one
 * prompt a round took a round each (5 rounds). With max_tokens 1 every stream ends at its last prompt row, so the
 * rounds are counted exactly; the submits take microseconds, A's rounds much longer. Tokens as alone. */
static void test_prompts_share_round(void **state) {
    env *e = *state;
    static const int lens[4] = {128, 9, 12, 15};
    int32_t prompts[4][128], ref[4][2], got[4][2];
    qsampling sp = qsampling_default();
    for (int s = 0; s < 4; s++) {
        make_prompt(prompts[s], lens[s], e->V, 300u + (unsigned)s);
        assert_int_equal(run_alone_ctx(e, prompts[s], lens[s], 1, sp, 1, ref[s]), 1);
    }
    qengine *eng = make_engine(e, 4, 4);
    qreq *r[4];
    for (int s = 0; s < 4; s++) {
        qreq_params rp = {.prompt = prompts[s], .n_prompt = lens[s], .max_tokens = 1, .sampling = sp, .ignore_eos = 1};
        assert_ok(engine_submit(eng, &rp, &r[s]));
    }
    for (int s = 0; s < 4; s++) {
        qfinish fin;
        assert_int_equal(collect(r[s], got[s], 2, &fin), 1);
        assert_int_equal(fin, QFINISH_LENGTH);
        assert_int_equal(got[s][0], ref[s][0]);
        engine_release(r[s]);
    }
    qengine_stats st;
    engine_get_stats(eng, &st);
    printf("  4 prompts (128, 9, 12, 15 rows, chunk 64) in %llu rounds\n", (unsigned long long)st.rounds);
    assert_int_equal(st.rounds, 3);
    assert_true(st.prompt_tokens == 128 + 9 + 12 + 15);
    engine_destroy(eng);
}

/* ---- queue ------------------------------------------------------------------------------------ */

static void test_queue_full(void **state) {
    env *e = *state;
    int32_t prompt[100];
    make_prompt(prompt, 100, e->V, 5);
    qengine *eng = make_engine(e, 1, 2);
    qsampling sp = qsampling_default();
    /* The first request runs for ~N_CTX rounds; the four submits take microseconds. */
    qreq *r[3];
    for (int i = 0; i < 3; i++) r[i] = submit(eng, prompt, i == 0 ? 12 : 10, i == 0 ? N_CTX - 12 : 4, sp);
    qreq_params rp = {.prompt = prompt, .n_prompt = 10, .max_tokens = 4, .sampling = sp};
    qreq *x = (qreq *)&rp; /* must be reset to NULL on failure */
    assert_int_equal(engine_submit(eng, &rp, &x), Q_EFULL);
    assert_null(x);
    assert_non_null(strstr(q_lasterr(), "queue"));
    qengine_stats st;
    engine_get_stats(eng, &st);
    assert_int_equal(st.running + st.waiting, 3);
    engine_cancel(r[0], QFINISH_CANCELLED);
    for (int i = 0; i < 3; i++) {
        int32_t buf[N_CTX];
        qfinish fin;
        collect(r[i], buf, N_CTX, &fin);
        assert_int_equal(fin, i == 0 ? QFINISH_CANCELLED : QFINISH_LENGTH);
        engine_release(r[i]);
    }
    x = submit(eng, prompt, 10, 4, sp); /* room again */
    engine_release(x);
    engine_destroy(eng);
}

/* ---- cancel ------------------------------------------------------------------------------------ */

static void test_cancel_and_reuse(void **state) {
    env *e = *state;
    int32_t pa[20], pb[24], ref[8], got[N_CTX];
    make_prompt(pa, 20, e->V, 21);
    make_prompt(pb, 24, e->V, 22);
    qsampling sp = qsampling_default();
    sp.temperature = 0.8f;
    sp.seed = 99;
    int n_ref = run_alone_ctx(e, pb, 24, 8, sp, 0, ref);

    qengine *eng = make_engine(e, 1, 4);
    qreq *a = submit(eng, pa, 20, N_CTX - 20, sp); /* runs in the only slot */
    qreq *b = submit(eng, pb, 24, 8, sp);          /* waits, then takes the freed slot */
    qreq *c = submit(eng, pb, 24, 8, sp);          /* cancelled while waiting */
    qfinish fin;
    int n = 0;
    while (n < 3) {
        n += engine_next(a, n, got + n, N_CTX - n, 10000, &fin);
        assert_int_equal(fin, QFINISH_NONE);
    }
    engine_cancel(c, QFINISH_STOP);
    engine_cancel(a, QFINISH_CANCELLED);
    engine_cancel(a, QFINISH_STOP); /* the first call wins */
    n = collect(a, got, N_CTX, &fin);
    assert_int_equal(fin, QFINISH_CANCELLED);
    assert_true(n >= 3 && n < N_CTX - 20);
    n = collect(c, got, N_CTX, &fin);
    assert_int_equal(fin, QFINISH_STOP);
    assert_int_equal(n, 0);
    assert_true(engine_ttft(c) == 0);
    n = collect(b, got, N_CTX, &fin);
    assert_int_equal(fin, QFINISH_LENGTH);
    assert_int_equal(n, n_ref);
    assert_true(q_hash_tokens(got, (size_t)n) == q_hash_tokens(ref, (size_t)n_ref));
    engine_release(a);
    engine_release(b);
    engine_release(c);
    engine_destroy(eng);
}

/* ---- end of sequence ------------------------------------------------------------------------- */

static void test_eos(void **state) {
    env *e = *state;
    int32_t prompt[12], ref[12], got[12];
    make_prompt(prompt, 12, e->V, 31);
    qsampling sp = qsampling_default();
    int n_ref = run_alone_ctx(e, prompt, 12, 12, sp, 0, ref);
    assert_true(n_ref > 6);
    qwen35_config saved = e->m->cfg; /* no engine runs while the config is changed */
    int32_t eos = ref[6];
    int first = 0;
    while (ref[first] != eos) first++;
    e->m->cfg.eos_ids[0] = eos;
    e->m->cfg.n_eos = 1;
    int n_alone = run_alone_ctx(e, prompt, 12, 12, sp, 0, ref);
    assert_int_equal(n_alone, first);
    qengine *eng = make_engine(e, 2, 4);
    qreq *r = submit(eng, prompt, 12, 12, sp);
    qreq_params rp = {.prompt = prompt, .n_prompt = 12, .max_tokens = 12, .ignore_eos = 1, .sampling = sp};
    qreq *r2 = NULL;
    assert_ok(engine_submit(eng, &rp, &r2));
    qfinish fin;
    int n = collect(r, got, 12, &fin);
    assert_int_equal(fin, QFINISH_STOP);
    assert_int_equal(n, first);
    assert_true(q_hash_tokens(got, (size_t)n) == q_hash_tokens(ref, (size_t)first));
    n = collect(r2, got, 12, &fin);
    assert_int_equal(fin, QFINISH_LENGTH);
    assert_int_equal(n, 12);
    assert_int_equal(got[first], eos);
    engine_release(r);
    engine_release(r2);
    engine_destroy(eng);
    e->m->cfg.eos_ids[0] = saved.eos_ids[0];
    e->m->cfg.n_eos = saved.n_eos;
}

/* ---- forward errors ---------------------------------------------------------------------------- */

static atomic_int fail_embed;
static const qbackend_ops *real_ops;

static qstatus failing_embed(qbackend *be, const qweight *table, const int32_t *ids, int n, float *y) {
    if (atomic_load(&fail_embed)) return q_fail(Q_ECUDA, "injected embed failure");
    return real_ops->embed(be, table, ids, n, y);
}

static void test_forward_error(void **state) {
    env *e = *state;
    int32_t prompt[20], ref[6], got[6];
    make_prompt(prompt, 20, e->V, 41);
    qsampling sp = qsampling_default();
    int n_ref = run_alone_ctx(e, prompt, 20, 6, sp, 0, ref);
    static qbackend_ops ops;
    real_ops = e->be->ops;
    ops = *real_ops;
    ops.embed = failing_embed;
    e->be->ops = &ops; /* before the engine thread exists */
    atomic_store(&fail_embed, 1);
    qengine *eng = make_engine(e, 2, 4);
    qreq *a = submit(eng, prompt, 20, 6, sp), *b = submit(eng, prompt, 9, 6, sp);
    qfinish fin;
    assert_int_equal(collect(a, got, 6, &fin), 0);
    assert_int_equal(fin, QFINISH_ERROR);
    assert_non_null(strstr(engine_error(a), "injected embed failure"));
    assert_int_equal(collect(b, got, 6, &fin), 0);
    assert_int_equal(fin, QFINISH_ERROR);
    atomic_store(&fail_embed, 0);
    qreq *c = submit(eng, prompt, 20, 6, sp); /* a slot whose stream failed starts clean */
    int n = collect(c, got, 6, &fin);
    assert_int_equal(fin, QFINISH_LENGTH);
    assert_true(q_hash_tokens(got, (size_t)n) == q_hash_tokens(ref, (size_t)n_ref));
    engine_release(a);
    engine_release(b);
    engine_release(c);
    engine_destroy(eng);
    e->be->ops = real_ops;
}

/* ---- bad input ---------------------------------------------------------------------------------- */

static void expect_einval(qengine *eng, const qreq_params *p, const char *field) {
    qreq *r = NULL;
    qstatus st = engine_submit(eng, p, &r);
    if (st != Q_EINVAL || !strstr(q_lasterr(), field))
        fail_msg("expected Q_EINVAL naming %s, got %s: %s", field, q_status_name(st), q_lasterr());
    assert_null(r);
}

static void test_bad_requests(void **state) {
    env *e = *state;
    int32_t prompt[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    qengine *eng = make_engine(e, 1, 2);
    qreq_params ok = {.prompt = prompt, .n_prompt = 8, .max_tokens = 4, .sampling = qsampling_default()};
    qreq_params p = ok;
    p.n_prompt = 0;
    expect_einval(eng, &p, "prompt");
    p = ok;
    p.prompt = NULL;
    expect_einval(eng, &p, "prompt");
    p = ok;
    p.max_tokens = 0;
    expect_einval(eng, &p, "max_tokens");
    p = ok;
    p.max_tokens = N_CTX - 7;
    expect_einval(eng, &p, "max_tokens");
    p = ok;
    p.max_tokens = 2147483647;
    expect_einval(eng, &p, "max_tokens");
    int32_t bad[3] = {1, e->V, 2}, neg[2] = {-1, 0};
    p = ok;
    p.prompt = bad;
    p.n_prompt = 3;
    expect_einval(eng, &p, "prompt");
    p.prompt = neg;
    p.n_prompt = 2;
    expect_einval(eng, &p, "prompt");
    p = ok;
    p.sampling.temperature = -1;
    expect_einval(eng, &p, "temperature");
    p = ok;
    p.sampling.top_p = 0;
    expect_einval(eng, &p, "top_p");
    p = ok;
    p.max_tokens = N_CTX - 8; /* exactly fits */
    qreq *r = NULL;
    assert_ok(engine_submit(eng, &p, &r));
    engine_cancel(r, QFINISH_CANCELLED);
    engine_release(r);
    engine_destroy(eng);

    struct { qengine_params p; const char *field; } bad_params[] = {
        {{.n_parallel = 0, .n_ctx = 64, .prefill_chunk = 64, .queue_cap = 1}, "n_parallel"},
        {{.n_parallel = 1, .n_ctx = 1, .prefill_chunk = 64, .queue_cap = 1}, "n_ctx"},
        {{.n_parallel = 1, .n_ctx = 64, .prefill_chunk = 0, .queue_cap = 1}, "prefill_chunk"},
        {{.n_parallel = 1, .n_ctx = 64, .prefill_chunk = 64, .queue_cap = -1}, "queue_cap"},
    };
    for (size_t i = 0; i < sizeof bad_params / sizeof bad_params[0]; i++) {
        qengine *x = NULL;
        qstatus st = engine_create(e->m, &bad_params[i].p, &x);
        assert_int_equal(st, Q_EINVAL);
        assert_null(x);
        assert_non_null(strstr(q_lasterr(), bad_params[i].field));
    }
}

/* ---- lifetimes ---------------------------------------------------------------------------------- */

static void test_release_and_destroy(void **state) {
    env *e = *state;
    int32_t prompt[20], buf[N_CTX];
    make_prompt(prompt, 20, e->V, 51);
    qsampling sp = qsampling_default();
    qengine *eng = make_engine(e, 2, 8);
    qreq *r[6];
    for (int i = 0; i < 6; i++) r[i] = submit(eng, prompt, 20 - 2 * i, 100, sp);
    engine_release(r[0]); /* released at once, still running */
    qfinish fin;
    int n = 0;
    while (n < 1) n += engine_next(r[1], n, buf, N_CTX, 10000, &fin);
    engine_release(r[1]); /* released mid-reply */
    engine_cancel(r[2], QFINISH_CANCELLED);
    engine_release(r[2]); /* cancelled, then released before the engine saw it */
    engine_release(r[3]); /* still waiting */
    engine_destroy(eng);  /* r[4], r[5] outlive the engine */
    for (int i = 4; i < 6; i++) {
        n = engine_next(r[i], 0, buf, N_CTX, -1, &fin);
        assert_true(n < 100);
        assert_int_equal(fin, QFINISH_CANCELLED);
        engine_cancel(r[i], QFINISH_STOP); /* harmless after the end */
        engine_release(r[i]);
    }
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static void test_idle_sleeps(void **state) {
    env *e = *state;
    int32_t prompt[4] = {1, 2, 3, 4};
    qengine *eng = make_engine(e, 2, 2);
    qreq *r = submit(eng, prompt, 4, 2, qsampling_default());
    int32_t buf[2];
    qfinish fin;
    collect(r, buf, 2, &fin);
    engine_release(r);
    double c0 = cpu_seconds();
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    double used = cpu_seconds() - c0;
    printf("  idle engine: %.3f s CPU in 0.3 s\n", used);
    assert_true(used < 0.05);
    engine_destroy(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alone_vs_batched),
        cmocka_unit_test(test_alone_vs_batched_flipped),
        cmocka_unit_test(test_prompts_share_round),
        cmocka_unit_test(test_queue_full),
        cmocka_unit_test(test_cancel_and_reuse),
        cmocka_unit_test(test_eos),
        cmocka_unit_test(test_forward_error),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_release_and_destroy),
        cmocka_unit_test(test_idle_sleeps),
    };
    return cmocka_run_group_tests(tests, env_setup, env_teardown);
}
