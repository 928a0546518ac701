/* test_cpu_attention.c: the CPU backend's causal GQA attention against a naive double reference,
 * with f32 and bf16 K/V caches: a bf16 cache holds each written value rounded to nearest even (checked
 * against a rounding written here) and attends exactly as an f32 cache holding the rounded rows does.
 * EXACT(batch): a seq alone vs with two others, and pools of 1, 2 and 32 threads, bit-identical. */
#include <math.h>
#include <stdio.h>

#include "backend_test_util.h"
#include "backend/cpu/cpu_internal.h"

enum { A_NQ = 4, A_NKV = 2, A_DIM = 20, A_CTX = 16, A_NS = 3, A_ROWS = 10, A_KVR = A_NKV * A_DIM };
static const qseq a_seqs[A_NS] = {{0, 5, 0, 0}, {5, 1, 7, 0}, {6, 4, 3, 0}};

/* q, k, v rows and, per seq, its caches: f32 history (and garbage past it) in kc / vc, the same values
 * as bf16 in kh / vh. */
typedef struct attn_case {
    float *q, *k, *v, *out;
    float *kc[A_NS], *vc[A_NS];
    uint16_t *kh[A_NS], *vh[A_NS];
} attn_case;

/* Round to nearest even, written out: the nearer of the two bf16 values around x, ties to the even one. */
static uint16_t ref_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    const double dl = fabs((double)x - (double)cpu_bf16_to_f32(lo)), dh = fabs((double)x - (double)cpu_bf16_to_f32(hi));
    return dl < dh ? lo : dh < dl ? hi : (lo & 1) ? hi : lo;
}

static void attn_case_make(trng *r, attn_case *c) {
    c->q = tfloats(A_ROWS * A_NQ * A_DIM);
    c->k = tfloats(A_ROWS * A_KVR);
    c->v = tfloats(A_ROWS * A_KVR);
    c->out = tfloats(A_ROWS * A_NQ * A_DIM);
    trng_fill(r, c->q, A_ROWS * A_NQ * A_DIM, -1, 1);
    trng_fill(r, c->k, A_ROWS * A_KVR, -1, 1);
    trng_fill(r, c->v, A_ROWS * A_KVR, -1, 1);
    for (int s = 0; s < A_NS; s++) { /* history and garbage beyond it */
        c->kc[s] = tfloats(A_CTX * A_KVR);
        c->vc[s] = tfloats(A_CTX * A_KVR);
        trng_fill(r, c->kc[s], A_CTX * A_KVR, -1, 1);
        trng_fill(r, c->vc[s], A_CTX * A_KVR, -1, 1);
        c->kh[s] = tcalloc(A_CTX * A_KVR, sizeof(uint16_t));
        c->vh[s] = tcalloc(A_CTX * A_KVR, sizeof(uint16_t));
        for (int i = 0; i < A_CTX * A_KVR; i++) c->kh[s][i] = ref_bf16(c->kc[s][i]), c->vh[s][i] = ref_bf16(c->vc[s][i]);
    }
}

static void attn_case_free(attn_case *c) {
    free(c->q); free(c->k); free(c->v); free(c->out);
    for (int s = 0; s < A_NS; s++) { free(c->kc[s]); free(c->vc[s]); free(c->kh[s]); free(c->vh[s]); }
}

/* Every value of the f32 history, k and v rounded to bf16 (what a bf16 cache makes of them). */
static void attn_case_round(attn_case *c) {
    for (int i = 0; i < A_ROWS * A_KVR; i++) c->k[i] = cpu_bf16_to_f32(ref_bf16(c->k[i])), c->v[i] = cpu_bf16_to_f32(ref_bf16(c->v[i]));
    for (int s = 0; s < A_NS; s++)
        for (int i = 0; i < A_CTX * A_KVR; i++)
            c->kc[s][i] = cpu_bf16_to_f32(c->kh[s][i]), c->vc[s][i] = cpu_bf16_to_f32(c->vh[s][i]);
}

/* attention over seqs [first, first + n) of a_seqs (rows re-based when alone) with the case's f32 or bf16
 * caches */
