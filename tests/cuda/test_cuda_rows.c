/* test_cuda_rows.c: the split rows a producer leaves its consumer in the CUDA backend's dequant mode, instead of the
 * consumer's split launch: the MLP's GLU pair (qnorm glu_pair), the gated delta rule's gated norm
 * (qgdn_dims.out_norm) and the attention's output gate (attention_gated). Each must give the bits of the path without
 * it, in every decode mode, and in dequant mode the consumer must read the rows (its x is overwritten in between and
 * the result must not change). Built when nvcc is found; skips (exit 77) without a GPU. Run on the GPU machine by
 * tests/cuda/run.sh. */
#include "cuda_test_util.h"

static int dequant_mode(void) {
    const char *p = getenv("QUILL_DECODE_PRECISION");
    return p && !strcmp(p, "dequant");
}

/* The MLP's boundary (qnorm glu_pair): a residual producer, the gate + up pair normalised from its rows, the down
 * projection gated by silu(gate) into the residual. With glu_pair the CUDA backend's dequant mode has the pair leave
 * the GLU's product as the down projection's split rows (gx): the gate, up and new residual must be bitwise those of
 * glu_pair 0 at 16 / 37 / 64 rows, and the first 1 and 5 rows those of the 37. In dequant mode the gate is then
 * overwritten before the down projection, which must not change its result (it read the pair's rows). 4-bit g64:
 * the 9B's shapes and a small set (the pair in slices of 2). */
typedef struct { wpair Wp, Wg, Wu, Wd; buf xin, xin1, x0, x, ss, ss2, nw, yg, yu, junk; int H, I; } glu_case;
static void glu_run(glu_case *c, int n, int pair, int junk, void *const *out) { /* out: x, gate, up (host, n rows) */
    const qnorm nm = {c->ss.g, c->nw.g, 1e-6f, 1, pair};
    const qglu act = {c->yg.g, c->I, c->I, QGLU_SILU, NULL, 0.0f};
    const qweight *C[2] = {&c->Wg.g, &c->Wu.g};
    float *Y[2] = {(float *)c->yg.g, (float *)c->yu.g};
    OK(gpu->ops->copy(gpu, c->x.g, c->x0.g, c->x.bytes));
    OK(gpu->ops->copy(gpu, c->xin1.g, c->xin.g, c->xin.bytes));
    OK(gpu->ops->resid_matmul(gpu, c->xin1.g, NULL, n, &c->Wp.g, c->x.g, c->ss.g, c->nw.g));
    OK(gpu->ops->norm_matmul_multi(gpu, c->x.g, &nm, n, 2, C, Y));
    OK(gpu->ops->download(gpu, out[1], c->yg.g, (size_t)n * c->I * 4));
    OK(gpu->ops->download(gpu, out[2], c->yu.g, (size_t)n * c->I * 4));
    if (junk) OK(gpu->ops->copy(gpu, c->yg.g, c->junk.g, c->yg.bytes));
    OK(gpu->ops->resid_matmul(gpu, c->yu.g, &act, n, &c->Wd.g, c->x.g, c->ss2.g, NULL));
    OK(gpu->ops->download(gpu, out[0], c->x.g, (size_t)n * c->H * 4));
}
static void test_glu_pair(void) {
    const int sizes[2][2] = {{4096, 12288}, {2048, 1536}}, rows = 64; /* the second: slices of 2 */
    const int dequant = dequant_mode();
    for (int k = 0; k < 2; k++) {
        glu_case c = {.H = sizes[k][0], .I = sizes[k][1]};
        const int H = c.H, I = c.I;
        c.Wp = mk_weight(QW_AFFINE, H, 256, 4, 64), c.Wg = mk_weight(QW_AFFINE, I, H, 4, 64);
        c.Wu = mk_weight(QW_AFFINE, I, H, 4, 64), c.Wd = mk_weight(QW_AFFINE, H, I, 4, 64);
        c.xin = mk_rand((size_t)rows * 256, 1.0f), c.xin1 = mk(c.xin.bytes, NULL);
        c.x0 = mk_rand((size_t)rows * H, 2.0f);
        c.x = mk(c.x0.bytes, NULL), c.ss = mk((size_t)rows * ((H + QNORM_PART - 1) / QNORM_PART) * 4, NULL);
        c.ss2 = mk(c.ss.bytes, NULL), c.nw = mk_rand(H, 1.0f), c.yg = mk((size_t)rows * I * 4, NULL);
        c.yu = mk(c.yg.bytes, NULL), c.junk = mk_rand((size_t)rows * I, 5.0f);
        const size_t per_row[3] = {(size_t)H * 4, (size_t)I * 4, (size_t)I * 4};
        void *a[3], *b[3], *r37[3];
        for (int j = 0; j < 3; j++)
            a[j] = xmalloc(per_row[j] * rows), b[j] = xmalloc(per_row[j] * rows), r37[j] = xmalloc(per_row[j] * rows);
        int same = 1;
        const int ns[5] = {37, 16, 64, 1, 5};
        for (int q = 0; q < 5; q++) {
            const int n = ns[q];
            glu_run(&c, n, 1, 0, b);
            if (n >= 16) glu_run(&c, n, 0, 0, q == 0 ? r37 : a);
            for (int j = 0; j < 3; j++) same &= memcmp(n >= 16 && q ? a[j] : r37[j], b[j], per_row[j] * n) == 0;
        }
        glu_run(&c, 37, 1, 1, b);
        const int used = !dequant || memcmp(r37[0], b[0], per_row[0] * 37) == 0;
        char nm_[96];
        snprintf(nm_, sizeof nm_, "glu pair %dx%d: gate, up, residual == unpaired (16/37/64 rows; 1/5 in 37)", I, H);
        expect_flag(nm_, same);
        snprintf(nm_, sizeof nm_, "glu pair %dx%d: the down projection reads the pair's rows (dequant)", I, H);
        expect_flag(nm_, used);
        for (int j = 0; j < 3; j++) free(a[j]), free(b[j]), free(r37[j]);
        rm(c.xin); rm(c.xin1); rm(c.x0); rm(c.x); rm(c.ss); rm(c.ss2); rm(c.nw); rm(c.yg); rm(c.yu); rm(c.junk);
        rm_weight(c.Wp); rm_weight(c.Wg); rm_weight(c.Wu); rm_weight(c.Wd);
    }
}


