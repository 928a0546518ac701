/* test_cuda_matmul.c: the CUDA matmuls (the decode tensor-core kernel alone and with several weights in a launch, the
 * prefill GEMM, the SIMT fallbacks, the down projection with swiglu in its prompt pass) against the CPU reference on
 * random inputs (relative error max|cuda - cpu| / max|cpu| under each op's bound), and EXACT(batch) on the GPU: a row
 * gives bit-identical results alone and among others. The ops around them (norms, gates, the residual boundary,
 * argmax, draw): test_cuda_ops.c. Built when nvcc is found; skips (exit 77) without a GPU. Run on the GPU machine by
 * tests/cuda/run.sh (its sanitizer step on the prompt matmuls picks tests 2, 3 and 4 of this binary's order). */
#include "cuda_test_util.h"

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
        expect_close(cases[k].name, y, k == 1 || k == 4 ? decode_tol() : 1e-5); /* k 1, 4: tensor cores */
        buf yp = mk((size_t)n * n_out * 4, NULL);
        OK(gpu->ops->matmul_prefill(gpu, x.g, n, &W.g, yp.g));
        OK(cpu->ops->matmul_prefill(cpu, x.c, n, &W.c, yp.c));
        char nm[64];
        snprintf(nm, sizeof nm, "%s (prefill GEMM)", cases[k].name);
        expect_close(nm, yp, (k == 1 || k == 4) && prefill_bf16_mode() ? 2e-2 : 1e-5); /* k 1, 4: cuBLASLt */
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
        if (k == 0 || k == 1 || k == 4)
            expect_same(k == 0 ? "matmul f32 row alone vs in 37" : k == 1 ? "matmul bf16 row alone vs in 37" : "matmul 4b row alone vs in 37", a, b, sizeof a);
        rm(y1); rm(x); rm(y); rm_weight(W);
    }
    /* embed, affine, tiled (cuda_q4_tiled.cuh): 300 rows (padded to 304) and 304 */
    for (int rows = 300; rows <= 304; rows += 4) {
        wpair T = mk_weight(QW_AFFINE, rows, 256, 4, 64);
        int32_t ids[5] = {0, 299, 7, 7, 150};
        buf d = mk(sizeof ids, ids), y = mk(5 * 256 * 4, NULL);
        OK(cpu->ops->embed(cpu, &T.c, d.c, 5, y.c));
        OK(gpu->ops->embed(gpu, &T.g, d.g, 5, y.g));
        expect_close(rows == 300 ? "embed affine 4b, rows padded" : "embed affine 4b", y, 1e-6);
        rm(d); rm(y); rm_weight(T);
    }
}

/* The decode matmul's kernels (cuda_gemv.cu) at shapes that exercise their edges: the tensor-core
 * kernel (bf16; 4-bit g64 and g128) with n_out not a multiple of its 128-output blocks, split K with a
 * partial last chunk, 70 rows (three row chunks, the last with a partial 8-row tile); for g64 also slices that
 * start on an odd group and hold an odd number of units (2176: 4 slices of 8 or 9 units, from units 0, 8,
 * 17, 25) and rows of an odd number of groups fewer than a ring turn (192: 3); the SIMT 4-bit g32 kernel; a
 * 4-bit weight of 1,563 output blocks (its last one part-filled), whose one-row launch loops (job.loop). 4-bit
 * weights are tiled (cuda_q4_tiled.cuh): 1000x4096's rows are padded to 1008.
 * Outputs poisoned first; then row 45 bitwise alone (n = 1), among 70 other rows, and as row 9 of 12 and row 21 of
 * 24 (the many-row kernel's 2 and 4 tiles of 8 rows in decode bf16 mode, 4 and 8 tiles of 4 otherwise). */
