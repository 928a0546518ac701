/* test_cuda_ops.c: every CUDA op against the CPU reference on random inputs (relative error
 * max|cuda - cpu| / max|cpu| under each op's bound), and EXACT(batch) on the GPU: a row or a seq gives
 * bit-identical results alone and among others. Built when nvcc is found; skips (exit 77) without a
 * GPU. Run on the GPU machine by tests/cuda/run.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device.h"

static qbackend *cpu, *gpu;
static int n_fail, n_pass;
static unsigned rng = 12345u;

static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

static void die(const char *what) {
    fprintf(stderr, "FATAL %s: %s\n", what, q_lasterr());
    exit(1);
}
#define OK(x) do { if ((x) != Q_OK) die(#x); } while (0)

/* A buffer mirrored on both backends. */
typedef struct buf { size_t bytes; void *c, *g; } buf;

static buf mk(size_t bytes, const void *host) {
    buf b = {bytes, NULL, NULL};
    OK(cpu->ops->alloc(cpu, bytes, &b.c));
    OK(gpu->ops->alloc(gpu, bytes, &b.g));
    if (host) {
        OK(cpu->ops->upload(cpu, b.c, host, bytes));
        OK(gpu->ops->upload(gpu, b.g, host, bytes));
    }
    return b;
}
static buf mk_rand(size_t n, float scale) {
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = frand() * scale;
    buf b = mk(n * sizeof(float), h);
    free(h);
    return b;
}
static void rm(buf b) { cpu->ops->free(cpu, b.c); gpu->ops->free(gpu, b.g); }

/* Compares the float contents of b on both backends. */
static void expect_close(const char *name, buf b, double tol) {
    size_t n = b.bytes / sizeof(float);
    float *x = malloc(b.bytes), *y = malloc(b.bytes);
    OK(cpu->ops->download(cpu, x, b.c, b.bytes));
    OK(gpu->ops->download(gpu, y, b.g, b.bytes));
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)x[i] - y[i]);
        if (!(d <= num)) num = d;
        if (fabs(x[i]) > den) den = fabs(x[i]);
    }
    double e = den > 0 ? num / den : num;
    int ok = e <= tol;
    printf("| %-40s | %9.2e | %7.0e | %s |\n", name, e, tol, ok ? "ok" : "FAIL");
    ok ? n_pass++ : n_fail++;
    free(x);
    free(y);
}

static void expect_same(const char *name, const void *a, const void *b, size_t bytes) {
    int ok = memcmp(a, b, bytes) == 0;
    printf("| %-40s | %9s | %7s | %s |\n", name, ok ? "bitwise" : "differs", "exact", ok ? "ok" : "FAIL");
    ok ? n_pass++ : n_fail++;
}

static void bf16_from(const float *f, uint16_t *o, size_t n) {
    for (size_t i = 0; i < n; i++) { uint32_t u; memcpy(&u, &f[i], 4); o[i] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16); }
}

/* A weight on both backends: fmt F32, BF16, or AFFINE with bits/group. */
typedef struct wpair { qweight c, g; buf w, s, b; } wpair;
static wpair mk_weight(qwfmt fmt, int64_t n_out, int64_t n_in, int bits, int group) {
    wpair p;
    memset(&p, 0, sizeof p);
    size_t n = (size_t)(n_out * n_in);
    if (fmt == QW_F32) p.w = mk_rand(n, 0.1f);
    else if (fmt == QW_BF16) {
        float *f = malloc(n * 4); uint16_t *h = malloc(n * 2);
        for (size_t i = 0; i < n; i++) f[i] = frand() * 0.1f;
        bf16_from(f, h, n);
        p.w = mk(n * 2, h);
        free(f); free(h);
    } else {
        size_t words = (size_t)(n_out * n_in * bits / 32), ng = (size_t)(n_out * n_in / group);
        uint32_t *h = malloc(words * 4);
        for (size_t i = 0; i < words; i++) { rng = rng * 1664525u + 1013904223u; h[i] = rng; }
        p.w = mk(words * 4, h);
        float *sf = malloc(ng * 4), *bf = malloc(ng * 4); uint16_t *sh = malloc(ng * 2), *bh = malloc(ng * 2);
        for (size_t i = 0; i < ng; i++) { sf[i] = 0.01f + 0.01f * frand(); bf[i] = -0.05f * (1 << bits) * sf[i]; }
        bf16_from(sf, sh, ng); bf16_from(bf, bh, ng);
        p.s = mk(ng * 2, sh); p.b = mk(ng * 2, bh);
        free(h); free(sf); free(bf); free(sh); free(bh);
    }
    qweight q = {fmt, n_out, n_in, NULL, NULL, NULL, QW_BF16, bits, group};
    p.c = q; p.g = q;
    p.c.w = p.w.c; p.g.w = p.w.g;
    p.c.scales = p.s.c; p.g.scales = p.s.g;
    p.c.biases = p.b.c; p.g.biases = p.b.g;
    return p;
}
static void rm_weight(wpair p) { rm(p.w); if (p.s.c) { rm(p.s); rm(p.b); } }

