/* test_cpu_simd.c: the CPU backend's SIMD forms give the scalar forms' bits. cpu_simd.c's AVX2 forms: the
 * dots for every length 0..77 (tails included) on values with infinities, subnormals and signed zeros
 * among them; weight rows of every layout they take (BF16 rows of all 65,536 bit patterns; 4- and 8-bit
 * AFFINE with F32, F16 and BF16 scales, groups 24 to 128, random bytes as codes). Then whole ops of a
 * backend with QUILL_CPU_SIMD=0 against one without (AVX-512's pairs where the CPU has AVX-512): the
 * matmul for every weight format and 1 to 5 and 19 input rows, and the gated delta rule, chunked and
 * recurrent, on head sizes that fill the vector blocks and leave tails (SSE, AVX2 and AVX-512 copies); attention,
 * both against its contract written out (cpu_dot, expf, cpu_axpy), with f32, bf16 and q8 caches. NaNs
 * compare as NaNs (which operand's payload an add keeps is the compiler's choice of operand order). Skipped where the CPU has no AVX2, as the backend then never takes these forms. */
#include <math.h>
#include <stdio.h>

#include "backend_test_util.h"
#include "backend/cpu/cpu_internal.h"

static int same_value(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return !memcmp(&a, &b, sizeof a);
}

static void assert_same_values(const float *a, const float *b, int64_t n, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (!same_value(a[i], b[i])) fail_msg("%s: element %lld: %a vs %a", what, (long long)i, (double)a[i], (double)b[i]);
}

static void require_avx2(void) {
    if (cpu_simd_level() < CPU_SIMD_AVX2) {
        printf("# no AVX2 on this CPU (or QUILL_CPU_SIMD=0): the matmul keeps the scalar forms\n");
        skip();
    }
}

/* Mostly values in [-1, 1], with an infinity, a NaN, a subnormal, a signed zero or a huge value
 * now and then, so that the rounding and the special cases are both exercised. */
static float odd_value(trng *r) {
    uint64_t k = trng_next(r) % 64;
    switch (k) {
    case 0: return INFINITY;
    case 1: return -INFINITY;
    case 2: return NAN;
    case 3: return ldexpf(1.0f, -140);
    case 4: return -0.0f;
    case 5: return 3e38f;
    default: return trng_unif(r, -1, 1);
    }
}

static void test_dots(void **state) {
    (void)state;
    require_avx2();
    trng r = {41};
    enum { N = 77 };
    float a[N], b[4][N];
    for (int rep = 0; rep < 40; rep++) {
        for (int i = 0; i < N; i++) {
            a[i] = rep % 2 ? odd_value(&r) : trng_unif(&r, -1, 1);
            for (int k = 0; k < 4; k++) b[k][i] = rep % 4 == 3 ? odd_value(&r) : trng_unif(&r, -2, 2);
        }
        for (int n = 0; n <= N; n++) {
            float want[4], got[4];
            cpu_dot4(a, b[0], b[1], b[2], b[3], n, want);
            cpu_dot4_avx2(a, b[0], b[1], b[2], b[3], n, got);
            assert_same_values(got, want, 4, "dot4");
            for (int k = 0; k < 4; k++) {
                float one = cpu_dot_avx2(a, b[k], n);
                assert_true(same_value(one, cpu_dot(a, b[k], n)));
            }
        }
    }
}

static void test_bf16_rows(void **state) {
    (void)state;
    require_avx2();
    uint16_t *w = tcalloc(65536, sizeof *w);
    for (uint32_t h = 0; h < 65536; h++) w[h] = (uint16_t)h;
    qweight W = {.fmt = QW_BF16, .n_out = 256, .n_in = 256, .w = w};
    float *want = tfloats(256), *got = tfloats(256);
    for (int64_t o = 0; o < W.n_out; o++) {
        cpu_weight_row(&W, o, want);
        assert_int_equal(cpu_weight_row_simd(CPU_SIMD_AVX2, &W, o, got), 1);
        assert_bits_equal(got, want, 256); /* a shift: NaNs keep their payloads too */
    }
    W.n_in = 100; /* not a multiple of 8: not taken */
    assert_int_equal(cpu_weight_row_simd(CPU_SIMD_AVX2, &W, 0, got), 0);
    assert_int_equal(cpu_weight_row_simd(CPU_SIMD_NONE, &W, 0, got), 0);
    free(w);
    free(want);
    free(got);
}