static void test_matmul_decode(void) {
    struct { qwfmt f; int bits, group, n_out, n_in; const char *name; } cases[] = {
        {QW_BF16, 0, 0, 1000, 1056, "matmul bf16 1000x1056 n70"},
        {QW_AFFINE, 4, 64, 1008, 4096, "matmul 4b g64 1008x4096 n70"},
        {QW_AFFINE, 4, 64, 304, 2176, "matmul 4b g64 304x2176 n70"},
        {QW_AFFINE, 4, 64, 144, 192, "matmul 4b g64 144x192 n70"},
        {QW_AFFINE, 4, 128, 208, 1152, "matmul 4b g128 208x1152 n70"},
        {QW_AFFINE, 4, 64, 1000, 4096, "matmul 4b g64 1000x4096 n70 (padded)"},
        {QW_AFFINE, 4, 32, 96, 512, "matmul 4b g32 96x512 n70"},
        {QW_AFFINE, 4, 64, 200000, 256, "matmul 4b g64 200000x256 n70"}}; /* 1,563 blocks: one row loops */
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int n = 70, n_in = cases[k].n_in, n_out = cases[k].n_out;
        wpair W = mk_weight(cases[k].f, n_out, n_in, cases[k].bits, cases[k].group);
        buf x = mk_rand((size_t)n * n_in, 1.0f), y = mk((size_t)n * n_out * 4, NULL);
        float *nan = xmalloc((size_t)n * n_out * 4);
        memset(nan, 0xff, (size_t)n * n_out * 4);
        OK(gpu->ops->upload(gpu, y.g, nan, (size_t)n * n_out * 4));
        free(nan);
        OK(cpu->ops->matmul(cpu, x.c, n, &W.c, y.c));
        OK(gpu->ops->matmul(gpu, x.g, n, &W.g, y.g));
        expect_close(cases[k].name, y, decode_tol());
        /* row 45 alone, and among 69 different rows */
        buf x2 = mk_rand((size_t)n * n_in, 1.0f), y1 = mk((size_t)n_out * 4, NULL), y2 = mk((size_t)n * n_out * 4, NULL);
        OK(gpu->ops->copy(gpu, (float *)x2.g + 45 * n_in, (float *)x.g + 45 * n_in, (size_t)n_in * 4));
        OK(gpu->ops->matmul(gpu, (float *)x.g + 45 * n_in, 1, &W.g, y1.g));
        OK(gpu->ops->matmul(gpu, x2.g, n, &W.g, y2.g));
        float *a = xmalloc((size_t)n_out * 4), *b = xmalloc((size_t)n_out * 4), *c = xmalloc((size_t)n_out * 4);
        OK(gpu->ops->download(gpu, a, (float *)y.g + 45 * n_out, (size_t)n_out * 4));
        OK(gpu->ops->download(gpu, b, y1.g, (size_t)n_out * 4));
        OK(gpu->ops->download(gpu, c, (float *)y2.g + 45 * n_out, (size_t)n_out * 4));
        char nm[80];
        snprintf(nm, sizeof nm, "%.22s: row alone vs in 70", cases[k].name);
        expect_same(nm, a, b, (size_t)n_out * 4);
        snprintf(nm, sizeof nm, "%.22s: row among others", cases[k].name);
        expect_same(nm, a, c, (size_t)n_out * 4);
        for (int nn = 12; nn <= 24; nn += 12) {
            OK(gpu->ops->copy(gpu, (float *)x2.g + (nn - 3) * n_in, (float *)x.g + 45 * n_in, (size_t)n_in * 4));
            OK(gpu->ops->matmul(gpu, x2.g, nn, &W.g, y2.g));
            OK(gpu->ops->download(gpu, c, (float *)y2.g + (nn - 3) * n_out, (size_t)n_out * 4));
            snprintf(nm, sizeof nm, "%.22s: row %d of %d", cases[k].name, nn - 3, nn);
            expect_same(nm, a, c, (size_t)n_out * 4);
        }
        free(a); free(b); free(c);
        rm(x2); rm(y1); rm(y2); rm(x); rm(y); rm_weight(W);
    }
}

/* matmul_multi (a block's projections in one launch) against one matmul per weight, bitwise, for
 * 4-bit and bf16 sets (with n_out not a multiple of 128 and different splits, and the GDN block's
 * shapes, whose weights alone would take different row tiles) and a mixed set (which falls back to one
 * launch per weight); 1, 6 and 37 rows, the first row's outputs the same in all three (EXACT(batch)). The 9B's GDN
 * in and gate + up also as groups (group_weights: their own splits, fewer, as a one-row launch of 528 or 768 blocks
 * takes more than one wave). The same for matmul_prefill_multi against matmul_prefill (one wgmma launch for a set of
 * one format; 1, 6, 37 and 129 rows), and both against the CPU. */