/* The GDN's boundary (qgdn_dims.out_norm): the gated delta rule, then out_proj gated by the gated norm into the
 * residual (resid_matmul). With out_norm the CUDA backend's dequant mode has the rule leave out_proj's split rows
 * (gn): the rule's out and states and the new residual must be bitwise those of out_norm NULL, with f32 states (the
 * rule in clusters of 4 blocks) and bf16 states (column pairs, clusters of 2; both instances), at 16 / 37 / 64 seqs of
 * a row and 6 seqs of 3 rows (a draft's). In dequant mode out is then overwritten before out_proj, which must not
 * change its result. Hk = 4, Hv = 8 heads of 128 (the 9B's ratio), out_proj 2048 x 1024 4-bit g64. */
typedef struct {
    qgdn_dims d;
    wpair Wo;
    buf qkv, g, beta, z, nw, out, junk, x0, x, ss, S0[64], S0h[64], S[64]; /* S0h: S0 as bf16 */
    size_t Sb, ow;
    int H;
} gn_case;
/* out: the residual, out, states (host; n rows, ns states) */
static void gn_run(gn_case *c, const qseq *seqs, int ns, int n, int hint, int junk, void *const *out) {
    const qglu norm = {c->z.g, c->d.v_dim, c->d.v_dim, QGLU_SILU, c->nw.g, 1e-6f};
    qgdn_dims d = c->d;
    d.out_norm = hint ? &norm : NULL;
    float *Sp[64];
    for (int s = 0; s < ns; s++) {
        OK(gpu->ops->copy(gpu, c->S[s].g, (c->d.state_bf16 ? c->S0h : c->S0)[s].g, c->Sb));
        Sp[s] = c->S[s].g;
    }
    OK(gpu->ops->copy(gpu, c->x.g, c->x0.g, c->x.bytes));
    OK(gpu->ops->gated_delta(gpu, c->qkv.g, c->g.g, c->beta.g, seqs, ns, Sp, d, c->out.g));
    OK(gpu->ops->download(gpu, out[1], c->out.g, (size_t)n * c->ow * 4));
    for (int s = 0; s < ns; s++) OK(gpu->ops->download(gpu, (char *)out[2] + s * c->Sb, c->S[s].g, c->Sb));
    if (junk) OK(gpu->ops->copy(gpu, c->out.g, c->junk.g, c->out.bytes));
    OK(gpu->ops->resid_matmul(gpu, c->out.g, &norm, n, &c->Wo.g, c->x.g, c->ss.g, NULL));
    OK(gpu->ops->download(gpu, out[0], c->x.g, (size_t)n * c->H * 4));
}
static void test_gnorm_rows(void) {
    enum { ROWS = 64 };
    gn_case c = {.d = {4, 8, 128, 128, 0, 1, NULL}, .H = 2048};
    const int Hv = c.d.n_v_heads, W = 2 * c.d.n_k_heads * c.d.k_dim + Hv * c.d.v_dim;
    c.ow = (size_t)Hv * c.d.v_dim;
    c.Sb = c.ow * c.d.k_dim * 4; /* f32 (bf16 states use half) */
    c.Wo = mk_weight(QW_AFFINE, c.H, (int64_t)c.ow, 4, 64);
    c.qkv = mk_rand((size_t)ROWS * W, 1.0f), c.z = mk_rand((size_t)ROWS * c.ow, 3.0f), c.nw = mk_rand(c.d.v_dim, 1.0f);
    c.beta = mk_rand((size_t)ROWS * Hv, 0.45f), c.g = mk_rand((size_t)ROWS * Hv, 0.5f);
    float *h = xmalloc((size_t)ROWS * Hv * 4);
    OK(gpu->ops->download(gpu, h, c.g.g, (size_t)ROWS * Hv * 4));
    for (int i = 0; i < ROWS * Hv; i++) h[i] = -fabsf(h[i]); /* a decay */
    OK(gpu->ops->upload(gpu, c.g.g, h, (size_t)ROWS * Hv * 4));
    OK(gpu->ops->download(gpu, h, c.beta.g, (size_t)ROWS * Hv * 4));
    for (int i = 0; i < ROWS * Hv; i++) h[i] += 0.5f; /* in (0.05, 0.95) */
    OK(gpu->ops->upload(gpu, c.beta.g, h, (size_t)ROWS * Hv * 4));
    free(h);
    c.out = mk((size_t)ROWS * c.ow * 4, NULL), c.junk = mk_rand((size_t)ROWS * c.ow, 5.0f);
    c.x0 = mk_rand((size_t)ROWS * c.H, 2.0f), c.x = mk(c.x0.bytes, NULL);
    c.ss = mk((size_t)ROWS * ((c.H + QNORM_PART - 1) / QNORM_PART) * 4, NULL);
    float *sf = xmalloc(c.Sb);
    uint16_t *sh = xcalloc(1, c.Sb);
    for (int s = 0; s < 64; s++) {
        c.S0[s] = mk_rand(c.Sb / 4, 0.1f), c.S[s] = mk(c.Sb, NULL);
        OK(gpu->ops->download(gpu, sf, c.S0[s].g, c.Sb));
        bf16_from(sf, sh, c.Sb / 4);
        c.S0h[s] = mk(c.Sb, sh);
    }
    free(sf), free(sh);
    const size_t per[3] = {(size_t)c.H * 4, c.ow * 4, c.Sb};
    void *a[3], *b[3];
    for (int j = 0; j < 3; j++) a[j] = xmalloc(per[j] * 64), b[j] = xmalloc(per[j] * 64);
    const struct { int ns, len, bf16; } cases[] = {{37, 1, 0}, {16, 1, 0}, {16, 1, 1},
                                                   {64, 1, 1}, {37, 1, 1}, {6, 3, 1}};
    const int dequant = dequant_mode();
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int ns = cases[k].ns, len = cases[k].len, n = ns * len;
        c.d.state_bf16 = cases[k].bf16;
        qseq seqs[64];
        for (int s = 0; s < ns; s++) seqs[s] = (qseq){s * len, len, 3 + s, 0};
        gn_run(&c, seqs, ns, n, 0, 0, a);
        gn_run(&c, seqs, ns, n, 1, 0, b);
        const size_t Sb = cases[k].bf16 ? c.Sb / 2 : c.Sb;
        int same = memcmp(a[0], b[0], per[0] * n) == 0 && memcmp(a[1], b[1], per[1] * n) == 0;
        for (int s = 0; s < ns; s++) same &= memcmp((char *)a[2] + s * c.Sb, (char *)b[2] + s * c.Sb, Sb) == 0;
        char nm_[96];
        snprintf(nm_, sizeof nm_, "gnorm rows %d x %d, %s states: out, S, residual", ns, len,
                 cases[k].bf16 ? "bf16" : "f32");
        expect_flag(nm_, same);
        gn_run(&c, seqs, ns, n, 1, 1, b);
        const int used = !dequant || memcmp(a[0], b[0], per[0] * n) == 0;
        snprintf(nm_, sizeof nm_, "gnorm rows %d x %d: out_proj reads the rule's rows (dequant)", ns, len);
        expect_flag(nm_, used);
    }
    for (int j = 0; j < 3; j++) free(a[j]), free(b[j]);
    for (int s = 0; s < 64; s++) rm(c.S0[s]), rm(c.S0h[s]), rm(c.S[s]);
    rm(c.qkv); rm(c.g); rm(c.beta); rm(c.z); rm(c.nw); rm(c.out); rm(c.junk); rm(c.x0); rm(c.x); rm(c.ss);
    rm_weight(c.Wo);
}

