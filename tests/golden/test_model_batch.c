/* test_model_batch.c: properties of one forward for everything, on a golden fixture model (gqa4-v2k, or the one
 * QUILL_TEST_MODEL names: gqa4-v2k-mlx4 takes the CUDA decode matmul's 4-bit kernels), with f32, bf16 and
 * q8 K/V caches, and bf16 K/V with bf16 GDN states (each group of tests runs once per cache type):
 * - prefill-then-decode equals one whole-sequence pass (logits within 1e-4 relative; 2e-2 where the CUDA decode
 *   matmuls round x to bf16, QUILL_DECODE_PRECISION=bf16);
 * - EXACT(chunk): prefill cut into 64-, 128- or 512-row forwards gives bit-identical logits;
 * - EXACT(batch): a stream batched with two others (one prefilling, one decoding) gets bit-identical
 *   logits to the same stream alone; so do the prompts of two streams sharing a forward;
 * - ids chosen on the backend (greedy, drawn) are sample_argmax's and draw_row's on the row's logits;
 * - bad batches (gaps, reordered rows, token out of range) are refused with a message;
 * - bf16 and q8 K/V give logits close to f32 K/V (the rounding of the cache is all that differs);
 * - bf16 GDN states give logits close to f32 states. */
#include "model_fixture.h"

#include <string.h>

#include "engine/generate.h"

typedef struct env {
    qbackend *be;
    qwen35_model *m;
    int V;
} env;

static int setup(void **state, int kv_type, int gdn_state_type) {
    static env e;
    char dir[1024];
    const char *name = getenv("QUILL_TEST_MODEL");
    snprintf(dir, sizeof dir, "%s/models/%s", QUILL_FIXTURES, name && *name ? name : "gqa4-v2k");
    if (test_backend_create(&e.be) != Q_OK) {
        fprintf(stderr, "%s\n", q_lasterr());
        return -1;
    }
    if (qwen35_open(dir, e.be, &e.m) != Q_OK) {
        fprintf(stderr, "%s\n", q_lasterr());
        return -1;
    }
    e.V = e.m->cfg.vocab_size;
    e.m->cfg.kv_type = kv_type;
    e.m->cfg.gdn_state_type = gdn_state_type;
    *state = &e;
    return 0;
}
static int setup_f32(void **state) { return setup(state, QKV_F32, QSTATE_F32); }
static int setup_bf16(void **state) { return setup(state, QKV_BF16, QSTATE_F32); }
static int setup_q8(void **state) { return setup(state, QKV_Q8, QSTATE_F32); }
static int setup_bf16_states(void **state) { return setup(state, QKV_BF16, QSTATE_BF16); }

static int teardown(void **state) {
    env *e = *state;
    qwen35_close(e->m);
    e->be->ops->destroy(e->be);
    return 0;
}

static void make_prompt(int32_t *ids, int n, int V, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        ids[i] = (int32_t)((seed >> 8) % (unsigned)V);
    }
}

/* QUILL_DECODE_PRECISION=bf16 or dequant: the CUDA decode matmuls round x to bf16 */
static int bf16_decode(void) {
    const char *dp = getenv("QUILL_DECODE_PRECISION");
    return dp && (!strcmp(dp, "bf16") || !strcmp(dp, "dequant"));
}