static qstatus attend(qbackend *be, attn_case *c, const qseq *seqs, int n, int s0, qwfmt fmt, float scale) {
    void *kc[A_NS], *vc[A_NS];
    for (int i = 0; i < n; i++) {
        kc[i] = fmt == QW_BF16 ? (void *)c->kh[s0 + i] : (void *)c->kc[s0 + i];
        vc[i] = fmt == QW_BF16 ? (void *)c->vh[s0 + i] : (void *)c->vc[s0 + i];
    }
    return be->ops->attention(be, c->q, c->k, c->v, seqs, n, kc, vc, fmt, A_NQ, A_NKV, A_DIM, scale, c->out);
}

static void test_attention(void **state) {
    (void)state;
    qbackend *be = tbackend(2);
    trng r = {8};
    attn_case c;
    attn_case_make(&r, &c);
    float scale = 1.0f / sqrtf((float)A_DIM);
    assert_ok(attend(be, &c, a_seqs, A_NS, 0, QW_F32, scale));
    double *want = tcalloc(A_DIM, sizeof(double));
    for (int s = 0; s < A_NS; s++)
        for (int t = 0; t < a_seqs[s].n_rows; t++) {
            int row = a_seqs[s].row0 + t, p = a_seqs[s].pos0 + t;
            assert_bits_equal(c.kc[s] + p * A_KVR, c.k + row * A_KVR, A_KVR);
            assert_bits_equal(c.vc[s] + p * A_KVR, c.v + row * A_KVR, A_KVR);
            for (int h = 0; h < A_NQ; h++) {
                int g = h / (A_NQ / A_NKV);
                const float *qh = c.q + (row * A_NQ + h) * A_DIM;
                double sc[A_CTX], m = -INFINITY, sum = 0;
                for (int j = 0; j <= p; j++) {
                    double d = 0;
                    for (int i = 0; i < A_DIM; i++) d += (double)qh[i] * c.kc[s][j * A_KVR + g * A_DIM + i];
                    sc[j] = d * scale;
                    if (sc[j] > m) m = sc[j];
                }
                for (int j = 0; j <= p; j++) sum += (sc[j] = exp(sc[j] - m));
                for (int i = 0; i < A_DIM; i++) want[i] = 0;
                for (int j = 0; j <= p; j++)
                    for (int i = 0; i < A_DIM; i++) want[i] += sc[j] / sum * c.vc[s][j * A_KVR + g * A_DIM + i];
                double err = tmax_diff(c.out + (row * A_NQ + h) * A_DIM, want, A_DIM, NULL);
                if (!(err < 1e-5)) fail_msg("attention seq %d row %d head %d: err %g", s, t, h, err);
            }
        }
    /* an empty seq (no cache) in the middle of the list changes nothing */
    const qseq with_empty[4] = {a_seqs[0], {5, 0, 0, 0}, a_seqs[1], a_seqs[2]};
    void *kc4[4] = {c.kc[0], NULL, c.kc[1], c.kc[2]}, *vc4[4] = {c.vc[0], NULL, c.vc[1], c.vc[2]};
    float *out2 = tfloats(A_ROWS * A_NQ * A_DIM);
    assert_ok(be->ops->attention(be, c.q, c.k, c.v, with_empty, 4, kc4, vc4, QW_F32, A_NQ, A_NKV, A_DIM, scale, out2));
    assert_bits_equal(out2, c.out, A_ROWS * A_NQ * A_DIM);
    free(out2);
    free(want);
    attn_case_free(&c);
    be->ops->destroy(be);
}

/* Past one tile of cached positions (the op widens 64 at a time): a seq at positions 130..132, one K/V head of
 * four q heads, dim 36 (vector blocks and a tail), f32 and bf16 caches, against the double reference; pools of
 * 1 and 32 threads (one item for the four heads, and one a head) give the same bits. */