static void test_matmul(void) {
    struct { qwfmt f; int bits, group; const char *name; } cases[] = {
        {QW_F32, 0, 0, "matmul f32"}, {QW_BF16, 0, 0, "matmul bf16"}, {QW_AFFINE, 2, 32, "matmul affine 2b g32"},
        {QW_AFFINE, 3, 64, "matmul affine 3b g64"}, {QW_AFFINE, 4, 64, "matmul affine 4b g64"},
        {QW_AFFINE, 5, 128, "matmul affine 5b g128"}, {QW_AFFINE, 6, 64, "matmul affine 6b g64"},
        {QW_AFFINE, 8, 32, "matmul affine 8b g32"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int n = 37, n_in = 512, n_out = 96;
        wpair W = mk_weight(cases[k].f, n_out, n_in, cases[k].bits, cases[k].group);
        buf x = mk_rand((size_t)n * n_in, 1.0f), y = mk((size_t)n * n_out * 4, NULL);
        OK(cpu->ops->matmul(cpu, x.c, n, &W.c, y.c));
        OK(gpu->ops->matmul(gpu, x.g, n, &W.g, y.g));
        expect_close(cases[k].name, y, 1e-5);
        buf yp = mk((size_t)n * n_out * 4, NULL);
        OK(gpu->ops->matmul_prefill(gpu, x.g, n, &W.g, yp.g));
        OK(cpu->ops->matmul_prefill(cpu, x.c, n, &W.c, yp.c));
        char nm[64];
        snprintf(nm, sizeof nm, "%s (prefill GEMM)", cases[k].name);
        expect_close(nm, yp, 1e-5);
        if (k == 4) { /* EXACT(batch) for the GEMM: row 40 alone vs in 37 + 5 rows */
            float a2[96], b2[96];
            buf y2 = mk((size_t)n_out * 4, NULL);
            OK(gpu->ops->matmul_prefill(gpu, (float *)x.g + 5 * n_in, 1, &W.g, y2.g));
            OK(gpu->ops->download(gpu, a2, (float *)yp.g + 5 * n_out, sizeof a2));
            OK(gpu->ops->download(gpu, b2, y2.g, sizeof b2));
            expect_same("prefill GEMM row alone vs in 37", a2, b2, sizeof a2);
            rm(y2);
        }
        rm(yp);
        /* EXACT(batch): row 5 alone == row 5 among 37 */
        buf y1 = mk((size_t)n_out * 4, NULL);
        OK(gpu->ops->matmul(gpu, (float *)x.g + 5 * n_in, 1, &W.g, y1.g));
        float a[96], b[96];
        OK(gpu->ops->download(gpu, a, (float *)y.g + 5 * n_out, sizeof a));
        OK(gpu->ops->download(gpu, b, y1.g, sizeof b));
        if (k == 0 || k == 4) expect_same(k == 0 ? "matmul f32 row alone vs in 37" : "matmul 4b row alone vs in 37", a, b, sizeof a);
        rm(y1); rm(x); rm(y); rm_weight(W);
    }
    /* embed, affine */
    wpair T = mk_weight(QW_AFFINE, 300, 256, 4, 64);
    int32_t ids[5] = {0, 299, 7, 7, 150};
    buf d = mk(sizeof ids, ids), y = mk(5 * 256 * 4, NULL);
    OK(cpu->ops->embed(cpu, &T.c, d.c, 5, y.c));
    OK(gpu->ops->embed(gpu, &T.g, d.g, 5, y.g));
    expect_close("embed affine 4b", y, 1e-6);
    rm(d); rm(y); rm_weight(T);
}

static void test_norms_and_elementwise(void) {
    const int nv = 40, dim = 256;
    buf x = mk_rand((size_t)nv * dim * 2, 2.0f), w = mk_rand(dim, 1.0f), y = mk((size_t)nv * dim * 4, NULL);
    OK(cpu->ops->rmsnorm(cpu, x.c, 2 * dim, w.c, nv, dim, 1e-6f, y.c, dim));
    OK(gpu->ops->rmsnorm(gpu, x.g, 2 * dim, w.g, nv, dim, 1e-6f, y.g, dim));
    expect_close("rmsnorm strided", y, 1e-5);
    buf z = mk_rand((size_t)nv * dim, 3.0f);
    OK(cpu->ops->gated_rmsnorm(cpu, y.c, z.c, w.c, nv, dim, 1e-6f, y.c));
    OK(gpu->ops->gated_rmsnorm(gpu, y.g, z.g, w.g, nv, dim, 1e-6f, y.g));
    expect_close("gated_rmsnorm in place", y, 1e-5);
    OK(cpu->ops->swiglu(cpu, z.c, y.c, (int64_t)nv * dim, y.c));
    OK(gpu->ops->swiglu(gpu, z.g, y.g, (int64_t)nv * dim, y.g));
    expect_close("swiglu", y, 1e-5);
    OK(cpu->ops->add(cpu, y.c, z.c, (int64_t)nv * dim));
    OK(gpu->ops->add(gpu, y.g, z.g, (int64_t)nv * dim));
    expect_close("add", y, 1e-6);
    OK(cpu->ops->mul_sigmoid(cpu, y.c, x.c, 2 * dim, nv, dim));
    OK(gpu->ops->mul_sigmoid(gpu, y.g, x.g, 2 * dim, nv, dim));
    expect_close("mul_sigmoid strided gate", y, 1e-5);
    rm(x); rm(w); rm(y); rm(z);
}

static void test_attention(void) {
    const int nq = 8, nkv = 2, D = 256, rot = 64, ctx = 300;
    /* two seqs: A prefill rows at 0..99, B rows at 180..185 (after a prefix we write first) */
    const int n = 106;
    buf q = mk_rand((size_t)n * nq * D, 1.0f), k = mk_rand((size_t)n * nkv * D, 1.0f), v = mk_rand((size_t)n * nkv * D, 1.0f);
    int32_t pos[106];
    for (int i = 0; i < 100; i++) pos[i] = i;
    for (int i = 0; i < 6; i++) pos[100 + i] = 180 + i;
    buf p = mk(sizeof pos, pos);
    OK(cpu->ops->rope(cpu, q.c, n, nq, D, rot, p.c, 1e7f));
    OK(gpu->ops->rope(gpu, q.g, n, nq, D, rot, p.g, 1e7f));
    expect_close("rope (theta 1e7, 64 of 256 dims)", q, 1e-5);
    buf kcA = mk_rand((size_t)ctx * nkv * D, 1.0f), vcA = mk_rand((size_t)ctx * nkv * D, 1.0f);
    buf kcB = mk_rand((size_t)ctx * nkv * D, 1.0f), vcB = mk_rand((size_t)ctx * nkv * D, 1.0f);
    buf out = mk((size_t)n * nq * D * 4, NULL);
    qseq seqs[2] = {{0, 100, 0, 1}, {100, 6, 180, 0}};
    float *kc_c[2] = {kcA.c, kcB.c}, *vc_c[2] = {vcA.c, vcB.c}, *kc_g[2] = {kcA.g, kcB.g}, *vc_g[2] = {vcA.g, vcB.g};
    OK(cpu->ops->attention(cpu, q.c, k.c, v.c, seqs, 2, kc_c, vc_c, nq, nkv, D, 1.0f / 16, out.c));
    OK(gpu->ops->attention(gpu, q.g, k.g, v.g, seqs, 2, kc_g, vc_g, nq, nkv, D, 1.0f / 16, out.g));
    expect_close("attention 2 seqs, GQA 4:1, D 256", out, 1e-5);
    expect_close("attention K cache written", kcB, 1e-7);
    /* EXACT(batch): seq B alone gives the same bits */
    size_t ob = (size_t)6 * nq * D * 4;
    float *together = malloc(ob), *alone = malloc(ob);
    OK(gpu->ops->download(gpu, together, (float *)out.g + (size_t)100 * nq * D, ob));
    qseq only_b = {100, 6, 180, 0};
    OK(gpu->ops->attention(gpu, q.g, k.g, v.g, &only_b, 1, &kc_g[1], &vc_g[1], nq, nkv, D, 1.0f / 16, out.g));
    OK(gpu->ops->download(gpu, alone, (float *)out.g + (size_t)100 * nq * D, ob));
    expect_same("attention seq alone vs with another", together, alone, ob);
    free(together); free(alone);
    rm(q); rm(k); rm(v); rm(p); rm(kcA); rm(vcA); rm(kcB); rm(vcB); rm(out);
}

static void test_gdn(void) {
    const qgdn_dims d = {4, 8, 128, 128};
    const int C = 2 * d.n_k_heads * d.k_dim + d.n_v_heads * d.v_dim, K = 4, n = 90;
    buf x = mk_rand((size_t)n * C, 1.0f), w = mk_rand((size_t)C * K, 0.5f), y = mk((size_t)n * C * 4, NULL);
    buf stA = mk_rand((size_t)(K - 1) * C, 1.0f), stB = mk_rand((size_t)(K - 1) * C, 1.0f);
    qseq seqs[2] = {{0, 87, 0, 0}, {87, 3, 50, 0}};
    float *sc[2] = {stA.c, stB.c}, *sg[2] = {stA.g, stB.g};
    OK(cpu->ops->conv1d_silu(cpu, x.c, seqs, 2, sc, w.c, C, K, y.c));
    OK(gpu->ops->conv1d_silu(gpu, x.g, seqs, 2, sg, w.g, C, K, y.g));
    expect_close("conv1d_silu 2 seqs", y, 1e-5);
    expect_close("conv1d state after 3 rows", stB, 1e-7);
    buf a = mk_rand((size_t)n * d.n_v_heads, 3.0f), b = mk_rand((size_t)n * d.n_v_heads, 3.0f);
    buf Al = mk_rand(d.n_v_heads, 1.0f), dt = mk_rand(d.n_v_heads, 1.0f);
    buf g = mk((size_t)n * d.n_v_heads * 4, NULL), be = mk((size_t)n * d.n_v_heads * 4, NULL);
    OK(cpu->ops->gdn_gates(cpu, a.c, b.c, n, d.n_v_heads, Al.c, dt.c, g.c, be.c));
    OK(gpu->ops->gdn_gates(gpu, a.g, b.g, n, d.n_v_heads, Al.g, dt.g, g.g, be.g));
    expect_close("gdn_gates g", g, 1e-5);
    expect_close("gdn_gates beta", be, 1e-6);
    size_t Sn = (size_t)d.n_v_heads * d.k_dim * d.v_dim;
    buf SA = mk_rand(Sn, 0.1f), SB = mk_rand(Sn, 0.1f), o = mk((size_t)n * d.n_v_heads * d.v_dim * 4, NULL);
    float *Sc[2] = {SA.c, SB.c}, *Sg[2] = {SA.g, SB.g};
    OK(cpu->ops->gated_delta(cpu, y.c, g.c, be.c, seqs, 2, Sc, d, o.c));
    OK(gpu->ops->gated_delta(gpu, y.g, g.g, be.g, seqs, 2, Sg, d, o.g));
    expect_close("gated_delta recurrent 2 seqs", o, 1e-4);
    expect_close("gated_delta state", SA, 1e-4);
    /* the CPU chunked rule vs the GPU (recurrent) for a prompt seq */
    buf SC = mk_rand(Sn, 0.1f);
    qseq pre = {0, 87, 0, 1};
    float *pc[1] = {SC.c}, *pg[1] = {SC.g};
    OK(cpu->ops->gated_delta(cpu, y.c, g.c, be.c, &pre, 1, pc, d, o.c));
    OK(gpu->ops->gated_delta(gpu, y.g, g.g, be.g, &pre, 1, pg, d, o.g));
    expect_close("gated_delta chunked (cpu) vs gpu", o, 1e-4);
    /* EXACT(batch): seq B alone on the GPU, from the same starting state */
    size_t ob = (size_t)3 * d.n_v_heads * d.v_dim * 4;
    float *S0 = malloc(Sn * 4), *r1 = malloc(ob), *r2 = malloc(ob);
    OK(gpu->ops->download(gpu, S0, SB.g, Sn * 4));
    OK(gpu->ops->gated_delta(gpu, y.g, g.g, be.g, seqs, 2, Sg, d, o.g));
    OK(gpu->ops->download(gpu, r1, (float *)o.g + (size_t)87 * d.n_v_heads * d.v_dim, ob));
    OK(gpu->ops->upload(gpu, SB.g, S0, Sn * 4));
    OK(gpu->ops->gated_delta(gpu, y.g, g.g, be.g, &seqs[1], 1, &Sg[1], d, o.g));
    OK(gpu->ops->download(gpu, r2, (float *)o.g + (size_t)87 * d.n_v_heads * d.v_dim, ob));
    expect_same("gated_delta seq alone vs with another", r1, r2, ob);
    free(S0); free(r1); free(r2);
    rm(x); rm(w); rm(y); rm(stA); rm(stB); rm(a); rm(b); rm(Al); rm(dt); rm(g); rm(be); rm(SA); rm(SB); rm(SC); rm(o);
}

int main(void) {
    if (cuda_device_count() == 0) {
        printf("no GPU: skipped\n");
        return 77;
    }
    OK(cpu_backend_create(0, &cpu));
    OK(cuda_backend_create(0, &gpu));
    printf("| %-40s | %9s | %7s | %s |\n|---|---|---|---|\n", "op (cuda vs cpu)", "rel err", "bound", "");
    test_matmul();
    test_norms_and_elementwise();
    test_attention();
    test_gdn();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    cpu->ops->destroy(cpu);
    gpu->ops->destroy(gpu);
    return n_fail ? 1 : 0;
}