static void test_prefill_then_decode(void **state) {
    env *e = *state;
    int32_t ids[150];
    make_prompt(ids, 150, e->V, 7);
    float *whole = malloc((size_t)e->V * sizeof *whole), *split = malloc((size_t)e->V * sizeof *split);
    qwen35_state *a = NULL, *b = NULL;
    assert_ok(qwen35_state_create(e->m, 160, &a));
    assert_ok(qwen35_state_create(e->m, 160, &b));
    assert_ok(prefill(e->m, a, ids, 150, 512, whole));
    assert_ok(prefill(e->m, b, ids, 140, 512, split));
    for (int i = 140; i < 150; i++) { /* decode rows: the recurrent rule */
        qrow r = {.stream = 0, .pos = i, .token = ids[i], .flags = QROW_LOGITS};
        assert_ok(qwen35_forward(e->m, &r, 1, &b, split));
    }
    double err = rel_err(split, whole, (size_t)e->V);
    printf("prefill 150 vs prefill 140 + decode 10: rel err %.2e\n", err);
    /* bf16 x in the decode matmuls, and a bf16 GDN state (rounded after each decode row but only after each 64-row
     * chunk of a prefill), each loosen it; on the 4-bit fixture in bf16 decode mode the two together reached 2.0e-2 */
    const int loose = bf16_decode() + (e->m->cfg.gdn_state_type == QSTATE_BF16);
    assert_true(err <= (loose == 2 ? 4e-2 : loose ? 2e-2 : 1e-4));
    qwen35_state_destroy(e->m, a);
    qwen35_state_destroy(e->m, b);
    free(whole);
    free(split);
}

static void test_chunk_cuts_exact(void **state) {
    env *e = *state;
    int32_t ids[300];
    make_prompt(ids, 300, e->V, 11);
    int chunks[] = {64, 128, 512};
    float *ref = malloc((size_t)e->V * sizeof *ref), *got = malloc((size_t)e->V * sizeof *got);
    for (int c = 0; c < 3; c++) {
        qwen35_state *st = NULL;
        assert_ok(qwen35_state_create(e->m, 300, &st));
        assert_ok(prefill(e->m, st, ids, 300, chunks[c], c == 0 ? ref : got));
        if (c > 0 && memcmp(ref, got, (size_t)e->V * sizeof *ref) != 0)
            fail_msg("prefill in chunks of %d differs from chunks of 64", chunks[c]);
        qwen35_state_destroy(e->m, st);
    }
    free(ref);
    free(got);
}

/* Stream X: prefill 20, then decode 6 tokens (feeding fixed ids). Alone, then in batches where Y
 * prefills a 200-token prompt in 64-row chunks and Z decodes, with X in the middle. */
static void test_batch_invariance(void **state) {
    env *e = *state;
    const int V = e->V;
    int32_t px[26], py[200], pz[40];
    make_prompt(px, 26, V, 1);
    make_prompt(py, 200, V, 2);
    make_prompt(pz, 40, V, 3);
    float alone[6][1024], together[6][1024];
    assert_true(V <= 1024);
    qwen35_state *x = NULL, *y = NULL, *z = NULL;
    assert_ok(qwen35_state_create(e->m, 256, &x));
    assert_ok(qwen35_state_create(e->m, 256, &y));
    assert_ok(qwen35_state_create(e->m, 256, &z));

    float *scratch = malloc((size_t)8 * V * sizeof *scratch);
    assert_ok(prefill(e->m, x, px, 20, 512, scratch));
    for (int t = 0; t < 6; t++) {
        qrow r = {.stream = 0, .pos = 20 + t, .token = px[20 + t], .flags = QROW_LOGITS};
        assert_ok(qwen35_forward(e->m, &r, 1, &x, alone[t]));
    }

    qwen35_state_reset(e->m, x);
    assert_ok(prefill(e->m, x, px, 20, 512, scratch));
    assert_ok(prefill(e->m, z, pz, 30, 512, scratch));
    qwen35_state *states[3] = {y, x, z};
    for (int t = 0; t < 6; t++) {
        qrow rows[80];
        int n = 0, ny = 0;
        int y0 = y->n_past;
        for (int j = 0; j < 64 && y0 + j < 200; j++, ny++) /* Y: one prefill chunk */
            rows[n++] = (qrow){.stream = 0, .pos = y0 + j, .token = py[y0 + j], .flags = QROW_PREFILL};
        rows[n++] = (qrow){.stream = 1, .pos = 20 + t, .token = px[20 + t], .flags = QROW_LOGITS};
        rows[n++] = (qrow){.stream = 2, .pos = 30 + t, .token = pz[30 + t], .flags = QROW_LOGITS};
        if (ny > 0) rows[ny - 1].flags |= QROW_LOGITS;
        assert_ok(qwen35_forward(e->m, rows, n, states, scratch));
        int j = (ny > 0) ? 1 : 0; /* logits come back in row order: Y's last, X, Z */
        memcpy(together[t], scratch + (size_t)j * V, (size_t)V * sizeof(float));
    }
    for (int t = 0; t < 6; t++)
        if (memcmp(alone[t], together[t], (size_t)V * sizeof(float)) != 0)
            fail_msg("step %d: stream logits differ when batched with two others", t);
    qwen35_state_destroy(e->m, x);
    qwen35_state_destroy(e->m, y);
    qwen35_state_destroy(e->m, z);
    free(scratch);
}