static void test_matmul_multi(void) {
    struct { qwfmt f[4]; int n_out[4], count, n_in, group; const char *name; } sets[] = {
        {{QW_AFFINE, QW_AFFINE, QW_AFFINE, QW_AFFINE}, {1008, 64, 304, 32}, 4, 1024, 0, "4b x4"},
        /* the GDN block's shapes: the 32-output weights alone take more row tiles than the job */
        {{QW_AFFINE, QW_AFFINE, QW_AFFINE, QW_AFFINE}, {8192, 4096, 32, 32}, 4, 4096, 0, "4b gdn"},
        {{QW_AFFINE, QW_AFFINE, QW_AFFINE, QW_AFFINE}, {8192, 4096, 32, 32}, 4, 4096, 1, "4b gdn grouped"},
        {{QW_AFFINE, QW_AFFINE}, {12288, 12288}, 2, 4096, 1, "4b gate + up grouped"},
        {{QW_BF16, QW_BF16}, {520, 96}, 2, 1056, 0, "bf16 x2"},
        {{QW_AFFINE, QW_BF16, QW_AFFINE}, {256, 130, 33}, 3, 1024, 0, "mixed x3"}};
    const char *group_env = getenv("QUILL_CUDA_GROUP_SPLIT");
    const int group_on = !group_env || strcmp(group_env, "0") != 0;
    cuda_device_info dev;
    char err[128];
    const int n_sms = cuda_device_query(0, &dev, err, sizeof err) == 0 ? dev.n_sms : 0;
    const int ns[4] = {1, 6, 37, 129}; /* 129: two row blocks of the wgmma kernel */
    for (int prefill = 0; prefill < 2; prefill++)
        for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
            const int count = sets[k].count, n_in = sets[k].n_in, nq = prefill ? 4 : 3, rows = ns[nq - 1];
            wpair W[4];
            const qweight *Wg[4];
            buf y[4], y1[4];
            float *Yg[4];
            buf x = mk_rand((size_t)rows * n_in, 1.0f);
            for (int i = 0; i < count; i++) {
                W[i] = mk_weight(sets[k].f[i], sets[k].n_out[i], n_in, sets[k].f[i] == QW_AFFINE ? 4 : 0, 64);
                Wg[i] = &W[i].g;
                y[i] = mk((size_t)rows * sets[k].n_out[i] * 4, NULL);
                y1[i] = mk((size_t)rows * sets[k].n_out[i] * 4, NULL);
                Yg[i] = (float *)y[i].g;
            }
            char name[64];
            snprintf(name, sizeof name, "%s %s", prefill ? "matmul_prefill_multi" : "matmul_multi", sets[k].name);
            if (sets[k].group) {
                qweight *Wm[4];
                for (int i = 0; i < count; i++) Wm[i] = &W[i].g;
                OK(gpu->ops->group_weights(gpu, count, Wm));
                /* set: all of them, and the one-row launch is one wave of 3 blocks an SM. On 132 SMs (H100 SXM,
                 * H200) they are set for gate + up's 768 blocks, and for GDN in's 528 but in dequant mode, whose
                 * slices of at least 16 units leave it 392 */
                int64_t blocks = 0, set = 0;
                for (int i = 0; i < count; i++)
                    set += W[i].g.split > 0, blocks += (sets[k].n_out[i] + 127) / 128 * W[i].g.split;
                const char *mode = getenv("QUILL_DECODE_PRECISION");
                const int dq = mode && !strcmp(mode, "dequant"), want = group_on && (count == 2 || !dq);
                char nm[128];
                snprintf(nm, sizeof nm, "%s: splits set, one wave", name);
                expect_flag(nm, set == 0 || (set == count && blocks <= 3 * n_sms));
                if (n_sms == 132) {
                    snprintf(nm, sizeof nm, "%s: splits %s (132 SMs)", name, want ? "set" : "its own");
                    expect_flag(nm, (set > 0) == want);
                }
            }
            int same = 1, first_same = 1;
            float *first[4] = {NULL};
            for (int q = 0; q < nq; q++) {
                OK(prefill ? gpu->ops->matmul_prefill_multi(gpu, x.g, ns[q], count, Wg, Yg)
                           : gpu->ops->matmul_multi(gpu, x.g, ns[q], count, Wg, Yg));
                for (int i = 0; i < count; i++) { /* row 0 of every call: the same bits (EXACT(batch), decode) */
                    const size_t row = (size_t)sets[k].n_out[i] * 4;
                    float *r = xmalloc(row);
                    OK(gpu->ops->download(gpu, r, y[i].g, row));
                    if (q == 0) first[i] = r;
                    else first_same &= memcmp(first[i], r, row) == 0, free(r);
                }
                for (int i = 0; i < count; i++) {
                    OK(prefill ? gpu->ops->matmul_prefill(gpu, x.g, ns[q], Wg[i], y1[i].g)
                               : gpu->ops->matmul(gpu, x.g, ns[q], Wg[i], y1[i].g));
                    const size_t bytes = (size_t)ns[q] * sets[k].n_out[i] * 4;
                    float *a = xmalloc(bytes), *b = xmalloc(bytes);
                    OK(gpu->ops->download(gpu, a, y[i].g, bytes));
                    OK(gpu->ops->download(gpu, b, y1[i].g, bytes));
                    same &= memcmp(a, b, bytes) == 0;
                    free(a); free(b);
                }
            }
            expect_flag(name, same);
            if (!prefill) {
                char nm[128];
                snprintf(nm, sizeof nm, "%s: row 0 alone = among 6 = among 37", name);
                expect_flag(nm, first_same);
            }
            for (int i = 0; i < count; i++) free(first[i]);
            for (int i = 0; i < count; i++) {
                OK(cpu->ops->matmul(cpu, x.c, rows, &W[i].c, y[i].c));
                char nm[96];
                snprintf(nm, sizeof nm, "%s: weight %d vs cpu", name, i);
                expect_close(nm, y[i], prefill ? (prefill_bf16_mode() ? 2e-2 : 1e-5) : decode_tol());
                rm(y[i]); rm(y1[i]); rm_weight(W[i]);
            }
            rm(x);
        }
}

