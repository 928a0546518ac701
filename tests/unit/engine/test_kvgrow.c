/* test_kvgrow.c: grow-as-used K/V in the engine (issue 6), fixture model on the CPU backend.
 * - EXACT(grow): the same streams (greedy and sampled, prompts that grow a slot several times, one
 *   that fills 120 of 128 positions) through engines with kv_grow 0 and 16 give identical token
 *   hashes (test_engine.c already ties the engine to generate()), with f32 and with bf16 K/V (half the
 *   bytes per row); with grow the slots return to their first rows after;
 * - parallel 4, context 65536, kv_grow 1024, four streams of a few hundred tokens: K/V held (peak
 *   included) stays under 1/16 of the no-grow figure, and is back at the first rows after the end;
 * - a forced mapping failure (kvmem test hook) ends only the stream that grew, with an error naming
 *   the K/V growth; a stream beside it and the next request complete with the reference tokens;
 * - /memory JSON and the Prometheus gauges carry the figures. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kvmem.h"
#include "engine/slot.h"
#include "engine_fixture.h"

#define N_CTX 128
#define N_STREAMS 4
static const int lens[N_STREAMS] = {40, 100, 5, 30};
static const int max_toks[N_STREAMS] = {60, 20, 40, 20}; /* 40 + 60 grows 48 -> 64 -> 80 -> 112 */

static qengine *make(env *e, int n_parallel, int n_ctx, int kv_grow) {
    qengine_params p = engine_params_default();
    p.n_parallel = n_parallel;
    p.n_ctx = n_ctx;
    p.prefill_chunk = 64;
    p.queue_cap = 8;
    p.kv_grow = kv_grow;
    qengine *eng = NULL;
    assert_ok(engine_create(e->m, &p, &eng));
    return eng;
}

static void test_exact_grow(void **state) {
    env *e = *state;
    int32_t prompts[N_STREAMS][100], ref[N_STREAMS][64], got[N_STREAMS][64];
    int n_ref[N_STREAMS];
    qsampling sp[N_STREAMS];
    for (int s = 0; s < N_STREAMS; s++) {
        make_prompt(prompts[s], lens[s], e->V, 500u + (unsigned)s);
        sp[s] = qsampling_default();
        if (s % 2) {
            sp[s].temperature = 0.8f;
            sp[s].seed = 77u + (unsigned)s;
        }
    }
    const int grows[] = {0, 16}; /* the first run of each K/V type (no grow) is the reference */
    int64_t row_f32 = 0;
    static const int types[3] = {QKV_F32, QKV_BF16, QKV_Q8};
    static const char *names[3] = {"f32", "bf16", "q8"};
    for (int run = 0; run < 6; run++) {
        const int g = run % 2, kt = types[run / 2];
        e->m->cfg.kv_type = kt;
        qengine *eng = make(e, N_STREAMS, N_CTX, grows[g]);
        qreq *r[N_STREAMS];
        for (int s = 0; s < N_STREAMS; s++) r[s] = submit_req(eng, prompts[s], lens[s], max_toks[s], sp[s], 1);
        for (int s = 0; s < N_STREAMS; s++) {
            qfinish fin;
            int n = collect(r[s], got[s], 64, &fin);
            if (g == 0) {
                memcpy(ref[s], got[s], sizeof ref[s]);
                n_ref[s] = n;
            }
            uint64_t ha = q_hash_tokens(ref[s], (size_t)n_ref[s]), hb = q_hash_tokens(got[s], (size_t)n);
            printf("  %s K/V, kv_grow %2d stream %d: prompt %3d + %2d, no grow %016llx, this %016llx\n",
                   names[run / 2], grows[g], s, lens[s], n, (unsigned long long)ha, (unsigned long long)hb);
            assert_int_equal(fin, QFINISH_LENGTH);
            assert_int_equal(n, n_ref[s]);
            assert_true(ha == hb);
            engine_release(r[s]);
        }
        const int first = grows[g] ? grows[g] : N_CTX;
        qengine_memory m = wait_held_rows(eng, (int64_t)N_STREAMS * first);
        assert_int_equal(m.kv_held_rows, N_STREAMS * first);
        assert_int_equal(m.kv_committed_rows, N_STREAMS * first);
        const int64_t row = m.kv_bytes_per_row;
        if (kt == QKV_F32) row_f32 = row;
        else if (kt == QKV_BF16) assert_true(2 * row == row_f32);
        else assert_true(row == qwen35_kv_bytes_per_token(&e->m->cfg) && 4 * row > row_f32 && 2 * row < row_f32);
        if (grows[g]) { /* grew while running (the 100 + 20 stream to 120 rows at least), gave back after */
            assert_true(m.kv_peak_bytes >= (100 + 20) * row);
            assert_true(m.kv_peak_bytes < (int64_t)N_STREAMS * N_CTX * row);
            assert_true(m.kv_bytes < m.kv_peak_bytes);
        } else {
            assert_true(m.kv_bytes == (int64_t)N_STREAMS * N_CTX * row && m.kv_peak_bytes == m.kv_bytes);
        }
        engine_destroy(eng);
    }
    e->m->cfg.kv_type = QKV_F32;
}

