/* test_cuda_ops.c: the CUDA ops around the matmuls against the CPU reference on random inputs (relative error
 * max|cuda - cpu| / max|cpu| under each op's bound), and EXACT(batch) on the GPU: norms and elementwise ops, a matmul's
 * input gated or normalised as it is staged (glu_matmul, the residual boundary), qk_norm_rope (alone and inside
 * attention_gated), add_rmsnorm and argmax, draw, and the memory fit's question to this device. The matmuls
 * themselves: test_cuda_matmul.c; attention and the GDN ops: test_cuda_seq_ops.c; the split rows a producer leaves its
 * consumer: test_cuda_rows.c. Built when nvcc is found; skips (exit 77) without a GPU. Run on the GPU machine by
 * tests/cuda/run.sh. */
#include "cuda_test_util.h"
#include "engine/memfit.h"
#include "model/qwen35.h"

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

/* glu_matmul (the decode matmul with its input gated while it is staged) against the gate op then matmul on
 * the GPU, bitwise: the MLP's swiglu (4-bit and bf16 weights), the attention's output gate (gates strided
 * in [query | gate], 4-bit) and the GDN's gated norm (gated_rmsnorm: heads of 128, 4-bit and bf16 with the
 * 9B's out_proj K, slices of 8 units), at 1, 5 (x split once), 16 and 37 rows (the wide kernel); and f32 weights,
 * whose matmul cannot take the gate (the op gates x in place first). x is restored before each call (the
 * fallback overwrites it). */
static void test_glu_matmul(void) {
    struct { qwfmt f; int n_out, n_in, dim, stride; qglu_act act; int norm; const char *name; } cases[] = {
        {QW_AFFINE, 304, 1024, 1024, 1024, QGLU_SILU, 0, "swiglu 4b"},
        {QW_BF16, 200, 1024, 1024, 1024, QGLU_SILU, 0, "swiglu bf16"},
        {QW_AFFINE, 528, 1024, 256, 512, QGLU_SIGMOID, 0, "sigmoid gate 4b"},
        {QW_F32, 96, 256, 64, 128, QGLU_SIGMOID, 0, "sigmoid gate f32 (fallback)"},
        {QW_AFFINE, 4096, 4096, 128, 128, QGLU_SILU, 1, "gated norm 4b"},
        {QW_BF16, 300, 4096, 128, 128, QGLU_SILU, 1, "gated norm bf16"},
        {QW_F32, 96, 384, 128, 128, QGLU_SILU, 1, "gated norm f32 (fallback)"}};
    const int ns[4] = {1, 5, 16, 37};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int rows = 37, n_in = cases[k].n_in, n_out = cases[k].n_out;
        const int64_t n_vec = (int64_t)rows * (n_in / cases[k].dim);
        wpair W = mk_weight(cases[k].f, n_out, n_in, cases[k].f == QW_AFFINE ? 4 : 0, 64);
        buf x = mk_rand((size_t)rows * n_in, 2.0f), x1 = mk(x.bytes, NULL);
        buf g = mk_rand((size_t)n_vec * cases[k].stride, 3.0f);
        buf y = mk((size_t)rows * n_out * 4, NULL), y1 = mk(y.bytes, NULL), nw = mk_rand(cases[k].dim, 1.0f);
        const qglu glu = {g.g, cases[k].stride, cases[k].dim, cases[k].act, cases[k].norm ? nw.g : NULL, 1e-6f};
        int same = 1;
        for (int q = 0; q < 4; q++) {
            OK(gpu->ops->copy(gpu, x1.g, x.g, x.bytes));
            OK(gpu->ops->glu_matmul(gpu, x1.g, &glu, ns[q], &W.g, y.g));
            OK(gpu->ops->copy(gpu, x1.g, x.g, x.bytes));
            const int64_t nv = (int64_t)ns[q] * (n_in / cases[k].dim);
            if (cases[k].norm) OK(gpu->ops->gated_rmsnorm(gpu, x1.g, g.g, nw.g, nv, cases[k].dim, 1e-6f, x1.g));
            else if (cases[k].act == QGLU_SILU) OK(gpu->ops->swiglu(gpu, g.g, x1.g, nv * cases[k].dim, x1.g));
            else OK(gpu->ops->mul_sigmoid(gpu, x1.g, g.g, cases[k].stride, nv, cases[k].dim));
            OK(gpu->ops->matmul(gpu, x1.g, ns[q], &W.g, y1.g));
            const size_t bytes = (size_t)ns[q] * n_out * 4;
            float *a = xmalloc(bytes), *b = xmalloc(bytes);
            OK(gpu->ops->download(gpu, a, y.g, bytes));
            OK(gpu->ops->download(gpu, b, y1.g, bytes));
            same &= memcmp(a, b, bytes) == 0;
            free(a); free(b);
        }
        char nm[96];
        snprintf(nm, sizeof nm, "glu_matmul %s == gate + matmul (gpu, 1/5/16/37 rows)", cases[k].name);
        expect_flag(nm, same);
        rm(x); rm(x1); rm(g); rm(y); rm(y1); rm(nw); rm_weight(W);
    }
}

