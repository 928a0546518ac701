/* test_kv_format.c: the K/V cache row formats (backend.h qkv_row_bytes): the q8 encoding against its rule
 * written out in double (each code the nearest integer to x / scale within the f32 rounding of 127 / amax,
 * the largest magnitude at +-127, |decoded - x| <= scale / 2), its special heads (zeros, tiny, inf, NaN),
 * the row sizes, and the CPU attention over a q8 cache: the new rows land encoded, and the output is bitwise
 * that of an f32 cache holding the decoded rows. */
#include <math.h>
#include <stdio.h>

#include "backend_test_util.h"

static void test_row_bytes(void **state) {
    (void)state;
    assert_int_equal(qkv_row_bytes(QW_F32, 2, 20), 160);
    assert_int_equal(qkv_row_bytes(QW_BF16, 4, 256), 2048);
    assert_int_equal(qkv_row_bytes(QW_Q8, 4, 256), 1040); /* 1024 codes + 4 scales */
    assert_int_equal(qkv_row_bytes(QW_Q8, 2, 32), 80);    /* 64 + 8, padded to 16 */
    assert_int_equal(qkv_row_bytes(QW_Q8, 2, 20), 0);     /* dim must be a multiple of 16 */
    assert_int_equal(qkv_row_bytes(QW_F16, 2, 32), 0);    /* not a K/V format */
    assert_int_equal(qkv_row_bytes(QW_Q8, 0, 32), 0);
}

static void check_head(const float *x, int dim) {
    int8_t codes[256];
    float scale, back[256];
    qkv_q8_encode_head(x, dim, codes, &scale);
    double amax = 0;
    for (int d = 0; d < dim; d++) amax = fmax(amax, fabs((double)x[d]));
    assert_true(fabs((double)scale - amax / 127) <= amax / 127 * 1e-7);
    int at_max = 0;
    for (int d = 0; d < dim; d++) {
        const double want = (double)x[d] * 127 / amax; /* the code's real value */
        if (!(fabs(codes[d] - want) <= 0.5 + 1e-5)) fail_msg("elem %d: code %d for %.6f", d, codes[d], want);
        at_max += fabs((double)x[d]) == amax && abs(codes[d]) == 127;
    }
    assert_true(at_max >= 1);
    /* a row of two such heads decodes to code * scale, within scale / 2 of x */
    unsigned char row[2 * 256 + 16];
    float xx[512];
    for (int d = 0; d < dim; d++) xx[d] = 0.5f * x[d], xx[dim + d] = x[d];
    qkv_encode_row(QW_Q8, xx, 2, dim, row);
    qkv_decode_head(QW_Q8, row, 2, dim, 1, back);
    assert_memory_equal(row + dim, codes, (size_t)dim);
    for (int d = 0; d < dim; d++) {
        assert_true(back[d] == (float)codes[d] * scale);
        assert_true(fabs((double)back[d] - x[d]) <= scale * (0.5 + 1e-5));
    }
}

static void test_q8_encode(void **state) {
    (void)state;
    trng r = {5};
    float x[256];
    for (int it = 0; it < 200; it++) {
        const int dim = 16 * (1 + it % 16);
        const float mag = powf(10.0f, (float)(it % 13) - 6.0f);
        trng_fill(&r, x, dim, -mag, mag);
        if (it % 3 == 0) x[it % dim] = 7.5f * mag; /* an outlier */
        check_head(x, dim);
    }
    for (int d = 0; d < 32; d++) x[d] = (float)(d - 16) * 0.125f; /* a ramp: its largest magnitude is negative */
    check_head(x, 32);
}

static void test_q8_special_heads(void **state) {
    (void)state;
    float x[32] = {0}, back[32];
    int8_t codes[32];
    float scale;
    qkv_q8_encode_head(x, 32, codes, &scale);
    assert_true(scale == 0.0f);
    for (int d = 0; d < 32; d++) assert_int_equal(codes[d], 0);
    x[3] = 1e-31f, x[9] = -2e-31f; /* below the smallest kept magnitude */
    qkv_q8_encode_head(x, 32, codes, &scale);
    assert_true(scale == 0.0f);
    x[5] = INFINITY;
    qkv_q8_encode_head(x, 32, codes, &scale);
    assert_true(isnan(scale));
    x[5] = NAN;
    unsigned char row[48];
    qkv_encode_row(QW_Q8, x, 1, 32, row);
    qkv_decode_head(QW_Q8, row, 1, 32, 0, back);
    for (int d = 0; d < 32; d++) assert_true(isnan(back[d]));
    for (int i = 36; i < 48; i++) assert_int_equal(row[i], 0); /* the padding is written */
}

/* Two seqs over q8 caches (seq 0 prefills rows 0..5, seq 1 decodes 2 rows after a history of 9 positions):
 * the caches hold qkv_encode_row of each new row and the history untouched, and the output is bitwise an
 * f32 cache's holding the decoded rows (history and new rows alike). */