/* Scales and biases of format f: random bits around [lo, hi], now and then an odd value if odd. */
static void *make_sb(trng *r, qwfmt f, int64_t n, float lo, float hi, int odd) {
    void *p = tcalloc((size_t)n, qwfmt_elem_bytes(f));
    for (int64_t i = 0; i < n; i++) {
        float v = odd && trng_next(r) % 50 == 0 ? odd_value(r) : trng_unif(r, lo, hi);
        uint32_t u;
        memcpy(&u, &v, sizeof u);
        if (f == QW_F32) ((float *)p)[i] = v;
        else if (f == QW_BF16) ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
        else ((uint16_t *)p)[i] = (uint16_t)(0x2000 + trng_next(r) % 0x5000) | (trng_next(r) & 1 ? 0x8000 : 0);
    }
    return p;
}

static void make_affine(trng *r, int64_t n_out, int64_t n_in, int bits, int group, qwfmt sb, int odd, qweight *W) {
    int64_t bytes = n_out * n_in * bits / 8, n_groups = n_out * (n_in / group);
    unsigned char *w = tcalloc((size_t)bytes, 1);
    for (int64_t i = 0; i < bytes; i++) w[i] = (unsigned char)trng_next(r);
    *W = (qweight){.fmt = QW_AFFINE, .n_out = n_out, .n_in = n_in, .w = w, .sb_fmt = sb, .bits = bits,
                   .group = group};
    W->scales = make_sb(r, sb, n_groups, 0.001f, 0.2f, odd);
    W->biases = make_sb(r, sb, n_groups, -0.5f, 0.5f, odd);
}

static void free_weight(qweight *W) {
    free(W->w);
    free(W->scales);
    free(W->biases);
}

static void test_affine_rows(void **state) {
    (void)state;
    require_avx2();
    trng r = {42};
    const qwfmt sbs[3] = {QW_F32, QW_F16, QW_BF16};
    const int groups[4] = {24, 32, 64, 128};
    for (int bits = 4; bits <= 8; bits += 4)
        for (int s = 0; s < 3; s++)
            for (int g = 0; g < 4; g++) {
                qweight W;
                make_affine(&r, 9, 384, bits, groups[g], sbs[s], 1, &W);
                float want[384], got[384];
                for (int64_t o = 0; o < W.n_out; o++) {
                    cpu_weight_row(&W, o, want);
                    assert_int_equal(cpu_weight_row_simd(CPU_SIMD_AVX2, &W, o, got), 1);
                    char what[80];
                    snprintf(what, sizeof what, "%d-bit row %lld, group %d, sb %d", bits, (long long)o, groups[g], s);
                    assert_same_values(got, want, 384, what);
                }
                free_weight(&W);
            }
    qweight W;
    make_affine(&r, 2, 64, 3, 32, QW_BF16, 1, &W); /* 3 bits: not taken */
    float row[64];
    assert_int_equal(cpu_weight_row_simd(CPU_SIMD_AVX2, &W, 0, row), 0);
    free_weight(&W);
}

/* Two backends of 2 threads: one made with QUILL_CPU_SIMD=0, one without. */
static void scalar_and_simd(qbackend **scalar, qbackend **simd) {
    setenv("QUILL_CPU_SIMD", "0", 1);
    *scalar = tbackend(2);
    unsetenv("QUILL_CPU_SIMD");
    *simd = tbackend(2);
}

