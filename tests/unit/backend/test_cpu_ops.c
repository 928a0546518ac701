/* test_cpu_ops.c: the CPU backend's memory, formats, matmul/embed, norms, elementwise ops and RoPE,
 * each against a naive reference written here (double where it helps), plus the EXACT(batch) checks:
 * a row alone vs among 3 or 64 rows and a pool of 1 vs 2 threads, all bit-identical. Attention is in
 * test_cpu_attention.c, the gated delta rule and conv in test_cpu_gdn.c. */
#include <math.h>
#include <stdio.h>

#include "backend_test_util.h"
#include "backend/cpu/cpu_internal.h"

/* ---- formats ---------------------------------------------------------------------------------- */

static double ref_f16(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0) v = ldexp(m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void test_f16_conversion(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = cpu_f16_to_f32((uint16_t)h);
        double r = ref_f16((uint16_t)h);
        if (isnan(r)) {
            if (!isnan(f)) fail_msg("f16 %04x: want nan", h);
        } else if ((double)f != r || !signbit(f) != !signbit(r)) {
            fail_msg("f16 %04x: got %.9g want %.9g", h, (double)f, r);
        }
    }
    assert_int_equal(f32_bits(cpu_f16_to_f32(0x0000)), 0x00000000u);
    assert_int_equal(f32_bits(cpu_f16_to_f32(0x8000)), 0x80000000u);     /* -0 */
    assert_true(cpu_f16_to_f32(0x0001) == ldexpf(1.0f, -24));             /* smallest subnormal */
    assert_true(cpu_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24));          /* largest subnormal */
    assert_true(cpu_f16_to_f32(0x8001) == -ldexpf(1.0f, -24));
    assert_true(cpu_f16_to_f32(0x0400) == ldexpf(1.0f, -14));             /* smallest normal */
    assert_true(cpu_f16_to_f32(0x3c00) == 1.0f);
    assert_true(cpu_f16_to_f32(0xc000) == -2.0f);
    assert_true(cpu_f16_to_f32(0x7bff) == 65504.0f);
    assert_int_equal(f32_bits(cpu_f16_to_f32(0x7c00)), 0x7f800000u);     /* +inf */
    assert_int_equal(f32_bits(cpu_f16_to_f32(0xfc00)), 0xff800000u);     /* -inf */
    assert_int_equal(f32_bits(cpu_f16_to_f32(0x7e01)), 0x7fc02000u);     /* nan keeps its payload */
    assert_true(isnan(cpu_f16_to_f32(0x7c01)));
    assert_true(cpu_bf16_to_f32(0x3f80) == 1.0f);
    assert_true(cpu_bf16_to_f32(0xc040) == -3.0f);
    assert_int_equal(f32_bits(cpu_bf16_to_f32(0x7f80)), 0x7f800000u);
    unsigned char buf[5] = {0xaa, 0x00, 0x3c, 0x80, 0x3f}; /* unaligned loads */
    assert_true(cpu_load_elem(buf + 1, QW_F16, 0) == 1.0f);
    assert_true(cpu_load_elem(buf + 3, QW_BF16, 0) == 1.0f);
}

static void test_sizes_and_memory(void **state) {
    (void)state;
    assert_int_equal(qwfmt_elem_bytes(QW_F32), 4);
    assert_int_equal(qwfmt_elem_bytes(QW_F16), 2);
    assert_int_equal(qwfmt_elem_bytes(QW_BF16), 2);
    qweight W = {.fmt = QW_BF16, .n_out = 3, .n_in = 10};
    assert_int_equal(qweight_bytes(&W), 60);
    qweight A = {.fmt = QW_AFFINE, .n_out = 4, .n_in = 128, .bits = 3, .group = 64, .sb_fmt = QW_F16};
    assert_int_equal(qweight_bytes(&A), 4 * (128 * 3 / 8 + 2 * 2 * 2));

    qbackend *be = tbackend(2);
    assert_string_equal(be->ops->name, "cpu");
    void *p = NULL;
    assert_ok(be->ops->alloc(be, 1000, &p));
    assert_int_equal((uintptr_t)p % 64, 0);
    for (int i = 0; i < 1000; i++) assert_int_equal(((unsigned char *)p)[i], 0);
    char src[100], back[100];
    for (int i = 0; i < 100; i++) src[i] = (char)i;
    assert_ok(be->ops->upload(be, p, src, 100));
    assert_ok(be->ops->copy(be, (char *)p + 200, p, 100));
    assert_ok(be->ops->download(be, back, (char *)p + 200, 100));
    assert_memory_equal(src, back, 100);
    assert_ok(be->ops->zero(be, p, 100));
    assert_ok(be->ops->download(be, back, p, 100));
    for (int i = 0; i < 100; i++) assert_int_equal(back[i], 0);
    assert_ok(be->ops->sync(be));
    be->ops->free(be, p);
    be->ops->free(be, NULL);
    assert_int_equal(be->ops->upload(be, NULL, src, 4), Q_EINVAL);
    be->ops->destroy(be);
}