/* The growth policy on the slot table directly (slot.h): a fresh prompt in one step, then the need
 * rounded up or a quarter more, capped by the charge and the context. */
static void test_policy(void **state) {
    env *e = *state;
    int32_t prompt[100];
    make_prompt(prompt, 100, e->V, 9);
    qengine *eng = make(e, 1, 4096, 32);
    qreq *r = submit_req(eng, prompt, 100, 8, qsampling_default(), 1);
    int32_t got[8];
    qfinish fin;
    collect(r, got, 8, &fin);
    engine_release(r);
    int rows[1], charge[1];
    qengine_memory m;
    engine_get_memory(eng, &m, rows, charge, 1);
    assert_int_equal(m.first_rows, 32);
    assert_int_equal(m.kv_peak_bytes, 128 * m.kv_bytes_per_row); /* 100 + 7 rows: the prompt's 128 */
    engine_destroy(eng);
}

/* The decode rule on a slot table: the need rounded up to the step or a quarter more than held
 * (rounded up to 16), whichever is larger, capped by the stream's charge and the context. */
static void test_policy_decode(void **state) {
    env *e = *state;
    slot_table t;
    assert_ok(slot_table_init(e->m, 1, 4096, 64, &t));
    assert_int_equal(t.first_rows, 64);
    assert_int_equal(t.states[0]->n_kv_rows, 64);
    qslot *s = &t.slots[0];
    s->phase = SLOT_DECODE; /* only the figures the policy reads; no request */
    s->charge = 4096;
    s->st->n_kv_rows = 320;
    assert_int_equal(slot_grow_target(&t, 0, 300), 320); /* enough already */
    assert_int_equal(slot_grow_target(&t, 0, 321), 400); /* 320 + 80 beats 384 */
    assert_int_equal(slot_grow_target(&t, 0, 500), 512); /* the need rounded up beats 400 */
    s->charge = 352;
    assert_int_equal(slot_grow_target(&t, 0, 321), 352); /* never past the charge */
    s->charge = 4096;
    s->st->n_kv_rows = 4000;
    assert_int_equal(slot_grow_target(&t, 0, 4001), 4096); /* nor past the context */
    s->st->n_kv_rows = 64;
    s->phase = SLOT_FREE;
    s->charge = 0;
    slot_table_fini(e->m, &t);
    assert_int_equal(slot_table_init(e->m, 1, 4096, 40, &t), Q_EINVAL);
}

static void test_long_context(void **state) {
    env *e = *state;
    enum { CTX = 65536, GROW = 1024, N = 4 };
    int32_t prompts[N][400], got[16];
    qengine *eng = make(e, N, CTX, GROW); /* beyond the fixture's max_position_embeddings (4096) */
    qreq *r[N];
    for (int s = 0; s < N; s++) {
        make_prompt(prompts[s], 100 + 40 * s, e->V, 900u + (unsigned)s); /* 100..220 tokens */
        r[s] = submit_req(eng, prompts[s], 100 + 40 * s, 4, qsampling_default(), 1);
    }
    for (int s = 0; s < N; s++) {
        qfinish fin;
        assert_int_equal(collect(r[s], got, 16, &fin), 4);
        engine_release(r[s]);
    }
    qengine_memory m = wait_held_rows(eng, (int64_t)N * GROW);
    const int64_t no_grow = (int64_t)N * CTX * m.kv_bytes_per_row;
    printf("  K/V held %lld bytes, peak %lld, no-grow %lld\n", (long long)m.kv_bytes,
           (long long)m.kv_peak_bytes, (long long)no_grow);
    assert_true(m.kv_peak_bytes * 16 < no_grow);
    assert_true(m.kv_bytes == (int64_t)N * GROW * m.kv_bytes_per_row); /* back at the first rows */
    assert_int_equal(m.kv_held_rows, N * GROW);
    engine_destroy(eng);
}