/* The prefill GEMM (cuda_gemm.cu: cuBLASLt, bf16 and 4-bit weights) against the CPU, in the precision
 * QUILL_PREFILL_PRECISION picks (split, the default: f32-class, 1e-5; bf16: 2e-2), outputs poisoned
 * with NaN first; then EXACT(batch) and EXACT(chunk) bitwise: calls of m = 1, 7, 16, 37, 64, 129 rows at
 * three offsets, and the 300 rows cut into chunks of 64 and at 1/100/233, equal the 300-row call; and
 * x not 16-byte aligned (the scalar split pass) equals the same values aligned. */
static void test_matmul_prefill_gemm(void) {
    const double tol = prefill_bf16_mode() ? 2e-2 : 1e-5;
    struct { qwfmt f; int n_out, n_in; } cases[] = {
        {QW_BF16, 256, 1024}, {QW_AFFINE, 256, 1024}, {QW_BF16, 100, 576}, {QW_AFFINE, 100, 576},
        {QW_BF16, 516, 640}, {QW_AFFINE, 516, 640}, /* 516: a part-filled last block of the wgmma kernel */
        {QW_AFFINE, 528, 640}}; /* the same with no rows of padding (4-bit weights are tiled, cuda_q4_tiled.cuh) */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int n = 300, n_in = cases[c].n_in, n_out = cases[c].n_out;
        const size_t yb = (size_t)n * n_out * 4;
        wpair W = mk_weight(cases[c].f, n_out, n_in, 4, 64);
        buf x = mk_rand((size_t)n * n_in + 8, 1.0f), y = mk(yb, NULL), y2 = mk(yb, NULL);
        char nm[96];
        const char *fn = cases[c].f == QW_BF16 ? "bf16" : "4b g64";
        poison_gpu(y);
        OK(cpu->ops->matmul_prefill(cpu, x.c, n, &W.c, y.c));
        OK(gpu->ops->matmul_prefill(gpu, x.g, n, &W.g, y.g));
        snprintf(nm, sizeof nm, "prefill GEMM %s %dx%d, 300 rows", fn, n_out, n_in);
        expect_close(nm, y, tol);
        float *full = xmalloc(yb), *part = xmalloc(yb);
        OK(gpu->ops->download(gpu, full, y.g, yb));
        /* EXACT(batch): m rows at offsets 0, inside, at the end */
        const int ms[] = {1, 7, 16, 37, 64, 129};
        int same = 1;
        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
            const int m = ms[i], offs[3] = {0, (m * 13 + 41) % (n - m + 1), n - m};
            for (int t = 0; t < 3; t++) {
                const int off = offs[t];
                poison_gpu(y2);
                OK(gpu->ops->matmul_prefill(gpu, (float *)x.g + (size_t)off * n_in, m, &W.g, (float *)y2.g + (size_t)off * n_out));
                OK(gpu->ops->download(gpu, part, (float *)y2.g + (size_t)off * n_out, (size_t)m * n_out * 4));
                same &= memcmp(part, full + (size_t)off * n_out, (size_t)m * n_out * 4) == 0;
            }
        }
        snprintf(nm, sizeof nm, "  %s: rows in 1..129-row calls vs 300", fn);
        expect_flag(nm, same);
        /* EXACT(chunk): the prompt cut into chunks of 64, and at 1, 100, 233 */
        const int cuts[2][6] = {{64, 128, 192, 256, 300, 0}, {1, 100, 233, 300, 0, 0}};
        same = 1;
        for (int k = 0; k < 2; k++) {
            poison_gpu(y2);
            for (int i = 0, a = 0; i < 6 && cuts[k][i]; a = cuts[k][i++])
                OK(gpu->ops->matmul_prefill(gpu, (float *)x.g + (size_t)a * n_in, cuts[k][i] - a, &W.g, (float *)y2.g + (size_t)a * n_out));
            OK(gpu->ops->download(gpu, part, y2.g, yb));
            same &= memcmp(part, full, yb) == 0;
        }
        snprintf(nm, sizeof nm, "  %s: chunked 64s and 1/100/233 vs whole", fn);
        expect_flag(nm, same);
        /* x 4 bytes off 16-byte alignment: the CPU, and bitwise the same values from an aligned copy */
        const int m = 37;
        buf xa = mk((size_t)m * n_in * 4, NULL), y3 = mk((size_t)m * n_out * 4, NULL);
        poison_gpu(y3);
        OK(cpu->ops->matmul_prefill(cpu, (float *)x.c + 1, m, &W.c, y3.c));
        OK(gpu->ops->matmul_prefill(gpu, (float *)x.g + 1, m, &W.g, y3.g));
        snprintf(nm, sizeof nm, "  %s: x not 16-byte aligned", fn);
        expect_close(nm, y3, tol);
        OK(gpu->ops->download(gpu, part, y3.g, (size_t)m * n_out * 4));
        OK(gpu->ops->copy(gpu, xa.g, (float *)x.g + 1, (size_t)m * n_in * 4));
        OK(gpu->ops->matmul_prefill(gpu, xa.g, m, &W.g, y3.g));
        OK(gpu->ops->download(gpu, full, y3.g, (size_t)m * n_out * 4));
        snprintf(nm, sizeof nm, "  %s: unaligned x vs aligned copy", fn);
        expect_flag(nm, memcmp(part, full, (size_t)m * n_out * 4) == 0);
        free(full); free(part);
        rm(xa); rm(y3); rm(x); rm(y); rm(y2); rm_weight(W);
    }
}

