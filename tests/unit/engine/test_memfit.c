/* test_memfit.c: the startup fit's arithmetic (engine/memfit.c) on the fixture model's config.
 * - the table's terms add up to `need`; the verdict follows usable = free - reserve;
 * - the default reserve is max(10 % of total, 2 GiB); an explicit one is taken as is;
 * - when it does not fit, the advised largest --context and --parallel fit and one step more does
 *   not; the table says DOES NOT FIT and names both;
 * - the CPU probe reads /proc/meminfo; the checkpoint probe skips nothing the fixture has;
 * - the prompt GEMM's dequantized weights are counted for 4-bit checkpoints only (memfit_dequant_copies). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/memfit.h"
#include "harness.h"
#include "model/qwen35.h"

#define GIB ((int64_t)1 << 30)

static qwen35_config cfg;
static char dir[1024];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "%s/models/gqa4-v2k", QUILL_FIXTURES);
    return qwen35_config_load(dir, &cfg) == Q_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    qwen35_config_free(&cfg);
    return 0;
}

static void test_sums_and_verdict(void **state) {
    (void)state;
    qmemfit_params p = {.n_ctx = 65536, .n_parallel = 4, .prefill_chunk = 512, .prompt_cache_gib = 0.5,
                        .reserve_gib = -1};
    qmemfit f;
    memfit_compute(&cfg, 1000000, &p, 8 * GIB, 16 * GIB, "test", &f);
    assert_true(f.need == f.weights + f.gdn + f.scratch + f.kv + f.prompt_cache);
    assert_true(f.kv == (int64_t)4 * 65536 * qwen35_kv_bytes_per_token(&cfg));
    const int64_t kv_f32 = f.kv; /* bf16 K/V (--kv-type bf16): half the bytes, the rest unchanged */
    cfg.kv_type = QKV_BF16;
    memfit_compute(&cfg, 1000000, &p, 8 * GIB, 16 * GIB, "test", &f);
    assert_true(2 * f.kv == kv_f32 && f.need == f.weights + f.gdn + f.scratch + f.kv + f.prompt_cache);
    cfg.kv_type = QKV_Q8; /* a byte a value and a 4-byte scale a head, rows padded to 16 bytes */
    memfit_compute(&cfg, 1000000, &p, 8 * GIB, 16 * GIB, "test", &f);
    assert_true(f.kv == (int64_t)4 * 65536 * qwen35_kv_bytes_per_token(&cfg) && f.kv > kv_f32 / 4 && f.kv < kv_f32 / 2);
    cfg.kv_type = QKV_F32;
    memfit_compute(&cfg, 1000000, &p, 8 * GIB, 16 * GIB, "test", &f);
    assert_true(f.gdn == 4 * qwen35_gdn_state_bytes(&cfg));
    /* bf16 GDN states (--gdn-state-type bf16): the recurrent states at half the bytes, the f32 conv windows unchanged */
    const int64_t gdn_f32 = f.gdn;
    int64_t n_gdn = 0;
    for (int l = 0; l < cfg.n_layers; l++) n_gdn += !cfg.layer_is_attn[l];
    const int64_t S = (int64_t)cfg.lin_n_v_heads * cfg.lin_k_dim * cfg.lin_v_dim;
    cfg.gdn_state_type = QSTATE_BF16;
    memfit_compute(&cfg, 1000000, &p, 8 * GIB, 16 * GIB, "test", &f);
    assert_true(f.gdn == gdn_f32 - 4 * n_gdn * S * 2 && f.need == f.weights + f.gdn + f.scratch + f.kv + f.prompt_cache);
    cfg.gdn_state_type = QSTATE_F32;
    memfit_compute(&cfg, 1000000, &p, 8 * GIB, 16 * GIB, "test", &f);
    assert_true(f.prompt_cache == GIB / 2);
    assert_true(f.reserve == 2 * GIB); /* 10 % of 16 GiB is less than 2 GiB */
    assert_true(f.usable == 6 * GIB);
    assert_true(f.fits);
    memfit_compute(&cfg, 1000000, &p, 8 * GIB, 64 * GIB, "test", &f);
    assert_true(f.reserve == 64 * GIB / 10);
    p.reserve_gib = 1;
    p.kv_budget_rows = 1000;
    memfit_compute(&cfg, 1000000, &p, 8 * GIB, 64 * GIB, "test", &f);
    assert_true(f.reserve == GIB && f.kv_budget_rows == 1000);
    char buf[2048];
    size_t n = memfit_table(&f, &p, buf, sizeof buf);
    assert_int_equal(n, strlen(buf));
    assert_non_null(strstr(buf, "fits"));
    assert_null(strstr(buf, "DOES NOT FIT"));
}