/* ---- weights ---------------------------------------------------------------------------------- */

typedef struct tweight {
    qweight W;
    float *deq; /* [n_out][n_in]: the values the weight stands for */
} tweight;

/* A random f16 of magnitude in [2^(e_lo-15), 2^(e_hi-15+1)); writes its bits, returns its value. */
static float rand_f16(trng *r, int e_lo, int e_hi, int allow_neg, uint16_t *bits) {
    uint16_t e = (uint16_t)(e_lo + (int)(trng_next(r) % (uint64_t)(e_hi - e_lo + 1)));
    uint16_t h = (uint16_t)((e << 10) | (trng_next(r) & 0x3ff));
    if (allow_neg && (trng_next(r) & 1)) h |= 0x8000;
    *bits = h;
    return (float)ref_f16(h);
}

/* n values of format f in [lo, hi] (f16: by exponent range); store[i] holds them, vals the floats */
static void *make_elems(trng *r, qwfmt f, int64_t n, float lo, float hi, float *vals) {
    void *store = tcalloc((size_t)n, qwfmt_elem_bytes(f));
    for (int64_t i = 0; i < n; i++) {
        float v = trng_unif(r, lo, hi);
        if (f == QW_F32) {
            ((float *)store)[i] = v;
        } else if (f == QW_BF16) {
            uint16_t b = (uint16_t)(f32_bits(v) >> 16);
            ((uint16_t *)store)[i] = b;
            v = cpu_bf16_to_f32(b);
        } else {
            uint16_t b;
            v = lo >= 0 ? rand_f16(r, 8, 11, 0, &b) : rand_f16(r, 9, 15, 1, &b);
            ((uint16_t *)store)[i] = b;
        }
        vals[i] = v;
    }
    return store;
}

static void make_plain(trng *r, qwfmt f, int64_t n_out, int64_t n_in, tweight *t) {
    memset(t, 0, sizeof *t);
    t->W = (qweight){.fmt = f, .n_out = n_out, .n_in = n_in};
    t->deq = tfloats(n_out * n_in);
    t->W.w = make_elems(r, f, n_out * n_in, -1.0f, 1.0f, t->deq);
}

static void make_affine(trng *r, int64_t n_out, int64_t n_in, int bits, int group, qwfmt sb, tweight *t) {
    memset(t, 0, sizeof *t);
    int64_t words = n_in * bits / 32, n_groups = n_in / group;
    uint32_t *w = tcalloc((size_t)(n_out * words), sizeof(uint32_t));
    float *scale = tfloats(n_out * n_groups), *bias = tfloats(n_out * n_groups);
    t->W = (qweight){.fmt = QW_AFFINE, .n_out = n_out, .n_in = n_in, .w = w, .sb_fmt = sb, .bits = bits,
                     .group = group};
    t->W.scales = make_elems(r, sb, n_out * n_groups, 0.01f, 0.1f, scale);
    t->W.biases = make_elems(r, sb, n_out * n_groups, -0.5f, 0.5f, bias);
    t->deq = tfloats(n_out * n_in);
    for (int64_t o = 0; o < n_out; o++) {
        for (int64_t i = 0; i < n_in; i++) {
            uint32_t code = (uint32_t)(trng_next(r) % (1u << bits));
            if (i == 0) code = (1u << bits) - 1; /* the largest code always appears */
            for (int b = 0; b < bits; b++) {  /* bit b of code i is stream bit i*bits + b */
                int64_t idx = i * bits + b;
                if ((code >> b) & 1) w[o * words + idx / 32] |= 1u << (idx % 32);
            }
            int64_t gi = o * n_groups + i / group;
            t->deq[o * n_in + i] = scale[gi] * (float)code + bias[gi];
        }
    }
    free(scale);
    free(bias);
}