/* Prompts of several streams in one forward, as the engine packs short prompts into a round: P's whole 40-row
 * prompt, Q's first 64-row chunk and R's decode row; then P's next row and Q's last 6 prompt rows; then Q's next row.
 * Every stream's logits equal its own alone, bitwise (the prompt GEMMs, the prefill attention and the chunked rule
 * meet rows of two streams in one call). */
static void test_prompts_share_forward(void **state) {
    env *e = *state;
    const int V = e->V;
    int32_t p[3][71]; /* P, Q, R */
    for (int i = 0; i < 3; i++) make_prompt(p[i], 71, V, 11u + (unsigned)i);
    const int32_t *pp = p[0], *pq = p[1], *pr = p[2];
    float *alone = malloc((size_t)6 * V * sizeof *alone), *shared = malloc((size_t)6 * V * sizeof *shared);
    qwen35_state *s[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) assert_ok(qwen35_state_create(e->m, 128, &s[i]));
    /* alone: P's prompt and next row, Q's prompt (chunks of 64) and next row, R's row at 30 */
    assert_ok(prefill(e->m, s[0], pp, 40, 64, alone));
    assert_ok(prefill(e->m, s[1], pq, 70, 64, alone + V));
    assert_ok(prefill(e->m, s[2], pr, 30, 64, alone + 5 * (size_t)V));
    qrow r0 = {.stream = 0, .pos = 30, .token = pr[30], .flags = QROW_LOGITS};
    assert_ok(qwen35_forward(e->m, &r0, 1, &s[2], alone + 2 * (size_t)V));
    r0 = (qrow){.stream = 0, .pos = 40, .token = pp[40], .flags = QROW_LOGITS};
    assert_ok(qwen35_forward(e->m, &r0, 1, &s[0], alone + 3 * (size_t)V));
    r0 = (qrow){.stream = 0, .pos = 70, .token = pq[70], .flags = QROW_LOGITS};
    assert_ok(qwen35_forward(e->m, &r0, 1, &s[1], alone + 4 * (size_t)V));
    /* together: R (stream 2) is at position 30 before the first shared forward */
    for (int i = 0; i < 3; i++) qwen35_state_reset(e->m, s[i]);
    assert_ok(prefill(e->m, s[2], pr, 30, 64, shared + 5 * (size_t)V));
    qrow rows[120];
    int n = 0;
    for (int j = 0; j < 40; j++) rows[n++] = (qrow){.stream = 0, .pos = j, .token = pp[j], .flags = QROW_PREFILL};
    rows[n - 1].flags |= QROW_LOGITS;
    for (int j = 0; j < 64; j++) rows[n++] = (qrow){.stream = 1, .pos = j, .token = pq[j], .flags = QROW_PREFILL};
    rows[n++] = (qrow){.stream = 2, .pos = 30, .token = pr[30], .flags = QROW_LOGITS};
    float *out = malloc((size_t)3 * V * sizeof *out);
    assert_ok(qwen35_forward(e->m, rows, n, s, out)); /* logits: P's last prompt row, R's row */
    memcpy(shared, out, (size_t)V * sizeof *out);
    memcpy(shared + 2 * (size_t)V, out + V, (size_t)V * sizeof *out);
    n = 0;
    rows[n++] = (qrow){.stream = 0, .pos = 40, .token = pp[40], .flags = QROW_LOGITS};
    for (int j = 64; j < 70; j++) rows[n++] = (qrow){.stream = 1, .pos = j, .token = pq[j], .flags = QROW_PREFILL};
    rows[n - 1].flags |= QROW_LOGITS;
    assert_ok(qwen35_forward(e->m, rows, n, s, out)); /* P's next row, Q's last prompt row */
    memcpy(shared + 3 * (size_t)V, out, (size_t)V * sizeof *out);
    memcpy(shared + (size_t)V, out + V, (size_t)V * sizeof *out);
    r0 = (qrow){.stream = 0, .pos = 70, .token = pq[70], .flags = QROW_LOGITS};
    assert_ok(qwen35_forward(e->m, &r0, 1, &s[1], shared + 4 * (size_t)V));
    static const char *what[5] = {"P's prompt", "Q's prompt", "R's decode row", "P's next row", "Q's next row"};
    for (int i = 0; i < 5; i++)
        if (memcmp(alone + (size_t)i * V, shared + (size_t)i * V, (size_t)V * sizeof(float)) != 0)
            fail_msg("%s: logits differ when prompts of two streams share a forward", what[i]);
    for (int i = 0; i < 3; i++) qwen35_state_destroy(e->m, s[i]);
    free(alone);
    free(shared);
    free(out);
}