enum { Q_NQ = 4, Q_NKV = 2, Q_DIM = 32, Q_CTX = 12, Q_KVR = Q_NKV * Q_DIM, Q_ROWS = 8 };

static void test_q8_attention(void **state) {
    (void)state;
    qbackend *be = tbackend(2);
    trng r = {21};
    const int64_t RB = qkv_row_bytes(QW_Q8, Q_NKV, Q_DIM);
    const qseq seqs[2] = {{0, 6, 0, 1}, {6, 2, 9, 0}};
    float *q = tfloats(Q_ROWS * Q_NQ * Q_DIM), *k = tfloats(Q_ROWS * Q_KVR), *v = tfloats(Q_ROWS * Q_KVR);
    float *out = tfloats(Q_ROWS * Q_NQ * Q_DIM), *ref = tfloats(Q_ROWS * Q_NQ * Q_DIM), *hist = tfloats(Q_KVR);
    trng_fill(&r, q, Q_ROWS * Q_NQ * Q_DIM, -1, 1);
    trng_fill(&r, k, Q_ROWS * Q_KVR, -2, 2);
    trng_fill(&r, v, Q_ROWS * Q_KVR, -0.5f, 0.5f);
    unsigned char *c8[2][2], *before[2][2];
    float *cf[2][2];
    for (int s = 0; s < 2; s++)
        for (int kv = 0; kv < 2; kv++) {
            c8[s][kv] = tcalloc(Q_CTX, (size_t)RB);
            before[s][kv] = tcalloc(Q_CTX, (size_t)RB);
            cf[s][kv] = tfloats(Q_CTX * Q_KVR);
            for (int p = 0; p < Q_CTX; p++) { /* a history (and garbage past it) */
                trng_fill(&r, hist, Q_KVR, -1, 1);
                qkv_encode_row(QW_Q8, hist, Q_NKV, Q_DIM, c8[s][kv] + p * RB);
            }
            memcpy(before[s][kv], c8[s][kv], (size_t)(Q_CTX * RB));
        }
    void *kc[2] = {c8[0][0], c8[1][0]}, *vc[2] = {c8[0][1], c8[1][1]};
    const float scale = 1.0f / sqrtf((float)Q_DIM);
    assert_ok(be->ops->attention(be, q, k, v, seqs, 2, kc, vc, QW_Q8, Q_NQ, Q_NKV, Q_DIM, scale, out));
    unsigned char want[Q_KVR + 16];
    for (int s = 0; s < 2; s++)
        for (int p = 0; p < Q_CTX; p++) {
            const int t = p - seqs[s].pos0, row = seqs[s].row0 + t, written = t >= 0 && t < seqs[s].n_rows;
            for (int kv = 0; kv < 2; kv++) {
                const unsigned char *got = c8[s][kv] + p * RB;
                if (written) qkv_encode_row(QW_Q8, (kv ? v : k) + row * Q_KVR, Q_NKV, Q_DIM, want);
                assert_memory_equal(got, written ? want : before[s][kv] + p * RB, (size_t)RB);
                for (int h = 0; h < Q_NKV; h++) qkv_decode_head(QW_Q8, got, Q_NKV, Q_DIM, h, cf[s][kv] + p * Q_KVR + h * Q_DIM);
            }
        }
    /* the f32 reference: k, v replaced by their decoded rows, caches by the decoded history */
    for (int s = 0; s < 2; s++)
        for (int t = 0; t < seqs[s].n_rows; t++) {
            const int row = seqs[s].row0 + t, p = seqs[s].pos0 + t;
            memcpy(k + row * Q_KVR, cf[s][0] + p * Q_KVR, Q_KVR * sizeof(float));
            memcpy(v + row * Q_KVR, cf[s][1] + p * Q_KVR, Q_KVR * sizeof(float));
        }
    void *kf[2] = {cf[0][0], cf[1][0]}, *vf[2] = {cf[0][1], cf[1][1]};
    assert_ok(be->ops->attention(be, q, k, v, seqs, 2, kf, vf, QW_F32, Q_NQ, Q_NKV, Q_DIM, scale, ref));
    assert_bits_equal(out, ref, Q_ROWS * Q_NQ * Q_DIM);
    /* a head dim q8 cannot hold is refused */
    assert_int_equal(be->ops->attention(be, q, k, v, seqs, 2, kc, vc, QW_Q8, Q_NQ, Q_NKV, 20, scale, out), Q_EINVAL);
    for (int s = 0; s < 2; s++)
        for (int kv = 0; kv < 2; kv++) free(c8[s][kv]), free(before[s][kv]), free(cf[s][kv]);
    free(q); free(k); free(v); free(out); free(ref); free(hist);
    be->ops->destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_bytes),
        cmocka_unit_test(test_q8_encode),
        cmocka_unit_test(test_q8_special_heads),
        cmocka_unit_test(test_q8_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