static void test_advice(void **state) {
    (void)state;
    /* 1 GiB of weights in 1.5 GiB usable: K/V of 1 KiB a row leaves room for ~0.48 GiB of rows */
    qmemfit_params p = {.n_ctx = 1 << 20, .n_parallel = 8, .prefill_chunk = 512, .reserve_gib = 0.5};
    qmemfit f, g;
    memfit_compute(&cfg, GIB, &p, 2 * GIB, 4 * GIB, "test", &f);
    assert_false(f.fits);
    assert_true(f.max_ctx > 0 && f.max_ctx % 256 == 0 && f.max_ctx < p.n_ctx);
    qmemfit_params q = p;
    q.n_ctx = f.max_ctx;
    memfit_compute(&cfg, GIB, &q, 2 * GIB, 4 * GIB, "test", &g);
    assert_true(g.fits);
    q.n_ctx = f.max_ctx + 256;
    memfit_compute(&cfg, GIB, &q, 2 * GIB, 4 * GIB, "test", &g);
    assert_false(g.fits);
    assert_true(f.max_parallel >= 0 && f.max_parallel < p.n_parallel);
    q = p;
    q.n_parallel = f.max_parallel + 1;
    memfit_compute(&cfg, GIB, &q, 2 * GIB, 4 * GIB, "test", &g);
    assert_false(g.fits);
    char buf[2048];
    memfit_table(&f, &p, buf, sizeof buf);
    printf("%s", buf);
    assert_non_null(strstr(buf, "DOES NOT FIT"));
    assert_non_null(strstr(buf, "largest --context"));
    assert_non_null(strstr(buf, "--parallel"));
    char small[16];
    assert_true(memfit_table(&f, &p, small, sizeof small) > sizeof small);
    assert_int_equal(strlen(small), sizeof small - 1);
}

static void test_probes(void **state) {
    (void)state;
    int64_t fr = 0, tot = 0, w = 0;
    const char *src = NULL;
    assert_ok(memfit_device_memory("cpu", 0, &fr, &tot, &src));
    assert_true(fr > 0 && tot >= fr);
    assert_non_null(strstr(src, "MemAvailable"));
    assert_int_equal(memfit_device_memory("tpu", 0, &fr, &tot, &src), Q_EINVAL);
    assert_ok(memfit_weights_bytes(dir, "cpu", &w, NULL));
    assert_true(w > 0);
    int64_t wc = 0, sk = -1; /* the fixture's head is too small for the CUDA backend's sketch */
    assert_ok(memfit_weights_bytes(dir, "cuda", &wc, &sk));
    assert_int_equal(wc, w);
    assert_int_equal(sk, 0);
}

/* The prompt GEMM's dequantized weights in the scratch: none for a bf16 checkpoint; for a 4-bit one on the CPU backend
 * (which counts CUDA's kernel scratch as an upper bound); and the term is at least the MLP's gate + up, two bf16
 * parts each. (On "cuda" the answer is the device's: test_cuda_ops' last test.) */
static void test_dequant_copies(void **state) {
    (void)state;
    assert_int_equal(memfit_dequant_copies(&cfg, "cpu"), 0); /* gqa4-v2k: bf16 */
    assert_int_equal(memfit_dequant_copies(&cfg, "cuda"), 0);
    qwen35_config q4;
    char d4[1024];
    snprintf(d4, sizeof d4, "%s/models/gqa4-v2k-mlx4", QUILL_FIXTURES);
    assert_ok(qwen35_config_load(d4, &q4));
    assert_int_equal(memfit_dequant_copies(&q4, "cpu"), 1);
    qwen35_config_free(&q4);
    qmemfit_params p = {.n_ctx = 4096, .n_parallel = 4, .prefill_chunk = 512, .reserve_gib = -1};
    qmemfit with, without;
    memfit_compute(&cfg, 1000000, &p, 8 * GIB, 16 * GIB, "test", &with);
    p.no_dequant_copies = 1;
    memfit_compute(&cfg, 1000000, &p, 8 * GIB, 16 * GIB, "test", &without);
    assert_true(with.scratch - without.scratch >= 4LL * 2 * cfg.intermediate * cfg.hidden * 3 / 2);
    assert_true(with.need - without.need == with.scratch - without.scratch);
}

/* The sketch of a bf16 head the CUDA backend holds (qwen35_open): the 9B's, none for small heads or rows of other
 * lengths, none with QUILL_HEAD_SKETCH=0. */
static void test_head_sketch_bytes(void **state) {
    (void)state;
    const int64_t b = qwen35_head_sketch_bytes(248320, 4096);
    assert_true(b >= 248320LL * 4096 * 1065 / 1000 && b < 248320LL * 4096 * 11 / 10);
    assert_int_equal(qwen35_head_sketch_bytes(1024, 128), 0);
    assert_int_equal(qwen35_head_sketch_bytes(248320, 4000), 0);
    setenv("QUILL_HEAD_SKETCH", "0", 1);
    assert_int_equal(qwen35_head_sketch_bytes(248320, 4096), 0);
    unsetenv("QUILL_HEAD_SKETCH");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sums_and_verdict),
        cmocka_unit_test(test_advice),
        cmocka_unit_test(test_probes),
        cmocka_unit_test(test_dequant_copies),
        cmocka_unit_test(test_head_sketch_bytes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