/* A backend made with QUILL_CPU_SIMD=0 and one made without it: the same matmul bits. */
static void test_matmul_with_and_without(void **state) {
    (void)state;
    require_avx2();
    qbackend *scalar, *simd;
    scalar_and_simd(&scalar, &simd);
    assert_int_equal(cpu_impl(scalar)->simd, CPU_SIMD_NONE);
    assert_int_equal(cpu_impl(simd)->simd, cpu_simd_level());
    trng r = {43};
    /* plain formats (n_in 203: no pairs), BF16 both ways, affine widths the pairs take (4, 8) and not (3); at n_in
     * 4096 the scratch path's blocks of input rows are 128 rows, so that 131 rows take two: its 64 groups a row get
     * no odd scales, which would make nearly every output a NaN */
    const struct { qwfmt fmt; int n_in, bits, group; } cases[] = {
        {QW_F32, 203, 0, 0},      {QW_F16, 203, 0, 0},      {QW_BF16, 203, 0, 0},      {QW_BF16, 256, 0, 0},
        {QW_AFFINE, 256, 3, 64},  {QW_AFFINE, 256, 4, 64},  {QW_AFFINE, 256, 4, 32},   {QW_AFFINE, 256, 8, 128},
        {QW_AFFINE, 4096, 4, 64}};
    for (size_t f = 0; f < sizeof cases / sizeof cases[0]; f++) {
        qweight W;
        const int64_t n_out = 37, n_in = cases[f].n_in;
        const qwfmt fmt = cases[f].fmt;
        if (fmt != QW_AFFINE) {
            W = (qweight){.fmt = fmt, .n_out = n_out, .n_in = n_in};
            W.w = tcalloc((size_t)(n_out * n_in), qwfmt_elem_bytes(fmt));
            for (int64_t i = 0; i < n_out * n_in; i++) {
                float v = trng_unif(&r, -1, 1);
                uint32_t u;
                memcpy(&u, &v, sizeof u);
                if (fmt == QW_F32) ((float *)W.w)[i] = v;
                else ((uint16_t *)W.w)[i] = fmt == QW_BF16 ? (uint16_t)(u >> 16) : (uint16_t)(0x2000 + u % 0x1800);
            }
        } else {
            make_affine(&r, n_out, n_in, cases[f].bits, cases[f].group, QW_BF16, n_in < 4096, &W);
        }
        /* each fused count (1..4); the scratch's dots of 1..4 rows; two blocks of input rows */
        static const int row_counts[] = {1, 2, 3, 4, 5, 6, 19, 131};
        for (size_t k = 0; k < sizeof row_counts / sizeof row_counts[0]; k++) {
            const int n = row_counts[k];
            float *x = tfloats(n * n_in), *y0 = tfloats(n * n_out), *y1 = tfloats(n * n_out);
            trng_fill(&r, x, n * n_in, -1, 1);
            assert_ok(scalar->ops->matmul(scalar, x, n, &W, y0));
            assert_ok(simd->ops->matmul(simd, x, n, &W, y1));
            assert_bits_equal(y1, y0, n * n_out);
            free(x);
            free(y0);
            free(y1);
        }
        if (fmt != QW_AFFINE) free(W.w);
        else free_weight(&W);
    }
    scalar->ops->destroy(scalar);
    simd->ops->destroy(simd);
}

/* The gated delta rule, chunked (a prompt) and recurrent (decode rows), with and without QUILL_CPU_SIMD=0:
 * the same outputs and states, bit for bit (its loops are compiled once an instruction set). Head sizes: small
 * ones (the blocks' scalar tails only) and dk 128 / dv 72 (whole 16- and 32-column blocks and a tail). */
