/* test_quantize.c: `quill quantize` against the MLX-format reference. The bundled model
 * (models/qwen35-tiny) is the bf16 copy of the gqa4-v2k fixture, and tests/fixtures/models/gqa4-v2k-mlx4
 * was quantized from those same bf16 weights by tools/goldens/make_model_goldens.py, which follows
 * mlx.core.quantize (mlx/backend/cpu/quantized.cpp). So every quantized tensor (codes, scales,
 * biases) quill writes must equal the reference byte for byte, and the result must load and run.
 * (Norms and A_log are not compared: the reference added 1 in f32 before rounding, and kept A_log f32.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/safetensors.h"
#include "harness.h"
#include "model/qwen35.h"

static void test_quantize_matches_reference(void **state) {
    (void)state;
    char dir[] = "/tmp/quill-quantize-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char out[1100], cmd[4096];
    snprintf(out, sizeof out, "%s/q4", dir);
    snprintf(cmd, sizeof cmd, "'%s' quantize '%s/models/qwen35-tiny' '%s' --bits 4 --group-size 64 2>/dev/null",
             QUILL_BINARY, QUILL_SOURCE_DIR, out);
    assert_int_equal(system(cmd), 0);

    st_set *got = NULL, *want = NULL;
    assert_ok(st_open_dir(out, &got));
    char ref[1100];
    snprintf(ref, sizeof ref, "%s/models/gqa4-v2k-mlx4", QUILL_FIXTURES);
    assert_ok(st_open_dir(ref, &want));
    int compared = 0;
    for (int i = 0; i < st_count(want); i++) {
        const st_tensor *w = st_at(want, i);
        size_t n = strlen(w->name);
        int quantized_part = (n > 7 && !strcmp(w->name + n - 7, ".scales")) || (n > 7 && !strcmp(w->name + n - 7, ".biases")) ||
                             (w->dtype == ST_U32);
        if (!quantized_part) continue;
        const st_tensor *g = st_find(got, w->name);
        if (!g) fail_msg("quantize wrote no %s", w->name);
        assert_int_equal(g->dtype, w->dtype);
        assert_int_equal(g->n_bytes, w->n_bytes);
        if (memcmp(g->data, w->data, w->n_bytes) != 0) fail_msg("%s differs from the MLX-format reference", w->name);
        compared++;
    }
    assert_int_equal(compared, 64 * 3); /* 64 quantized matrices: codes, scales, biases */
    st_close(got);
    st_close(want);

    qbackend *be = NULL; /* and it loads and runs */
    assert_ok(cpu_backend_create(1, &be));
    qwen35_model *m = NULL;
    assert_ok(qwen35_open(out, be, &m));
    assert_int_equal(m->w.layers[0].gate_proj.fmt, QW_AFFINE);
    qwen35_close(m);
    be->ops->destroy(be);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_quantize_matches_reference)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