static void free_tweight(tweight *t) {
    free(t->W.w);
    free(t->W.scales);
    free(t->W.biases);
    free(t->deq);
}

/* y against sum_i x[r][i] * deq[o][i] in double, relative to sum |x w| */
static void check_matmul(const float *x, int n, const tweight *t, const float *y, const char *what) {
    const int64_t n_in = t->W.n_in, n_out = t->W.n_out;
    for (int r = 0; r < n; r++)
        for (int64_t o = 0; o < n_out; o++) {
            double s = 0, a = 0;
            for (int64_t i = 0; i < n_in; i++) {
                s += (double)x[r * n_in + i] * t->deq[o * n_in + i];
                a += fabs((double)x[r * n_in + i] * t->deq[o * n_in + i]);
            }
            double err = fabs(y[r * n_out + o] - s);
            if (!(err <= 1e-5 * a + 1e-30))
                fail_msg("%s: y[%d][%lld] = %.9g, want %.9g", what, r, (long long)o, (double)y[r * n_out + o], s);
        }
}

static void test_matmul_plain(void **state) {
    (void)state;
    qbackend *be = tbackend(2);
    trng r = {1};
    const qwfmt fmts[3] = {QW_F32, QW_F16, QW_BF16};
    for (int f = 0; f < 3; f++) {
        tweight t;
        make_plain(&r, fmts[f], 37, 203, &t);
        int n = 5;
        float *x = tfloats(n * 203), *y = tfloats(n * 37), *e = tfloats(3 * 203);
        trng_fill(&r, x, n * 203, -1, 1);
        assert_ok(be->ops->matmul(be, x, n, &t.W, y));
        check_matmul(x, n, &t, y, "matmul plain");
        int32_t ids[3] = {36, 0, 17};
        assert_ok(be->ops->embed(be, &t.W, ids, 3, e));
        for (int k = 0; k < 3; k++) assert_bits_equal(e + k * 203, t.deq + ids[k] * 203, 203);
        free(x);
        free(y);
        free(e);
        free_tweight(&t);
    }
    be->ops->destroy(be);
}

static void test_matmul_affine_all_widths(void **state) {
    (void)state;
    qbackend *be = tbackend(2);
    trng r = {2};
    const int bits[6] = {2, 3, 4, 5, 6, 8}, groups[3] = {32, 64, 128};
    const qwfmt sbs[3] = {QW_F32, QW_F16, QW_BF16};
    const int64_t n_in = 256, n_out = 9;
    const int n = 3;
    float *x = tfloats(n * n_in), *y = tfloats(n * n_out), *e = tfloats(4 * n_in);
    for (int bi = 0; bi < 6; bi++)
        for (int gi = 0; gi < 3; gi++) {
            tweight t;
            make_affine(&r, n_out, n_in, bits[bi], groups[gi], sbs[(bi + gi) % 3], &t);
            trng_fill(&r, x, n * n_in, -1, 1);
            char what[64];
            snprintf(what, sizeof what, "affine bits %d group %d", bits[bi], groups[gi]);
            assert_ok(be->ops->matmul(be, x, n, &t.W, y));
            check_matmul(x, n, &t, y, what);
            int32_t ids[4] = {8, 0, 3, 8};
            assert_ok(be->ops->embed(be, &t.W, ids, 4, e));
            for (int k = 0; k < 4; k++)
                if (memcmp(e + k * n_in, t.deq + ids[k] * n_in, (size_t)n_in * sizeof(float)))
                    fail_msg("%s: embed row %d differs from the dequantized row", what, ids[k]);
            free_tweight(&t);
        }
    free(x);
    free(y);
    free(e);
    be->ops->destroy(be);
}