static void gated_delta_case(qbackend *scalar, qbackend *simd, trng *r, qgdn_dims d) {
    const int64_t row = 2 * (int64_t)d.n_k_heads * d.k_dim + (int64_t)d.n_v_heads * d.v_dim;
    const int64_t s_floats = (int64_t)d.n_v_heads * d.k_dim * d.v_dim, n = 150;
    const qseq seqs[2] = {{0, 147, 30, 1}, {147, 3, 7, 0}}; /* a prompt over 3 chunks; 3 decode rows */
    float *qkv = tfloats(n * row), *g = tfloats(n * d.n_v_heads), *beta = tfloats(n * d.n_v_heads);
    trng_fill(r, qkv, n * row, -1.5f, 1.5f);
    trng_fill(r, g, n * d.n_v_heads, -2, 0);
    trng_fill(r, beta, n * d.n_v_heads, 0.01f, 0.99f);
    float *out0 = tfloats(n * d.n_v_heads * d.v_dim), *out1 = tfloats(n * d.n_v_heads * d.v_dim);
    float *S0[2], *S1[2];
    for (int k = 0; k < 2; k++) {
        S0[k] = tfloats(s_floats);
        trng_fill(r, S0[k], s_floats, -0.5f, 0.5f);
        S1[k] = tcopy(S0[k], s_floats);
    }
    assert_ok(scalar->ops->gated_delta(scalar, qkv, g, beta, seqs, 2, S0, d, out0));
    assert_ok(simd->ops->gated_delta(simd, qkv, g, beta, seqs, 2, S1, d, out1));
    assert_bits_equal(out1, out0, n * d.n_v_heads * d.v_dim);
    for (int k = 0; k < 2; k++) {
        assert_bits_equal(S1[k], S0[k], s_floats);
        free(S0[k]);
        free(S1[k]);
    }
    free(qkv);
    free(g);
    free(beta);
    free(out0);
    free(out1);
}

static void test_gated_delta_with_and_without(void **state) {
    (void)state;
    require_avx2();
    qbackend *scalar, *simd;
    scalar_and_simd(&scalar, &simd);
    trng r = {44};
    gated_delta_case(scalar, simd, &r, (qgdn_dims){2, 4, 32, 24, 0, 0, NULL});
    gated_delta_case(scalar, simd, &r, (qgdn_dims){1, 2, 128, 72, 0, 0, NULL});
    scalar->ops->destroy(scalar);
    simd->ops->destroy(simd);
}

/* Attention as its contract states it, written out: scores cpu_dot(q, k) * scale, their max, expf of each less it, the
 * sum in double, each weight over the sum in f32, then the weighted sum as cpu_axpy calls in position order, K and V
 * as qkv_decode_head gives them. The scalar and SIMD backends must both give exactly that, whatever rows and heads
 * their items block together (the tiles' rows of several rows of a seq; two or four heads a pass of the dots). */