/* The attention's boundary (attention_gated): decode attention, then o_proj gated by sigmoid of the gate half of each
 * head's [query | gate] into the residual. Past one split of positions the CUDA backend's dequant mode has the
 * attention's combine leave o_proj's split rows: the attention's out and the new residual must be bitwise those of
 * attention, at 16 / 37 / 64 seqs of a row and 6 seqs of 3 rows, and in dequant mode out is then overwritten before
 * o_proj, which must not change its result. Within one split (no combine) the hint must change nothing. The 9B's
 * heads: 16 query, 4 K/V heads of 256, bf16 K/V; o_proj 2048 x 4096 4-bit g64. */
enum { AQ = 16, AKV = 4, AD = 256 };
typedef struct {
    wpair Wo;
    buf q, k, v, qg, o, junk, x0, x, ss, kc[64], vc[64];
    int H;
} att_case;
static void att_run(att_case *c, const qseq *seqs, int ns, int n, int hint, int junk, void *const *out) { /* x, o */
    const qglu gate = {(const float *)c->qg.g + AD, 2 * AD, AD, QGLU_SIGMOID, NULL, 0.0f};
    void *kc[64], *vc[64];
    for (int s = 0; s < ns; s++) kc[s] = c->kc[s].g, vc[s] = c->vc[s].g;
    const float scale = 1.0f / 16.0f;
    OK(gpu->ops->copy(gpu, c->x.g, c->x0.g, c->x.bytes));
    if (hint)
        OK(gpu->ops->attention_gated(gpu, c->q.g, c->k.g, c->v.g, seqs, ns, kc, vc, QW_BF16, AQ, AKV, AD, scale, c->o.g,
                                     &gate, NULL));
    else
        OK(gpu->ops->attention(gpu, c->q.g, c->k.g, c->v.g, seqs, ns, kc, vc, QW_BF16, AQ, AKV, AD, scale, c->o.g));
    OK(gpu->ops->download(gpu, out[1], c->o.g, (size_t)n * AQ * AD * 4));
    if (junk) OK(gpu->ops->copy(gpu, c->o.g, c->junk.g, c->o.bytes));
    OK(gpu->ops->resid_matmul(gpu, c->o.g, &gate, n, &c->Wo.g, c->x.g, c->ss.g, NULL));
    OK(gpu->ops->download(gpu, out[0], c->x.g, (size_t)n * c->H * 4));
}
static void test_att_gate_rows(void) {
    enum { ROWS = 64, CTX = 520 };
    att_case c = {.H = 2048};
    const size_t qw = (size_t)AQ * AD, kw = (size_t)AKV * AD;
    c.Wo = mk_weight(QW_AFFINE, c.H, (int64_t)qw, 4, 64);
    c.q = mk_rand(ROWS * qw, 2.0f), c.k = mk_rand(ROWS * kw, 1.0f), c.v = mk_rand(ROWS * kw, 1.0f);
    c.qg = mk_rand(ROWS * 2 * qw, 3.0f), c.o = mk(ROWS * qw * 4, NULL), c.junk = mk_rand(ROWS * qw, 5.0f);
    c.x0 = mk_rand((size_t)ROWS * c.H, 2.0f), c.x = mk(c.x0.bytes, NULL);
    c.ss = mk((size_t)ROWS * ((c.H + QNORM_PART - 1) / QNORM_PART) * 4, NULL);
    for (int s = 0; s < 64; s++) c.kc[s] = mk_cache(CTX, AKV, AD, QW_BF16), c.vc[s] = mk_cache(CTX, AKV, AD, QW_BF16);
    const size_t per[2] = {(size_t)c.H * 4, qw * 4};
    void *a[2], *b[2];
    for (int j = 0; j < 2; j++) a[j] = xmalloc(per[j] * ROWS), b[j] = xmalloc(per[j] * ROWS);
    const struct { int ns, len, pos; } cases[] = {{37, 1, 300}, {16, 1, 300}, {64, 1, 500}, {6, 3, 260}, {16, 1, 40}};
    const int dequant = dequant_mode();
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int ns = cases[k].ns, len = cases[k].len, n = ns * len;
        qseq seqs[64];
        for (int s = 0; s < ns; s++) seqs[s] = (qseq){s * len, len, cases[k].pos + (s % 7), 0};
        att_run(&c, seqs, ns, n, 0, 0, a);
        att_run(&c, seqs, ns, n, 1, 0, b);
        const int same = memcmp(a[0], b[0], per[0] * n) == 0 && memcmp(a[1], b[1], per[1] * n) == 0;
        char nm_[96];
        snprintf(nm_, sizeof nm_, "att gate rows %d x %d at %d: out, residual", ns, len, cases[k].pos);
        expect_flag(nm_, same);
        if (cases[k].pos < 256) continue; /* one split: no combine, no rows */
        att_run(&c, seqs, ns, n, 1, 1, b);
        const int used = !dequant || memcmp(a[0], b[0], per[0] * n) == 0;
        snprintf(nm_, sizeof nm_, "att gate rows %d x %d: o_proj reads the combine's rows (dequant)", ns, len);
        expect_flag(nm_, used);
    }
    for (int j = 0; j < 2; j++) free(a[j]), free(b[j]);
    for (int s = 0; s < 64; s++) rm(c.kc[s]), rm(c.vc[s]);
    rm(c.q); rm(c.k); rm(c.v); rm(c.qg); rm(c.o); rm(c.junk); rm(c.x0); rm(c.x); rm(c.ss);
    rm_weight(c.Wo);
}

int main(void) {
    static void (*const tests[])(void) = {test_glu_pair, test_gnorm_rows, test_att_gate_rows};
    return run_cuda_tests(tests, (int)(sizeof tests / sizeof tests[0]));
}