static void test_matmul_batch_invariant(void **state) {
    (void)state;
    qbackend *be = tbackend(2);
    trng r = {3};
    for (int f = 0; f < 4; f++) {
        tweight t;
        if (f < 3) make_plain(&r, (qwfmt[]){QW_F32, QW_F16, QW_BF16}[f], 70, 200, &t);
        else make_affine(&r, 70, 192, 4, 64, QW_BF16, &t);
        const int64_t n_in = t.W.n_in;
        float *x = tfloats(64 * n_in), *y64 = tfloats(64 * 70), *y3 = tfloats(3 * 70), *y1 = tfloats(70);
        trng_fill(&r, x, 64 * n_in, -1, 1);
        assert_ok(be->ops->matmul(be, x, 64, &t.W, y64));
        const int rows[4] = {0, 17, 40, 63};
        for (int k = 0; k < 4; k++) {
            assert_ok(be->ops->matmul(be, x + rows[k] * n_in, 1, &t.W, y1));
            assert_bits_equal(y1, y64 + rows[k] * 70, 70);
        }
        assert_ok(be->ops->matmul(be, x + 30 * n_in, 3, &t.W, y3));
        assert_bits_equal(y3, y64 + 30 * 70, 3 * 70);
        free(x);
        free(y64);
        free(y3);
        free(y1);
        free_tweight(&t);
    }
    be->ops->destroy(be);
}

/* cpu_dot4 is cpu_dot four times, bit for bit, for every length (tails included) */
static void test_dot4_is_dot(void **state) {
    (void)state;
    trng r = {12};
    float a[77], b[4][77];
    trng_fill(&r, a, 77, -1, 1);
    for (int k = 0; k < 4; k++) trng_fill(&r, b[k], 77, -1, 1);
    for (int n = 0; n <= 77; n++) {
        float out[4];
        cpu_dot4(a, b[0], b[1], b[2], b[3], n, out);
        for (int k = 0; k < 4; k++) {
            float one = cpu_dot(a, b[k], n);
            assert_memory_equal(&out[k], &one, sizeof one);
        }
    }
}

static void test_bad_arguments(void **state) {
    (void)state;
    qbackend *be = tbackend(1);
    trng r = {4};
    tweight t;
    make_affine(&r, 2, 64, 4, 32, QW_F16, &t);
    float x[128] = {0}, y[128];
    t.W.bits = 7;
    assert_int_equal(be->ops->matmul(be, x, 1, &t.W, y), Q_EINVAL);
    assert_true(strlen(q_lasterr()) > 0);
    t.W.bits = 4;
    t.W.group = 48;
    assert_int_equal(be->ops->matmul(be, x, 1, &t.W, y), Q_EINVAL);
    t.W.group = 32;
    int32_t bad = 2;
    assert_int_equal(be->ops->embed(be, &t.W, &bad, 1, y), Q_EINVAL);
    assert_int_equal(be->ops->matmul(be, x, -1, &t.W, y), Q_EINVAL);
    free_tweight(&t);
    int32_t pos = 0;
    assert_int_equal(be->ops->rope(be, x, 1, 1, 8, 5, &pos, 1e4f), Q_EINVAL);
    assert_int_equal(be->ops->rope(be, x, 1, 1, 8, 10, &pos, 1e4f), Q_EINVAL);
    assert_int_equal(be->ops->rmsnorm(be, x, 8, x, 2, 0, 1e-6f, y, 8), Q_EINVAL);
    assert_int_equal(be->ops->rmsnorm(be, x, 4, x, 2, 8, 1e-6f, y, 8), Q_EINVAL);
    be->ops->destroy(be);
}

/* ---- norms and elementwise -------------------------------------------------------------------- */