/* swiglu_matmul_prefill (the down projection with swiglu in its input pass) against swiglu then
 * matmul_prefill, bitwise, bf16 and 4-bit, 37 and 129 rows, gate and up 16-byte aligned and not. */
static void test_swiglu_matmul_prefill(void) {
    const qwfmt fmts[2] = {QW_BF16, QW_AFFINE};
    const int n_out = 260, n_in = 640, rows = 129;
    for (int f = 0; f < 2; f++) {
        wpair W = mk_weight(fmts[f], n_out, n_in, fmts[f] == QW_AFFINE ? 4 : 0, 64);
        buf gt = mk_rand((size_t)rows * n_in + 4, 2.0f), up = mk_rand((size_t)rows * n_in + 4, 1.0f);
        buf g2 = mk((size_t)rows * n_in * 4 + 16, NULL), y = mk((size_t)rows * n_out * 4, NULL);
        buf y2 = mk((size_t)rows * n_out * 4, NULL);
        int same = 1;
        for (int k = 0; k < 4; k++) {
            const int m = k & 1 ? rows : 37, off = k & 2 ? 1 : 0; /* off 1: not 16-byte aligned */
            const size_t yb = (size_t)m * n_out * 4;
            float *g = (float *)gt.g + off, *u = (float *)up.g + off, *gc = (float *)g2.g + off;
            OK(gpu->ops->copy(gpu, gc, g, (size_t)m * n_in * 4)); /* the op may overwrite gate */
            OK(gpu->ops->swiglu_matmul_prefill(gpu, gc, u, m, &W.g, y.g));
            OK(gpu->ops->swiglu(gpu, g, u, (int64_t)m * n_in, gc));
            OK(gpu->ops->matmul_prefill(gpu, gc, m, &W.g, y2.g));
            float *a = xmalloc(yb), *b = xmalloc(yb);
            OK(gpu->ops->download(gpu, a, y.g, yb));
            OK(gpu->ops->download(gpu, b, y2.g, yb));
            same &= memcmp(a, b, yb) == 0;
            free(a); free(b);
        }
        expect_flag(f ? "swiglu_matmul_prefill 4b = swiglu, matmul_prefill" : "swiglu_matmul_prefill bf16 = swiglu, "
                                                                               "matmul_prefill", same);
        rm(gt); rm(up); rm(g2); rm(y); rm(y2); rm_weight(W);
    }
}

int main(void) {
    static void (*const tests[])(void) = {test_matmul, test_matmul_decode, test_matmul_multi, test_matmul_prefill_gemm,
                                          test_swiglu_matmul_prefill};
    return run_cuda_tests(tests, (int)(sizeof tests / sizeof tests[0]));
}
