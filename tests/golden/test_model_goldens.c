/* test_model_goldens.c: the CPU forward pass against transformers (fp32) on the tiny random models of
 * tools/goldens/make_model_goldens.py: last-position logits within 1e-4 relative error (fp32
 * weights; the MLX 4-bit model against its own dequantized reference, same bound: both sides
 * dequantize to the same fp32 values) and 32-token greedy continuations identical. The prompts are
 * prefilled in chunks of 64 rows, so the 150-token prompt crosses two chunk boundaries. */
#include "model_fixture.h"

#include "engine/generate.h"

#define LOGIT_TOL 1e-4

static void check_model(const char *name) {
    fixture fx;
    fixture_load(name, &fx);
    qbackend *be = NULL;
    assert_ok(test_backend_create(&be));
    qwen35_model *m = NULL;
    assert_ok(qwen35_open(fx.dir, be, &m));
    assert_int_equal(m->cfg.vocab_size, fx.vocab);
    float *logits = malloc((size_t)fx.vocab * sizeof *logits);
    assert_non_null(logits);
    for (int i = 0; i < fx.n_prompts; i++) {
        fixture_prompt *p = &fx.prompts[i];
        qwen35_state *st = NULL;
        assert_ok(qwen35_state_create(m, p->n_ids + p->n_greedy, &st));
        qgen_params gp = {.n_predict = p->n_greedy, .prefill_chunk = 64, .ignore_eos = 1,
                          .sampling = qsampling_default()};
        int32_t out[256];
        qgen_result res;
        assert_true(p->n_greedy <= 256);
        assert_ok(generate(m, st, p->ids, p->n_ids, &gp, out, logits, &res));
        double e = rel_err(logits, p->logits, (size_t)fx.vocab);
        printf("%-22s prompt %d (%3d ids): logits rel err %.2e\n", name, i, p->n_ids, e);
        if (!(e <= LOGIT_TOL)) fail_msg("%s prompt %d: logits rel err %.3e > %.0e", name, i, e, LOGIT_TOL);
        assert_int_equal(res.n_tokens, p->n_greedy);
        for (int t = 0; t < p->n_greedy; t++)
            if (out[t] != p->greedy[t])
                fail_msg("%s prompt %d: greedy token %d is %d, transformers says %d", name, i, t, out[t], p->greedy[t]);
        if (p->logits_all) { /* every position of one pass */
            qwen35_state_reset(m, st);
            qrow *rows = calloc((size_t)p->n_ids, sizeof *rows);
            float *all = malloc((size_t)p->n_ids * fx.vocab * sizeof *all);
            assert_non_null(rows);
            assert_non_null(all);
            for (int r = 0; r < p->n_ids; r++)
                rows[r] = (qrow){.stream = 0, .pos = r, .token = p->ids[r], .flags = QROW_PREFILL | QROW_LOGITS};
            assert_ok(qwen35_forward(m, rows, p->n_ids, &st, all));
            for (int r = 0; r < p->n_ids; r++) {
                double er = rel_err(all + (size_t)r * fx.vocab, p->logits_all + (size_t)r * fx.vocab, (size_t)fx.vocab);
                if (!(er <= LOGIT_TOL)) fail_msg("%s prompt %d position %d: rel err %.3e", name, i, r, er);
            }
            free(rows);
            free(all);
        }
        qwen35_state_destroy(m, st);
    }
    free(logits);
    qwen35_close(m);
    be->ops->destroy(be);
    fixture_free(&fx);
}

static void test_flat(void **s) { (void)s; check_model("flat-3gdn1attn"); }
static void test_nested(void **s) { (void)s; check_model("nested-vision-mtp"); }
static void test_gqa(void **s) { (void)s; check_model("gqa4-v2k"); }
static void test_tied(void **s) { (void)s; check_model("tied"); }
static void test_mlx4(void **s) { (void)s; check_model("gqa4-v2k-mlx4"); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flat), cmocka_unit_test(test_nested), cmocka_unit_test(test_gqa),
        cmocka_unit_test(test_tied), cmocka_unit_test(test_mlx4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