/* The fused residual boundary (backend.h's qnorm): resid_matmul against the CPU's gate, matmul and add, its
 * sums of squares against the new rows' (in double on the host), and norm_matmul_multi reading them against
 * the CPU's rmsnorm and matmul: 4-bit g64 with the 9B's shapes (the producer gated as the attention's output,
 * the consumers gate + up: the lean kernel at one row), bf16 / 4-bit sets whose last part holds 64 outputs, and
 * a producer of one K slice (the test models' shapes); 37 rows (the many-row kernels). Then EXACT(batch): the
 * first 1, 5 and 16 rows alone give the bits they give among 37 (the one-row, staged and split-once kernels, and the
 * many-row kernels' tiles of 2), and so do 37 rows whose consumer splits x itself (from_resid 0: in dequant mode the
 * others read the rows the producer wrote for it). The 9B's down projection (4096x12288, swiglu) runs on 64 rows:
 * in dequant mode its 6 slices' cluster finish gives the last block the tile's last 9 rows (gemv_tc_split). */
static void test_residual_boundary(void) {
    struct { qwfmt f; int H, K, dim, stride; qglu_act act; int count, c_out[3], rows; const char *name; } cases[] = {
        {QW_AFFINE, 4096, 4096, 256, 512, QGLU_SIGMOID, 2, {12288, 12288, 0}, 37, "4b 9B"},
        {QW_AFFINE, 4096, 12288, 12288, 12288, QGLU_SILU, 2, {1024, 64, 0}, 64, "4b 9B down"},
        {QW_BF16, 1088, 1024, 0, 0, QGLU_SILU, 2, {520, 96, 0}, 37, "bf16"},
        {QW_AFFINE, 1088, 2048, 2048, 2048, QGLU_SILU, 3, {300, 32, 1088}, 37, "4b swiglu"},
        {QW_AFFINE, 128, 256, 256, 256, QGLU_SILU, 2, {256, 96, 0}, 37, "4b one slice"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        /* 16: the many-row kernels' tiles of 2 (dequant: clusters of 4) */
        const int rows = cases[k].rows, ns[4] = {1, 5, 16, rows};
        const int H = cases[k].H, K = cases[k].K, count = cases[k].count, parts = (H + QNORM_PART - 1) / QNORM_PART;
        const int bits = cases[k].f == QW_AFFINE ? 4 : 0;
        wpair W = mk_weight(cases[k].f, H, K, bits, 64), C[3];
        const qweight *Cg[3];
        buf y[3];
        float *Yg[3];
        for (int i = 0; i < count; i++) {
            C[i] = mk_weight(cases[k].f, cases[k].c_out[i], H, bits, 64);
            Cg[i] = &C[i].g;
            y[i] = mk((size_t)rows * cases[k].c_out[i] * 4, NULL);
            Yg[i] = (float *)y[i].g;
        }
        const int gated = cases[k].dim > 0;
        const int64_t n_vec = gated ? (int64_t)rows * (K / cases[k].dim) : 0;
        buf xin = mk_rand((size_t)rows * K, 1.0f), xin1 = mk(xin.bytes, NULL), x = mk_rand((size_t)rows * H, 2.0f);
        buf x0 = mk(x.bytes, NULL), g = mk_rand(gated ? (size_t)n_vec * cases[k].stride : 4, 3.0f);
        buf ss = mk((size_t)rows * parts * 4, NULL), nw = mk_rand(H, 1.0f);
        buf out = mk(x.bytes, NULL), h = mk(x.bytes, NULL);
        OK(gpu->ops->copy(gpu, x0.g, x.g, x.bytes));
        const qglu glu = {g.g, cases[k].stride, cases[k].dim, cases[k].act, NULL, 0.0f};
        const qnorm nm = {ss.g, nw.g, 1e-6f, 1, 0}, nm_split = {ss.g, nw.g, 1e-6f, 0, 0};
        /* the CPU's reference, 37 rows */
        if (gated && cases[k].act == QGLU_SILU) OK(cpu->ops->swiglu(cpu, g.c, xin.c, (int64_t)rows * K, xin.c));
        else if (gated) OK(cpu->ops->mul_sigmoid(cpu, xin.c, g.c, cases[k].stride, n_vec, cases[k].dim));
        OK(cpu->ops->matmul(cpu, xin.c, rows, &W.c, out.c));
        OK(cpu->ops->add(cpu, x.c, out.c, (int64_t)rows * H));
        OK(cpu->ops->rmsnorm(cpu, x.c, H, nw.c, rows, H, 1e-6f, h.c, H));
        for (int i = 0; i < count; i++) OK(cpu->ops->matmul(cpu, h.c, rows, &C[i].c, y[i].c));
        /* the GPU: 37 rows, then 1 and 5 */
        const size_t y_bytes[3] = {(size_t)rows * cases[k].c_out[0] * 4, (size_t)rows * cases[k].c_out[1] * 4,
                                   count > 2 ? (size_t)rows * cases[k].c_out[2] * 4 : 0};
        void *ref[5] = {xmalloc(x.bytes), xmalloc(ss.bytes), xmalloc(y_bytes[0]), xmalloc(y_bytes[1]),
                        xmalloc(y_bytes[2] + 4)};
        size_t most = x.bytes;
        for (int i = 0; i < 3; i++) most = y_bytes[i] > most ? y_bytes[i] : most;
        void *got = xmalloc(most);
        int same = 1;
        for (int v = 4; v >= 0; v--) { /* all rows (the reference), all with the consumer's own split, 16, 5, 1 */
            const int q = v == 4 ? 3 : v;
            OK(gpu->ops->copy(gpu, x.g, x0.g, x.bytes));
            OK(gpu->ops->copy(gpu, xin1.g, xin.g, xin.bytes));
            OK(gpu->ops->resid_matmul(gpu, xin1.g, gated ? &glu : NULL, ns[q], &W.g, x.g, ss.g, nw.g));
            OK(gpu->ops->norm_matmul_multi(gpu, x.g, v == 3 ? &nm_split : &nm, ns[q], count, Cg, Yg));
            const void *dev[5] = {x.g, ss.g, Yg[0], Yg[1], count > 2 ? Yg[2] : NULL};
            const size_t per_row[5] = {(size_t)H * 4, (size_t)parts * 4, y_bytes[0] / rows, y_bytes[1] / rows,
                                       y_bytes[2] / rows};
            for (int j = 0; j < 5; j++) {
                if (!dev[j]) continue;
                const size_t bytes = per_row[j] * ns[q];
                OK(gpu->ops->download(gpu, v == 4 ? ref[j] : got, dev[j], bytes));
                if (v < 4) same &= memcmp(ref[j], got, bytes) == 0;
            }
        }
        char nm_[96];
        OK(gpu->ops->upload(gpu, x.g, ref[0], x.bytes)); /* the all-row call's residual */
        snprintf(nm_, sizeof nm_, "resid_matmul %s: residual vs cpu", cases[k].name);
        expect_close(nm_, x, decode_tol());
        /* the sums of squares of the CPU's new rows, in double */
        double err = 0.0, top = 0.0;
        float *xc = xmalloc(x.bytes);
        OK(cpu->ops->download(cpu, xc, x.c, x.bytes));
        for (int r = 0; r < rows; r++)
            for (int p = 0; p < parts; p++) {
                double want = 0.0;
                for (int o = p * QNORM_PART; o < H && o < (p + 1) * QNORM_PART; o++)
                    want += (double)xc[(size_t)r * H + o] * xc[(size_t)r * H + o];
                const double d = fabs(want - ((float *)ref[1])[r * parts + p]);
                err = d > err ? d : err, top = want > top ? want : top;
            }
        free(xc);
        snprintf(nm_, sizeof nm_, "resid_matmul %s: sums of squares", cases[k].name);
        expect_err(nm_, err / top, decode_tol());
        for (int i = 0; i < count; i++) {
            snprintf(nm_, sizeof nm_, "norm_matmul_multi %s: weight %d vs cpu", cases[k].name, i);
            expect_close(nm_, y[i], decode_tol());
        }
        snprintf(nm_, sizeof nm_, "resid + norm %s: 1/5/16 rows, %d split apart == in %d", cases[k].name, rows, rows);
        expect_flag(nm_, same);
        for (int j = 0; j < 5; j++) free(ref[j]);
        free(got);
        for (int i = 0; i < count; i++) rm(y[i]), rm_weight(C[i]);
        rm(xin); rm(xin1); rm(x); rm(x0); rm(g); rm(ss); rm(nw); rm(out); rm(h); rm_weight(W);
    }
}

/* qk_norm_rope (the attention's head norms and RoPE in one launch) is bitwise the four ops on the GPU and
 * close to them on the CPU: 9B head shapes (q from a strided [query | gate] buffer), positions up to 70,000. */
static void test_qk_norm_rope(void) {
    const int n = 5, nq = 16, nkv = 4, D = 256, rot = 64;
    const int32_t hpos[5] = {0, 7, 1000, 33000, 70001};
    buf qx = mk_rand((size_t)n * nq * D * 2, 3.0f), qw = mk_rand(D, 1.0f), kw = mk_rand(D, 1.0f);
    buf k = mk_rand((size_t)n * nkv * D, 2.0f), pos = mk(sizeof hpos, hpos);
    buf q = mk((size_t)n * nq * D * 4, NULL), q2 = mk(q.bytes, NULL), k2 = mk(k.bytes, NULL);
    OK(gpu->ops->copy(gpu, k2.g, k.g, k.bytes));
    OK(cpu->ops->rmsnorm(cpu, qx.c, 2 * D, qw.c, (int64_t)n * nq, D, 1e-6f, q.c, D));
    OK(cpu->ops->rmsnorm(cpu, k.c, D, kw.c, (int64_t)n * nkv, D, 1e-6f, k.c, D));
    OK(cpu->ops->rope(cpu, q.c, n, nq, D, rot, pos.c, 1e7f));
    OK(cpu->ops->rope(cpu, k.c, n, nkv, D, rot, pos.c, 1e7f));
    OK(gpu->ops->qk_norm_rope(gpu, qx.g, 2 * D, qw.g, q.g, k.g, kw.g, n, nq, nkv, D, 1e-6f, rot, pos.g, 1e7f));
    expect_close("qk_norm_rope q", q, 1e-5);
    expect_close("qk_norm_rope k", k, 1e-5);
    OK(gpu->ops->rmsnorm(gpu, qx.g, 2 * D, qw.g, (int64_t)n * nq, D, 1e-6f, q2.g, D));
    OK(gpu->ops->rmsnorm(gpu, k2.g, D, kw.g, (int64_t)n * nkv, D, 1e-6f, k2.g, D));
    OK(gpu->ops->rope(gpu, q2.g, n, nq, D, rot, pos.g, 1e7f));
    OK(gpu->ops->rope(gpu, k2.g, n, nkv, D, rot, pos.g, 1e7f));
    float *a = xmalloc(q.bytes), *b = xmalloc(q.bytes);
    OK(gpu->ops->download(gpu, a, q.g, q.bytes));
    OK(gpu->ops->download(gpu, b, q2.g, q.bytes));
    expect_same("qk_norm_rope q == rmsnorm + rope (gpu)", a, b, q.bytes);
    OK(gpu->ops->download(gpu, a, k.g, k.bytes));
    OK(gpu->ops->download(gpu, b, k2.g, k.bytes));
    expect_same("qk_norm_rope k == rmsnorm + rope (gpu)", a, b, k.bytes);
    free(a); free(b);
    rm(qx); rm(qw); rm(kw); rm(k); rm(pos); rm(q); rm(q2); rm(k2);
}

/* attention_gated with qk (the head norms and RoPE applied by the attention; the CUDA backend writes the K/V rows in
 * the same launch where every row is a decode row, in order) is bitwise qk_norm_rope then attention: q, k, out and
 * every byte of the caches (the positions written are poisoned first, so a byte left unwritten shows), with f32, bf16
 * and q8 caches. Seqs (rows, position of the first, chunked): in order, one row each, one past a split (the fused
 * launch); in order with a draft block of 68 rows (70 rows: the table in device memory); out of order; a decode row
 * beside a prompt (both: the launches apart). The 9B's heads. */
static void qk_attention_case(qwfmt fmt, const qseq *seqs, int ns, const char *what) {
    const int nq = 16, nkv = 4, D = 256, rot = 64, ctx = 320;
    int n = 0;
    int32_t pos[80];
    for (int s = 0; s < ns; s++) {
        if (seqs[s].row0 + seqs[s].n_rows > n) n = seqs[s].row0 + seqs[s].n_rows;
        for (int r = 0; r < seqs[s].n_rows; r++) pos[seqs[s].row0 + r] = seqs[s].pos0 + r;
    }
    buf qx = mk_rand((size_t)n * nq * D * 2, 3.0f), qw = mk_rand(D, 1.0f), kw = mk_rand(D, 1.0f), p = mk(n * 4, pos);
    buf k0 = mk_rand((size_t)n * nkv * D, 2.0f), v = mk_rand((size_t)n * nkv * D, 1.0f);
    buf q[2], k[2], out[2], kc[2][4], vc[2][4];
    const size_t rb = (size_t)qkv_row_bytes(fmt, nkv, D);
    unsigned char junk[4 * 256 * 4 + 64];
    memset(junk, 0xA5, sizeof junk);
    void *kcg[2][4], *vcg[2][4];
    for (int t = 0; t < 2; t++) {
        q[t] = mk((size_t)n * nq * D * 4, NULL), k[t] = mk(k0.bytes, NULL), out[t] = mk((size_t)n * nq * D * 4, NULL);
        OK(gpu->ops->copy(gpu, k[t].g, k0.g, k0.bytes));
        for (int s = 0; s < ns; s++) {
            if (t == 0) {
                kc[0][s] = mk_cache(ctx, nkv, D, fmt), vc[0][s] = mk_cache(ctx, nkv, D, fmt);
            } else {
                kc[1][s] = mk(kc[0][s].bytes, NULL), vc[1][s] = mk(vc[0][s].bytes, NULL);
                OK(gpu->ops->copy(gpu, kc[1][s].g, kc[0][s].g, kc[0][s].bytes));
                OK(gpu->ops->copy(gpu, vc[1][s].g, vc[0][s].g, vc[0][s].bytes));
            }
            for (int r = 0; r < seqs[s].n_rows; r++) {
                const size_t at = (size_t)(seqs[s].pos0 + r) * rb;
                OK(gpu->ops->upload(gpu, (char *)kc[t][s].g + at, junk, rb));
                OK(gpu->ops->upload(gpu, (char *)vc[t][s].g + at, junk, rb));
            }
            kcg[t][s] = kc[t][s].g, vcg[t][s] = vc[t][s].g;
        }
    }
    const float scale = 1.0f / 16.0f;
    OK(gpu->ops->qk_norm_rope(gpu, qx.g, 2 * D, qw.g, q[0].g, k[0].g, kw.g, n, nq, nkv, D, 1e-6f, rot, p.g, 1e7f));
    OK(gpu->ops->attention(gpu, q[0].g, k[0].g, v.g, seqs, ns, kcg[0], vcg[0], fmt, nq, nkv, D, scale, out[0].g));
    const qqk_prep qk = {qx.g, 2 * D, qw.g, kw.g, 1e-6f, rot, p.g, 1e7f};
    OK(gpu->ops->attention_gated(gpu, q[1].g, k[1].g, v.g, seqs, ns, kcg[1], vcg[1], fmt, nq, nkv, D, scale,
                                 out[1].g, NULL, &qk));
    char name[160];
    snprintf(name, sizeof name, "attention_gated's qk, %s, %s: q, k, out, caches", kv_name(fmt), what);
    int same = same_gpu(q[0].g, q[1].g, q[0].bytes) && same_gpu(k[0].g, k[1].g, k[0].bytes) &&
               same_gpu(out[0].g, out[1].g, out[0].bytes);
    for (int s = 0; s < ns; s++)
        same &= same_gpu(kc[0][s].g, kc[1][s].g, kc[0][s].bytes) && same_gpu(vc[0][s].g, vc[1][s].g, vc[0][s].bytes);
    expect_flag(name, same);
    for (int t = 0; t < 2; t++) {
        rm(q[t]); rm(k[t]); rm(out[t]);
        for (int s = 0; s < ns; s++) rm(kc[t][s]), rm(vc[t][s]);
    }
    rm(qx); rm(qw); rm(kw); rm(p); rm(k0); rm(v);
}
static void test_attention_qk(void) {
    const qseq in_order[3] = {{0, 1, 5, 0}, {1, 1, 300, 0}, {2, 1, 0, 0}};
    const qseq draft[3] = {{0, 1, 5, 0}, {1, 1, 300, 0}, {2, 68, 200, 0}};
    const qseq reversed[3] = {{2, 1, 5, 0}, {1, 1, 300, 0}, {0, 1, 0, 0}};
    const qseq mixed[2] = {{0, 1, 40, 0}, {1, 5, 0, 1}};
    const qwfmt fmts[3] = {QW_F32, QW_BF16, QW_Q8};
    for (int f = 0; f < 3; f++) {
        qk_attention_case(fmts[f], in_order, 3, "3 decode rows in order");
        qk_attention_case(fmts[f], draft, 3, "70 decode rows in order");
        qk_attention_case(fmts[f], reversed, 3, "3 decode rows out of order");
        qk_attention_case(fmts[f], mixed, 2, "a decode row and a prompt");
    }
}

/* add_rmsnorm is bitwise add then rmsnorm on the GPU (and close to the CPU); argmax picks the CPU's
 * index, ties (first wins) and NaNs (never win; NaN first gives 0) included. */
static void test_add_rmsnorm_argmax(void) {
    const int nv = 7, dim = 4096, V = 50000;
    buf x = mk_rand((size_t)nv * dim, 2.0f), r = mk_rand((size_t)nv * dim, 1.0f), w = mk_rand(dim, 1.0f);
    buf x2 = mk((size_t)nv * dim * 4, NULL), y = mk((size_t)nv * dim * 4, NULL), y2 = mk((size_t)nv * dim * 4, NULL);
    OK(gpu->ops->copy(gpu, x2.g, x.g, x.bytes));
    OK(cpu->ops->add_rmsnorm(cpu, x.c, r.c, w.c, nv, dim, 1e-6f, y.c));
    OK(gpu->ops->add_rmsnorm(gpu, x.g, r.g, w.g, nv, dim, 1e-6f, y.g));
    expect_close("add_rmsnorm (residual)", x, 1e-6);
    expect_close("add_rmsnorm (norm)", y, 1e-5);
    OK(gpu->ops->add(gpu, x2.g, r.g, (int64_t)nv * dim));
    OK(gpu->ops->rmsnorm(gpu, x2.g, dim, w.g, nv, dim, 1e-6f, y2.g, dim));
    float *a = xmalloc(y.bytes), *b = xmalloc(y.bytes);
    OK(gpu->ops->download(gpu, a, y.g, y.bytes));
    OK(gpu->ops->download(gpu, b, y2.g, y.bytes));
    expect_same("add_rmsnorm == add + rmsnorm (gpu)", a, b, y.bytes);
    free(a); free(b);

    const int rows = 5;
    float *l = xmalloc((size_t)rows * V * sizeof *l);
    for (size_t i = 0; i < (size_t)rows * V; i++) l[i] = frand();
    l[0 * V + 777] = 5.0f; l[0 * V + 40000] = 5.0f;     /* a tie: the first wins */
    l[1 * V + 0] = NAN;                                  /* NaN first: 0 */
    for (int i = 0; i < V; i += 3) l[2 * V + i] = NAN;   /* NaNs never win */
    l[3 * V + V - 1] = 9.0f;                             /* the last element */
    for (int i = 0; i < V; i++) l[4 * V + i] = -INFINITY; /* all equal: 0 */
    buf lg = mk((size_t)rows * V * sizeof *l, l), ic = mk(rows * 4, NULL);
    OK(cpu->ops->argmax(cpu, lg.c, rows, V, ic.c));
    OK(gpu->ops->argmax(gpu, lg.g, rows, V, ic.g));
    int32_t want[5], got[5];
    OK(cpu->ops->download(cpu, want, ic.c, sizeof want));
    OK(gpu->ops->download(gpu, got, ic.g, sizeof got));
    expect_same("argmax (ties, NaN, -inf)", want, got, sizeof want);
    free(l);
    rm(x); rm(r); rm(w); rm(x2); rm(y); rm(y2); rm(lg); rm(ic);
}

/* draw (draw.h) picks the CPU's id on a 248k vocabulary: temperatures, min-p (1: the top and its tie), NaNs and
 * infinities among the logits, a greedy row (NaN first: 0), a row without a finite logit (0); top-k (ties at its edge
 * by id) with and without top-p, top-p alone on a peaked row. A top-k above 1024 and a top-p set past the first 1024
 * are the host's (-1). */
static void test_draw(void) {
    enum { ROWS = 18 };
    const int V = 248320;
    float *l = xmalloc((size_t)ROWS * V * sizeof *l);
    for (size_t i = 0; i < (size_t)ROWS * V; i++) l[i] = 4.0f * frand();
    qdraw d[ROWS];
    for (int r = 0; r < ROWS; r++)
        d[r] = draw_params(0.4 + 0.1 * r, r % 3 ? 0.0 : 0.02, 0, 1.0, draw_key(77, 1000 + r));
    d[1] = draw_params(0.3, 1.0, 0, 1.0, draw_key(5, 9)); /* the top and its tie only */
    l[1 * V + 10] = 20.0f, l[1 * V + 200000] = 20.0f;
    d[2].temperature = 0.0, l[2 * V] = NAN;                              /* greedy, NaN first: 0 */
    for (int i = 0; i < V; i++) l[3 * V + i] = i % 2 ? -INFINITY : NAN;  /* no finite logit: argmax's 0 */
    for (int i = 0; i < V; i += 7) l[4 * V + i] = i % 2 ? NAN : INFINITY; /* never drawn */
    d[6].top_k = 1, d[7].top_k = 20, d[8].top_k = 1024, d[8].top_p = 0.5, d[9].top_k = 40, d[9].top_p = 0.8;
    d[9].min_rel = d[9].temperature * log(0.3);
    for (int i = 0; i < V; i++) l[10 * V + i] = i % 3 ? 1.0f : 0.5f;   /* top-k 25 among ties: the lowest ids */
    d[10].top_k = 25;
    for (int r = 11; r < 14; r++) /* peaked: 200 logits near 12, so top-p closes within them */
        for (int i = 0; i < 200; i++) l[(size_t)r * V + (size_t)(i * 1237 + r) % V] = 12.0f + frand();
    d[11].top_p = 0.9, d[11].temperature = 0.5; /* (at 1.5 the flat rest would outweigh the 200) */
    d[12].top_p = 0.5, d[12].top_k = 100, d[13].top_p = 0.99, d[13].min_rel = -2.0;
    d[14].top_p = 0.9;   /* flat: the set runs past 1024, the host's */
    d[15].top_k = 1025;  /* past 1024: the host's */
    d[16].top_k = 300000, d[16].top_p = 0.95; /* past the vocabulary: the host's too */
    d[17].top_p = 0.5, d[17].temperature = 0.01; /* a narrow temperature: a handful of candidates */
    buf lg = mk((size_t)ROWS * V * sizeof *l, l), ic = mk(ROWS * 4, NULL);
    OK(cpu->ops->draw(cpu, lg.c, ROWS, V, d, ic.c));
    OK(gpu->ops->draw(gpu, lg.g, ROWS, V, d, ic.g));
    int32_t want[ROWS], got[ROWS];
    OK(cpu->ops->download(cpu, want, ic.c, sizeof want));
    OK(gpu->ops->download(gpu, got, ic.g, sizeof got));
    want[14] = want[15] = want[16] = -1;
    for (int r = 0; r < ROWS; r++)
        if (want[r] != got[r]) fprintf(stderr, "draw row %d: cpu %d, gpu %d\n", r, want[r], got[r]);
    expect_same("draw (temperatures, min-p, top-k, top-p, NaN, inf, greedy)", want, got, sizeof want);
    expect_flag("draw: min-p 1 keeps the tied tops", want[1] == 10 || want[1] == 200000);
    expect_flag("draw: top-k among ties keeps the lowest ids", want[10] >= 0 && want[10] < 38 && want[10] % 3 != 0);
    free(l);
    rm(lg); rm(ic);
}

/* The memory fit's question (engine/memfit.c memfit_dequant_copies) answered by this device and environment: on a
 * compute 9.0 device (run.sh builds sm_90a) the 4-bit fixture's weights take the fold in split mode, so the fit counts
 * no dequantized copies of them; with QUILL_PREFILL_DEQUANT=pass, QUILL_PREFILL_PRECISION=bf16 or
 * QUILL_PREFILL_GEMM=cublaslt (run.sh runs this binary under the first and the last) it counts them. */
static void test_memfit_dequant_copies(void) {
    qwen35_config c;
    char d[1024], err[256];
    snprintf(d, sizeof d, "%s/models/gqa4-v2k-mlx4", QUILL_FIXTURES);
    OK(qwen35_config_load(d, &c));
    cuda_device_info info;
    const int hopper = cuda_device_query(0, &info, err, sizeof err) == 0 && info.sm_major == 9 && info.sm_minor == 0;
    const char *dq = getenv("QUILL_PREFILL_DEQUANT"), *pp = getenv("QUILL_PREFILL_PRECISION");
    const char *pg = getenv("QUILL_PREFILL_GEMM");
    const int fold = hopper && !(dq && !strcmp(dq, "pass")) && !(pp && !strcmp(pp, "bf16")) &&
                     !(pg && (!strcmp(pg, "cublaslt") || !strcmp(pg, "tiled")));
    expect_flag(fold ? "memory fit: 4-bit weights on the fold, no dequantized copies"
                     : "memory fit: 4-bit weights dequantized, their copies counted",
                memfit_dequant_copies(&c, "cuda") == !fold);
    qwen35_config_free(&c);
}

int main(void) {
    static void (*const tests[])(void) = {test_norms_and_elementwise, test_glu_matmul, test_residual_boundary,
                                          test_qk_norm_rope, test_attention_qk, test_add_rmsnorm_argmax, test_draw,
                                          test_memfit_dequant_copies};
    return run_cuda_tests(tests, (int)(sizeof tests / sizeof tests[0]));
}