static void test_norms(void **state) {
    (void)state;
    qbackend *be = tbackend(2);
    trng r = {5};
    const int dim = 40, n_vec = 5, xs = 48, ys = 44;
    float *x = tfloats(n_vec * xs), *w = tfloats(dim), *y = tfloats(n_vec * ys);
    trng_fill(&r, x, n_vec * xs, -2, 2);
    trng_fill(&r, w, dim, 0.5f, 1.5f);
    assert_ok(be->ops->rmsnorm(be, x, xs, w, n_vec, dim, 1e-6f, y, ys));
    for (int v = 0; v < n_vec; v++) {
        double ss = 0;
        for (int d = 0; d < dim; d++) ss += (double)x[v * xs + d] * x[v * xs + d];
        double inv = 1.0 / sqrt(ss / dim + 1e-6);
        for (int d = 0; d < dim; d++) {
            double want = x[v * xs + d] * inv * w[d];
            assert_true(fabs(y[v * ys + d] - want) <= 2e-6 * (fabs(want) + 1e-3));
        }
    }
    float *xi = tcopy(x, n_vec * xs); /* in place gives the same bits */
    assert_ok(be->ops->rmsnorm(be, xi, xs, w, n_vec, dim, 1e-6f, xi, xs));
    for (int v = 0; v < n_vec; v++) assert_bits_equal(xi + v * xs, y + v * ys, dim);

    const int gd = 24, gn = 6;
    float *gx = tfloats(gn * gd), *gz = tfloats(gn * gd), *gy = tfloats(gn * gd);
    trng_fill(&r, gx, gn * gd, -2, 2);
    trng_fill(&r, gz, gn * gd, -4, 4);
    assert_ok(be->ops->gated_rmsnorm(be, gx, gz, w, gn, gd, 1e-6f, gy));
    for (int v = 0; v < gn; v++) {
        double ss = 0;
        for (int d = 0; d < gd; d++) ss += (double)gx[v * gd + d] * gx[v * gd + d];
        double inv = 1.0 / sqrt(ss / gd + 1e-6);
        for (int d = 0; d < gd; d++) {
            double z = gz[v * gd + d];
            double want = gx[v * gd + d] * inv * w[d] * (z / (1 + exp(-z)));
            assert_true(fabs(gy[v * gd + d] - want) <= 2e-6 * (fabs(want) + 1e-3));
        }
    }
    free(x); free(w); free(y); free(xi); free(gx); free(gz); free(gy);
    be->ops->destroy(be);
}

static void test_elementwise(void **state) {
    (void)state;
    qbackend *be = tbackend(2);
    trng r = {6};
    const int n = 50000;
    float *a = tfloats(n), *b = tfloats(n), *y = tfloats(n), *a0;
    trng_fill(&r, a, n, -10, 10);
    trng_fill(&r, b, n, -10, 10);
    a0 = tcopy(a, n);
    assert_ok(be->ops->swiglu(be, a, b, n, y));
    for (int i = 0; i < n; i++) {
        double want = a[i] / (1 + exp(-(double)a[i])) * b[i];
        assert_true(fabs(y[i] - want) <= 1e-6 * (fabs(want) + 1e-3));
    }
    assert_ok(be->ops->add(be, a, b, n));
    for (int i = 0; i < n; i++) assert_true(a[i] == a0[i] + b[i]);
    /* mul_sigmoid over strided gates: 3 vectors of 8, gate stride 16 */
    float out[24], out0[24], gate[48];
    trng_fill(&r, out, 24, -3, 3);
    trng_fill(&r, gate, 48, -8, 8);
    memcpy(out0, out, sizeof out);
    assert_ok(be->ops->mul_sigmoid(be, out, gate, 16, 3, 8));
    for (int v = 0; v < 3; v++)
        for (int d = 0; d < 8; d++) {
            double want = out0[v * 8 + d] / (1 + exp(-(double)gate[v * 16 + d]));
            assert_true(fabs(out[v * 8 + d] - want) <= 1e-6 * (fabs(want) + 1e-3));
        }
    free(a); free(b); free(y); free(a0);
    be->ops->destroy(be);
}

/* ---- RoPE ------------------------------------------------------------------------------------- */