static void test_attention_long_context(void **state) {
    (void)state;
    enum { NQ = 4, DIM = 36, POS0 = 130, ROWS = 3, CTX = 160 };
    trng r = {12};
    float *q = tfloats(ROWS * NQ * DIM), *k = tfloats(ROWS * DIM), *v = tfloats(ROWS * DIM);
    float *kc = tfloats(CTX * DIM), *vc = tfloats(CTX * DIM);
    float *out[2] = {tfloats(ROWS * NQ * DIM), tfloats(ROWS * NQ * DIM)};
    uint16_t *kh = tcalloc(CTX * DIM, sizeof(uint16_t)), *vh = tcalloc(CTX * DIM, sizeof(uint16_t));
    trng_fill(&r, q, ROWS * NQ * DIM, -1, 1);
    trng_fill(&r, k, ROWS * DIM, -1, 1);
    trng_fill(&r, v, ROWS * DIM, -1, 1);
    const float scale = 1.0f / 6.0f;
    const qseq sq = {0, ROWS, POS0, 0};
    double *sc = tcalloc(CTX, sizeof(double));
    for (int fi = 0; fi < 2; fi++) {
        const qwfmt fmt = fi ? QW_BF16 : QW_F32;
        for (int b = 0; b < 2; b++) {
            trng cr = {13}; /* the same history for both pools */
            trng_fill(&cr, kc, CTX * DIM, -1, 1);
            trng_fill(&cr, vc, CTX * DIM, -1, 1);
            for (int i = 0; i < CTX * DIM; i++) kh[i] = ref_bf16(kc[i]), vh[i] = ref_bf16(vc[i]);
            qbackend *be = tbackend(b ? 32 : 1);
            void *kcp = fi ? (void *)kh : (void *)kc, *vcp = fi ? (void *)vh : (void *)vc;
            assert_ok(be->ops->attention(be, q, k, v, &sq, 1, &kcp, &vcp, fmt, NQ, 1, DIM, scale, out[b]));
            be->ops->destroy(be);
        }
        assert_bits_equal(out[1], out[0], ROWS * NQ * DIM);
        for (int t = 0; t < ROWS; t++)
            for (int h = 0; h < NQ; h++) {
                const int p = POS0 + t;
                const float *qh = q + (t * NQ + h) * DIM;
                double m = -INFINITY, sum = 0, want[DIM] = {0};
                for (int j = 0; j <= p; j++) {
                    double d = 0;
                    for (int i = 0; i < DIM; i++)
                        d += (double)qh[i] * (fi ? cpu_bf16_to_f32(kh[j * DIM + i]) : kc[j * DIM + i]);
                    sc[j] = d * scale;
                    if (sc[j] > m) m = sc[j];
                }
                for (int j = 0; j <= p; j++) sum += (sc[j] = exp(sc[j] - m));
                for (int j = 0; j <= p; j++)
                    for (int i = 0; i < DIM; i++)
                        want[i] += sc[j] / sum * (fi ? cpu_bf16_to_f32(vh[j * DIM + i]) : vc[j * DIM + i]);
                double err = tmax_diff(out[0] + (t * NQ + h) * DIM, want, DIM, NULL);
                if (!(err < 1e-5)) fail_msg("long context (%s) row %d head %d: err %g", fi ? "bf16" : "f32", t, h, err);
            }
    }
    free(q); free(k); free(v); free(kc); free(vc); free(out[0]); free(out[1]); free(kh); free(vh); free(sc);
}

/* A bf16 cache: the new rows land rounded to nearest even (every other value untouched), and the output
 * is bitwise that of an f32 cache holding the rounded history and the rounded rows. */
static void test_attention_bf16_cache(void **state) {
    (void)state;
    qbackend *be = tbackend(2);
    trng r = {12};
    attn_case h, f;
    attn_case_make(&r, &h);
    r.s = 12;
    attn_case_make(&r, &f);
    const float scale = 1.0f / sqrtf((float)A_DIM);
    uint16_t *before[A_NS];
    for (int s = 0; s < A_NS; s++) before[s] = tcalloc(A_CTX * A_KVR, sizeof(uint16_t)), memcpy(before[s], h.kh[s], A_CTX * A_KVR * 2);
    assert_ok(attend(be, &h, a_seqs, A_NS, 0, QW_BF16, scale));
    for (int s = 0; s < A_NS; s++)
        for (int p = 0; p < A_CTX; p++) {
            const int t = p - a_seqs[s].pos0, row = a_seqs[s].row0 + t;
            const int written = t >= 0 && t < a_seqs[s].n_rows;
            for (int i = 0; i < A_KVR; i++) {
                const uint16_t want_k = written ? ref_bf16(h.k[row * A_KVR + i]) : before[s][p * A_KVR + i];
                if (h.kh[s][p * A_KVR + i] != want_k) fail_msg("seq %d pos %d elem %d: K %04x, want %04x", s, p, i, h.kh[s][p * A_KVR + i], want_k);
                if (written) assert_int_equal(h.vh[s][p * A_KVR + i], ref_bf16(h.v[row * A_KVR + i]));
            }
        }
    attn_case_round(&f);
    assert_ok(attend(be, &f, a_seqs, A_NS, 0, QW_F32, scale));
    assert_bits_equal(h.out, f.out, A_ROWS * A_NQ * A_DIM);
    for (int s = 0; s < A_NS; s++) free(before[s]);
    attn_case_free(&h);
    attn_case_free(&f);
    be->ops->destroy(be);
}