static void attention_case(qbackend *scalar, qbackend *simd, trng *r, qwfmt fmt, int group, int dim) {
    enum { NKV = 2, NS = 2 };
    const qseq seqs[NS] = {{0, 19, 60, 0}, {19, 3, 0, 0}}; /* 19 rows over two tiles of 64 positions; 3 from 0 */
    const int nq = NKV * group, rows = 22, ctx = 80;
    const int64_t rb = qkv_row_bytes(fmt, NKV, dim);
    float *q = tfloats(rows * nq * dim), *k = tfloats(rows * NKV * dim), *v = tfloats(rows * NKV * dim);
    float *hist = tfloats(NKV * dim), *out[2] = {tfloats(rows * nq * dim), tfloats(rows * nq * dim)};
    float *want = tfloats(nq * dim), *sc = tfloats(ctx), *kr = tfloats(dim), *vr = tfloats(dim);
    unsigned char *cache[2][NS][2]; /* [backend][seq][k, v] */
    trng_fill(r, q, rows * nq * dim, -1, 1);
    trng_fill(r, k, rows * NKV * dim, -1, 1);
    trng_fill(r, v, rows * NKV * dim, -1, 1);
    for (int s = 0; s < NS; s++)
        for (int kv = 0; kv < 2; kv++) {
            cache[0][s][kv] = tcalloc((size_t)(ctx * rb), 1);
            for (int p = 0; p < seqs[s].pos0; p++) { /* the history before the call's rows */
                trng_fill(r, hist, NKV * dim, -1, 1);
                qkv_encode_row(fmt, hist, NKV, dim, cache[0][s][kv] + p * rb);
            }
            cache[1][s][kv] = tcalloc((size_t)(ctx * rb), 1);
            memcpy(cache[1][s][kv], cache[0][s][kv], (size_t)(ctx * rb));
        }
    const float scale = 0.125f;
    for (int b = 0; b < 2; b++) {
        void *kc[NS] = {cache[b][0][0], cache[b][1][0]}, *vc[NS] = {cache[b][0][1], cache[b][1][1]};
        qbackend *be = b ? simd : scalar;
        assert_ok(be->ops->attention(be, q, k, v, seqs, NS, kc, vc, fmt, nq, NKV, dim, scale, out[b]));
    }
    for (int s = 0; s < NS; s++)
        for (int t = 0; t < seqs[s].n_rows; t++) {
            const int row = seqs[s].row0 + t, p = seqs[s].pos0 + t;
            memset(want, 0, (size_t)(nq * dim) * sizeof *want);
            for (int h = 0; h < nq; h++) {
                const float *qh = q + ((int64_t)row * nq + h) * dim;
                float m = -INFINITY;
                for (int j = 0; j <= p; j++) {
                    qkv_decode_head(fmt, cache[0][s][0] + j * rb, NKV, dim, h / group, kr);
                    sc[j] = cpu_dot(qh, kr, dim) * scale;
                    if (sc[j] > m) m = sc[j];
                }
                double sum = 0.0;
                for (int j = 0; j <= p; j++) sum += sc[j] = expf(sc[j] - m);
                for (int j = 0; j <= p; j++) {
                    qkv_decode_head(fmt, cache[0][s][1] + j * rb, NKV, dim, h / group, vr);
                    /* cpu_axpy's sums written out: inlined here, its tail loop trips gcc's
                     * -Waggressive-loop-optimizations in a Release build */
                    const float w = sc[j] / (float)sum;
                    for (int e = 0; e < dim; e++) want[h * dim + e] += w * vr[e];
                }
            }
            for (int b = 0; b < 2; b++)
                assert_same_values(out[b] + (int64_t)row * nq * dim, want, nq * dim,
                                   b ? "attention, SIMD" : "attention, scalar");
        }
    for (int b = 0; b < 2; b++)
        for (int s = 0; s < NS; s++) free(cache[b][s][0]), free(cache[b][s][1]);
    free(q); free(k); free(v); free(hist); free(out[0]); free(out[1]); free(want); free(sc); free(kr); free(vr);
}

static void test_attention_with_and_without(void **state) {
    (void)state;
    require_avx2();
    qbackend *scalar, *simd;
    scalar_and_simd(&scalar, &simd);
    trng r = {45};
    const qwfmt fmts[3] = {QW_F32, QW_BF16, QW_Q8};
    for (int f = 0; f < 3; f++) {
        attention_case(scalar, simd, &r, fmts[f], 4, 64); /* heads in two pairs */
        attention_case(scalar, simd, &r, fmts[f], 3, 32); /* a pair and one */
        attention_case(scalar, simd, &r, fmts[f], 6, 48); /* pairs, then a pair */
        if (fmts[f] != QW_Q8) attention_case(scalar, simd, &r, fmts[f], 2, 36); /* a tail past the lanes */
    }
    scalar->ops->destroy(scalar);
    simd->ops->destroy(simd);
}

int main(void) {
    unsetenv("QUILL_CPU_SIMD");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dots),
        cmocka_unit_test(test_bf16_rows),
        cmocka_unit_test(test_affine_rows),
        cmocka_unit_test(test_matmul_with_and_without),
        cmocka_unit_test(test_gated_delta_with_and_without),
        cmocka_unit_test(test_attention_with_and_without),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