/* EXACT(draft): k decode rows of one stream in one pass (as a draft block is verified) give the same
 * bits as k passes of one row; k = 12 takes the CUDA decode matmul's many-row kernel. */
static void test_k_rows_equal_k_passes(void **state) {
    env *e = *state;
    const int V = e->V, k = 12;
    int32_t ids[52];
    make_prompt(ids, 52, V, 5);
    float *serial = malloc((size_t)k * V * sizeof *serial), *block = malloc((size_t)k * V * sizeof *block);
    float *scratch = malloc((size_t)V * sizeof *scratch);
    qwen35_state *a = NULL, *b = NULL;
    assert_ok(qwen35_state_create(e->m, 64, &a));
    assert_ok(qwen35_state_create(e->m, 64, &b));
    assert_ok(prefill(e->m, a, ids, 40, 512, scratch));
    assert_ok(prefill(e->m, b, ids, 40, 512, scratch));
    qrow rows[12];
    for (int i = 0; i < k; i++) {
        rows[i] = (qrow){.stream = 0, .pos = 40 + i, .token = ids[40 + i], .flags = QROW_LOGITS};
        assert_ok(qwen35_forward(e->m, &rows[i], 1, &a, serial + (size_t)i * V));
    }
    assert_ok(qwen35_forward(e->m, rows, k, &b, block));
    if (memcmp(serial, block, (size_t)k * V * sizeof(float)) != 0)
        fail_msg("%d rows in one pass differ from %d passes of one row", k, k);
    qwen35_state_destroy(e->m, a);
    qwen35_state_destroy(e->m, b);
    free(serial);
    free(block);
    free(scratch);
}

/* Ids chosen on the backend: six streams at the same point of one prompt (so their logits are the same bits,
 * EXACT(batch)) ask for logits, a greedy id and four drawn ids (temperatures, top-k, top-p, min-p, keys); the greedy
 * id is sample_argmax's and each drawn id draw_row's on those logits. Then a batch of drawn rows alone. */