/* seq s run alone (its rows at row 0) gives the same bits as inside the 3-seq call, f32 and bf16 */
static void test_attention_batch_invariant(void **state) {
    (void)state;
    qbackend *be = tbackend(2);
    float scale = 0.25f;
    for (int fi = 0; fi < 2; fi++)
        for (int s = 0; s < A_NS; s++) {
            const qwfmt fmt = fi ? QW_BF16 : QW_F32;
            trng r = {9};
            attn_case all, one;
            attn_case_make(&r, &all);
            r.s = 9;
            attn_case_make(&r, &one);
            assert_ok(attend(be, &all, a_seqs, A_NS, 0, fmt, scale));
            qseq alone = a_seqs[s];
            int row0 = alone.row0, n = alone.n_rows;
            alone.row0 = 0;
            attn_case shifted = one; /* the seq's rows at row 0 */
            shifted.q = one.q + row0 * A_NQ * A_DIM, shifted.k = one.k + row0 * A_KVR, shifted.v = one.v + row0 * A_KVR;
            assert_ok(attend(be, &shifted, &alone, 1, s, fmt, scale));
            assert_bits_equal(shifted.out, all.out + row0 * A_NQ * A_DIM, n * A_NQ * A_DIM);
            assert_bits_equal(one.kc[s], all.kc[s], A_CTX * A_KVR);
            assert_memory_equal(one.kh[s], all.kh[s], A_CTX * A_KVR * sizeof(uint16_t));
            attn_case_free(&all);
            attn_case_free(&one);
        }
    be->ops->destroy(be);
}

/* pools of 1, 2 and 32 threads give the same bits, f32 and bf16 (32 threads also cut the items finer: one q head
 * an item instead of both of a K/V head's) */
static void test_attention_thread_count_invariant(void **state) {
    (void)state;
    const int threads[3] = {1, 2, 32};
    for (int fi = 0; fi < 2; fi++) {
        const qwfmt fmt = fi ? QW_BF16 : QW_F32;
        attn_case c[3];
        for (int b = 0; b < 3; b++) {
            qbackend *be = tbackend(threads[b]);
            trng r = {11};
            attn_case_make(&r, &c[b]);
            assert_ok(attend(be, &c[b], a_seqs, A_NS, 0, fmt, 0.3f));
            be->ops->destroy(be);
        }
        for (int b = 1; b < 3; b++) assert_bits_equal(c[b].out, c[0].out, A_ROWS * A_NQ * A_DIM);
        for (int b = 0; b < 3; b++) attn_case_free(&c[b]);
    }
}

static void test_attention_bad_arguments(void **state) {
    (void)state;
    qbackend *be = tbackend(1);
    float x[16] = {0}, y[16];
    qseq sq = {0, 1, 0, 0};
    void *kc[1] = {y}, *vc[1] = {y};
    assert_int_equal(be->ops->attention(be, x, x, x, &sq, 1, kc, vc, QW_F32, 3, 2, 8, 1.0f, y), Q_EINVAL);
    assert_int_equal(be->ops->attention(be, x, x, x, &sq, 1, kc, vc, QW_F16, 2, 2, 8, 1.0f, y), Q_EINVAL);
    sq.n_rows = -1;
    assert_int_equal(be->ops->attention(be, x, x, x, &sq, 1, kc, vc, QW_F32, 2, 2, 8, 1.0f, y), Q_EINVAL);
    be->ops->destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_bf16_cache),
        cmocka_unit_test(test_attention_batch_invariant),
        cmocka_unit_test(test_attention_thread_count_invariant),
        cmocka_unit_test(test_attention_long_context),
        cmocka_unit_test(test_attention_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