static void test_forced_failure(void **state) {
    env *e = *state;
    int32_t pa[40], pc[5], ref_a[60], ref_c[12], got[64];
    make_prompt(pa, 40, e->V, 61);
    make_prompt(pc, 5, e->V, 62);
    qsampling sp = qsampling_default();
    int n_ref_a = run_alone(e, N_CTX, pa, 40, 60, sp, 1, ref_a);
    int n_ref_c = run_alone(e, N_CTX, pc, 5, 12, sp, 1, ref_c);
    qengine *eng = make(e, 2, N_CTX, 16);
    /* The fixture has 2 attention layers: 4 regions per slot. a's prompt maps 4 extents (48 rows), its
     * first decode growth (to 64) fails at the 2nd region; c fits its first 16 rows and never maps. */
    kvmem_test_fail_after(5);
    qreq *a = submit_req(eng, pa, 40, 60, sp, 1);
    qreq *c = submit_req(eng, pc, 5, 12, sp, 1);
    qfinish fin;
    int n = collect(a, got, 64, &fin);
    assert_int_equal(fin, QFINISH_ERROR);
    printf("  a ended after %d tokens: %s\n", n, engine_error(a));
    assert_non_null(strstr(engine_error(a), "K/V"));
    assert_non_null(strstr(engine_error(a), "test hook"));
    assert_int_equal(n, 48 - 40 + 1); /* positions 40..47 ran, the token for 48 could not */
    assert_true(q_hash_tokens(got, (size_t)n) == q_hash_tokens(ref_a, (size_t)n));
    n = collect(c, got, 64, &fin);
    assert_int_equal(fin, QFINISH_LENGTH);
    assert_true(q_hash_tokens(got, (size_t)n) == q_hash_tokens(ref_c, (size_t)n_ref_c));
    engine_release(a);
    engine_release(c);
    kvmem_test_fail_after(-1);
    a = submit_req(eng, pa, 40, 60, sp, 1); /* the engine goes on serving */
    n = collect(a, got, 64, &fin);
    assert_int_equal(fin, QFINISH_LENGTH);
    assert_true(q_hash_tokens(got, (size_t)n) == q_hash_tokens(ref_a, (size_t)n_ref_a));
    engine_release(a);
    qengine_memory m = wait_held_rows(eng, 2 * 16);
    assert_int_equal(m.kv_held_rows, 2 * 16);
    engine_destroy(eng);
}

static void test_reports(void **state) {
    env *e = *state;
    qengine *eng = make(e, 3, 1024, 32);
    char *text = NULL;
    assert_ok(engine_memory_json(eng, &text));
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "backend")), "cpu");
    json_t *held = json_object_get(j, "held"), *kv = json_object_get(j, "kv");
    assert_true(json_integer_value(json_object_get(held, "weights")) == e->m->w.n_bytes);
    assert_true(json_integer_value(json_object_get(held, "kv_mapped")) == 3 * 32 * qwen35_kv_bytes_per_token(&e->m->cfg));
    assert_true(json_integer_value(json_object_get(held, "gdn_states")) == 3 * qwen35_gdn_state_bytes(&e->m->cfg));
    assert_non_null(json_object_get(json_object_get(j, "peak"), "total"));
    assert_int_equal(json_integer_value(json_object_get(kv, "budget_rows")), 3 * 1024);
    assert_int_equal(json_integer_value(json_object_get(kv, "committed_rows")), 3 * 32);
    assert_int_equal(json_array_size(json_object_get(j, "slots")), 3);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(j, "slots"), 2), "rows")), 32);
    json_decref(j);
    free(text);
    size_t need = engine_memory_prometheus(eng, NULL, 0);
    char *buf = malloc(need + 1);
    assert_non_null(buf);
    assert_int_equal(engine_memory_prometheus(eng, buf, need + 1), need);
    assert_int_equal(strlen(buf), need);
    assert_non_null(strstr(buf, "quill_memory_bytes{kind=\"kv_mapped\"} "));
    assert_non_null(strstr(buf, "quill_memory_peak_bytes{kind=\"total\"} "));
    assert_non_null(strstr(buf, "quill_kv_budget_rows 3072\n"));
    assert_non_null(strstr(buf, "quill_slot_kv_rows{slot=\"2\"} 32\n"));
    char small[40];
    assert_int_equal(engine_memory_prometheus(eng, small, sizeof small), need); /* truncated, counted */
    assert_int_equal(strlen(small), sizeof small - 1);
    free(buf);
    engine_destroy(eng);
}

static void test_bad_params(void **state) {
    env *e = *state;
    qengine_params p = engine_params_default();
    qengine *eng = NULL;
    p.kv_grow = 24;
    assert_int_equal(engine_create(e->m, &p, &eng), Q_EINVAL);
    assert_non_null(strstr(q_lasterr(), "kv_grow"));
    p.kv_grow = 64;
    p.n_parallel = 2;
    p.kv_budget_rows = 100; /* less than 2 idle slots of 64 rows */
    assert_int_equal(engine_create(e->m, &p, &eng), Q_EINVAL);
    assert_non_null(strstr(q_lasterr(), "kv_budget_rows"));
    p = engine_params_default();
    setenv("QUILL_KV_GROW", "32", 1);
    assert_ok(engine_params_from_env(&p));
    assert_int_equal(p.kv_grow, 32);
    setenv("QUILL_KV_GROW", "33", 1);
    assert_int_equal(engine_params_from_env(&p), Q_EINVAL);
    assert_non_null(strstr(q_lasterr(), "QUILL_KV_GROW"));
    unsetenv("QUILL_KV_GROW");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_grow),
        cmocka_unit_test(test_policy),
        cmocka_unit_test(test_policy_decode),
        cmocka_unit_test(test_long_context),
        cmocka_unit_test(test_forced_failure),
        cmocka_unit_test(test_reports),
        cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, env_setup, env_teardown);
}