static void test_ids_on_backend(void **state) {
    env *e = *state;
    const int V = e->V, S = 6;
    int32_t ids[24];
    make_prompt(ids, 24, V, 9);
    float *scratch = malloc((size_t)V * sizeof *scratch), *logits = malloc((size_t)V * sizeof *logits);
    qwen35_state *st[6];
    for (int i = 0; i < S; i++) {
        assert_ok(qwen35_state_create(e->m, 32, &st[i]));
        assert_ok(prefill(e->m, st[i], ids, 20, 512, scratch));
    }
    const qdraw d[4] = {draw_params(0.7, 0.0, 0, 1.0, draw_key(1, 21)), draw_params(1.3, 0.0, 5, 1.0, draw_key(2, 21)),
                        draw_params(0.7, 0.05, 0, 0.9, draw_key(3, 21)),
                        draw_params(1.0, 0.0, 3, 0.5, draw_key(4, 21))};
    draw_cand *work = malloc((size_t)V * sizeof *work);
    for (int step = 0; step < 2; step++) {
        qrow rows[6];
        for (int i = 0; i < S; i++) rows[i] = (qrow){.stream = i, .pos = 20 + step, .token = ids[20 + step]};
        rows[0].flags = QROW_LOGITS;
        rows[1].flags = QROW_ARGMAX;
        for (int j = 0; j < 4; j++) rows[2 + j].flags = QROW_DRAW, rows[2 + j].draw = d[j];
        int32_t got[5];
        assert_ok(qwen35_forward_ex(e->m, step ? rows + 2 : rows, step ? 4 : S, st, logits, got));
        if (step == 1) { /* the drawn rows alone: their logits from stream 0's next step */
            qrow r0 = {.stream = 0, .pos = 21, .token = ids[21], .flags = QROW_LOGITS};
            assert_ok(qwen35_forward(e->m, &r0, 1, st, logits));
        } else {
            assert_int_equal(got[0], sample_argmax(logits, V));
        }
        for (int j = 0; j < 4; j++) assert_int_equal(got[(step ? 0 : 1) + j], draw_row(logits, V, &d[j], work));
    }
    for (int i = 0; i < S; i++) qwen35_state_destroy(e->m, st[i]);
    free(scratch);
    free(logits);
    free(work);
}

/* The same prompt through f32, bf16 and q8 caches: logits within 1e-2 (bf16 keeps 8 bits of each K/V value)
 * and 3e-2 (q8: 8-bit codes of each head's largest magnitude) relative of f32's; a broken conversion would be
 * far off. Restores the group's cache type. */
static void test_kv_types_close(void **state) {
    env *e = *state;
    const int keep = e->m->cfg.kv_type, types[3] = {QKV_F32, QKV_BF16, QKV_Q8};
    int32_t ids[120];
    make_prompt(ids, 120, e->V, 13);
    float *lg[3];
    for (int t = 0; t < 3; t++) {
        lg[t] = malloc((size_t)e->V * sizeof *lg[t]);
        e->m->cfg.kv_type = types[t];
        qwen35_state *st = NULL;
        assert_ok(qwen35_state_create(e->m, 128, &st));
        assert_ok(prefill(e->m, st, ids, 100, 512, lg[t]));
        for (int i = 100; i < 120; i++) { /* decode rows read the cache through the decode kernels */
            qrow r = {.stream = 0, .pos = i, .token = ids[i], .flags = QROW_LOGITS};
            assert_ok(qwen35_forward(e->m, &r, 1, &st, lg[t]));
        }
        qwen35_state_destroy(e->m, st);
    }
    e->m->cfg.kv_type = keep;
    const double err = rel_err(lg[1], lg[0], (size_t)e->V), err8 = rel_err(lg[2], lg[0], (size_t)e->V);
    printf("bf16 / q8 vs f32 K/V after 120 tokens: logits rel err %.2e / %.2e\n", err, err8);
    assert_true(err > 0 && err <= 1e-2);
    assert_true(err8 > 0 && err8 <= 3e-2);
    for (int t = 0; t < 3; t++) free(lg[t]);
}

/* The same prompt and decode rows with f32 and bf16 GDN states: logits within 1e-2 relative (bf16 keeps 8 bits of
 * each state value, rounded after every decode row and prefill chunk), 3e-2 where the decode matmuls round x to bf16
 * (1.45e-2 measured on the 4-bit fixture); a broken conversion would be far off. Restores the group's state type. */