static void test_rope(void **state) {
    (void)state;
    qbackend *be = tbackend(2);
    trng r = {7};
    const int n = 4, nh = 3, hd = 24, rot = 16, half = rot / 2;
    const int32_t pos[4] = {0, 1, 777, 100000};
    const float thetas[2] = {1e7f, 1e4f};
    float *x = tfloats(n * nh * hd), *x0 = tfloats(n * nh * hd);
    for (int ti = 0; ti < 2; ti++) {
        trng_fill(&r, x0, n * nh * hd, -2, 2);
        memcpy(x, x0, sizeof(float) * (size_t)(n * nh * hd));
        assert_ok(be->ops->rope(be, x, n, nh, hd, rot, pos, thetas[ti]));
        for (int k = 0; k < n; k++)
            for (int h = 0; h < nh; h++) {
                const float *a = x0 + (k * nh + h) * hd, *b = x + (k * nh + h) * hd;
                for (int j = 0; j < half; j++) {
                    /* HF: inv_freq in f32, angle = f32(pos) * inv_freq in f32 */
                    float inv = 1.0f / (float)pow(thetas[ti], (double)((float)(2 * j) / (float)rot));
                    double ang = (double)((float)pos[k] * inv);
                    if (pos[k] < 1000) /* and, where f32 angles are precise, the exact math */
                        assert_true(fabs(ang - pos[k] * pow(thetas[ti], -2.0 * j / rot)) < 1e-4);
                    double c = cos(ang), s = sin(ang);
                    double w1 = a[j] * c - a[j + half] * s, w2 = a[j + half] * c + a[j] * s;
                    assert_true(fabs(b[j] - w1) < 1e-5);
                    assert_true(fabs(b[j + half] - w2) < 1e-5);
                }
                assert_bits_equal(b + rot, a + rot, hd - rot); /* pass-through dims */
            }
    }
    free(x);
    free(x0);
    be->ops->destroy(be);
}

/* pools of 1 and 2 threads give the same bits */
/* argmax is sample_argmax's scan: first of equal maxima, NaNs never win, a NaN first gives 0. */
static void test_argmax(void **state) {
    (void)state;
    qbackend *be = NULL;
    assert_int_equal(cpu_backend_create(1, &be), Q_OK);
    const float inf = INFINITY;
    float x[6][5] = {{1, 3, 3, 2, 0},          {NAN, 5, 6, 7, 8}, {1, NAN, 4, NAN, 4},
                     {-inf, -inf, -inf, -inf, -inf}, {-0.0f, 0.0f, -1, -2, -3}, {2, 9, inf, inf, 1}};
    const int32_t want[6] = {1, 0, 2, 0, 0, 2};
    int32_t got[6] = {-1, -1, -1, -1, -1, -1};
    assert_int_equal(be->ops->argmax(be, &x[0][0], 6, 5, got), Q_OK);
    for (int r = 0; r < 6; r++) assert_int_equal(got[r], want[r]);
    assert_int_not_equal(be->ops->argmax(be, &x[0][0], 1, 0, got), Q_OK);
    be->ops->destroy(be);
}

static void test_thread_count_invariant(void **state) {
    (void)state;
    qbackend *b1 = tbackend(1), *b2 = tbackend(2);
    trng r = {10};
    tweight t;
    make_affine(&r, 100, 128, 4, 32, QW_F16, &t);
    float *x = tfloats(7 * 128), *y1 = tfloats(7 * 100), *y2 = tfloats(7 * 100);
    trng_fill(&r, x, 7 * 128, -1, 1);
    assert_ok(b1->ops->matmul(b1, x, 7, &t.W, y1));
    assert_ok(b2->ops->matmul(b2, x, 7, &t.W, y2));
    assert_bits_equal(y1, y2, 7 * 100);
    free(x); free(y1); free(y2);
    free_tweight(&t);

    b1->ops->destroy(b1);
    b2->ops->destroy(b2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_conversion),
        cmocka_unit_test(test_sizes_and_memory),
        cmocka_unit_test(test_matmul_plain),
        cmocka_unit_test(test_matmul_affine_all_widths),
        cmocka_unit_test(test_matmul_batch_invariant),
        cmocka_unit_test(test_dot4_is_dot),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_norms),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_thread_count_invariant),
        cmocka_unit_test(test_argmax),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