static void test_gdn_state_types_close(void **state) {
    env *e = *state;
    const int keep = e->m->cfg.gdn_state_type;
    int32_t ids[120];
    make_prompt(ids, 120, e->V, 17);
    float *lg[2];
    int64_t bytes[2];
    for (int t = 0; t < 2; t++) {
        lg[t] = malloc((size_t)e->V * sizeof *lg[t]);
        e->m->cfg.gdn_state_type = t ? QSTATE_BF16 : QSTATE_F32;
        bytes[t] = qwen35_gdn_state_bytes(&e->m->cfg);
        qwen35_state *st = NULL;
        assert_ok(qwen35_state_create(e->m, 128, &st));
        assert_ok(prefill(e->m, st, ids, 100, 512, lg[t]));
        for (int i = 100; i < 120; i++) { /* decode rows: the recurrent rule, a rounding each */
            qrow r = {.stream = 0, .pos = i, .token = ids[i], .flags = QROW_LOGITS};
            assert_ok(qwen35_forward(e->m, &r, 1, &st, lg[t]));
        }
        qwen35_state_destroy(e->m, st);
    }
    e->m->cfg.gdn_state_type = keep;
    const double err = rel_err(lg[1], lg[0], (size_t)e->V);
    printf("bf16 vs f32 GDN states after 120 tokens: logits rel err %.2e; state bytes %lld vs %lld\n", err,
           (long long)bytes[1], (long long)bytes[0]);
    assert_true(err > 0 && err <= (bf16_decode() ? 3e-2 : 1e-2));
    assert_true(bytes[1] < bytes[0]); /* the recurrent states at half the bytes, the conv windows unchanged */
    for (int t = 0; t < 2; t++) free(lg[t]);
}

static void test_bad_batches(void **state) {
    env *e = *state;
    qwen35_state *x = NULL;
    assert_ok(qwen35_state_create(e->m, 8, &x));
    float *lg = malloc((size_t)e->V * 2 * sizeof *lg);
    qrow gap[2] = {{.stream = 0, .pos = 0, .token = 1, .flags = 0},
                   {.stream = 0, .pos = 2, .token = 1, .flags = QROW_LOGITS}};
    assert_int_equal(qwen35_forward(e->m, gap, 2, &x, lg), Q_EINVAL);
    assert_non_null(strstr(q_lasterr(), "does not follow"));
    qrow late = {.stream = 0, .pos = 3, .token = 1, .flags = QROW_LOGITS};
    assert_int_equal(qwen35_forward(e->m, &late, 1, &x, lg), Q_EINVAL);
    qrow badtok = {.stream = 0, .pos = 0, .token = e->V, .flags = QROW_LOGITS};
    assert_int_equal(qwen35_forward(e->m, &badtok, 1, &x, lg), Q_EINVAL);
    assert_non_null(strstr(q_lasterr(), "vocabulary"));
    qrow past_ctx = {.stream = 0, .pos = 8, .token = 1, .flags = QROW_LOGITS};
    assert_int_equal(qwen35_forward(e->m, &past_ctx, 1, &x, lg), Q_EINVAL);
    assert_int_equal(x->n_past, 0);
    free(lg);
    qwen35_state_destroy(e->m, x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_then_decode),
        cmocka_unit_test(test_chunk_cuts_exact),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_prompts_share_forward),
        cmocka_unit_test(test_k_rows_equal_k_passes),
        cmocka_unit_test(test_ids_on_backend),
        cmocka_unit_test(test_bad_batches),
        cmocka_unit_test(test_kv_types_close),
        cmocka_unit_test(test_gdn_state_types_close),
    };
    const int f32 = cmocka_run_group_tests_name("f32 K/V", tests, setup_f32, teardown);
    const int bf16 = cmocka_run_group_tests_name("bf16 K/V", tests, setup_bf16, teardown);
    const int q8 = cmocka_run_group_tests_name("q8 K/V", tests, setup_q8, teardown);
    return f32 + bf16 + q8 + cmocka_run_group_tests_name("bf16 K/V, bf16 GDN states", tests, setup_bf16_states, teardown);
}
