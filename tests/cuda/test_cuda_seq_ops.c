/* test_cuda_seq_ops.c: the CUDA ops that run per stream (attention for decode and prompt rows, conv,
 * the gated delta rule recurrent and chunked) against the CPU reference on random inputs, and
 * EXACT(batch) / EXACT(chunk) on the GPU: a seq gives bit-identical results alone and among others, and
 * a prompt cut into calls equals the whole; the same with bf16 GDN states. Built when nvcc is found; skips (exit 77)
 * without a GPU. Run on the GPU machine by tests/cuda/run.sh. */
#include "cuda_test_util.h"
#include "backend/cuda/cuda_flash_prefill.h"

static void attention_case(qwfmt fmt) {
    const int nq = 8, nkv = 2, D = 256, rot = 64, ctx = 300;
    /* two seqs: A prefill rows at 0..99, B decode rows at 250..273 (a draft block after a prefix we write
     * first; its rows from 272 on see the new keys 256..271 in the first tile of their second split) */
    const int NB = 24, PB = 250, n = 100 + NB;
    buf q = mk_rand((size_t)n * nq * D, 1.0f), k = mk_rand((size_t)n * nkv * D, 1.0f), v = mk_rand((size_t)n * nkv * D, 1.0f);
    int32_t pos[100 + 24];
    for (int i = 0; i < 100; i++) pos[i] = i;
    for (int i = 0; i < NB; i++) pos[100 + i] = PB + i;
    buf p = mk(sizeof pos, pos);
    OK(cpu->ops->rope(cpu, q.c, n, nq, D, rot, p.c, 1e7f));
    OK(gpu->ops->rope(gpu, q.g, n, nq, D, rot, p.g, 1e7f));
    expect_close("rope (theta 1e7, 64 of 256 dims)", q, 1e-5);
    buf kcA = mk_cache(ctx, nkv, D, fmt), vcA = mk_cache(ctx, nkv, D, fmt);
    buf kcB = mk_cache(ctx, nkv, D, fmt), vcB = mk_cache(ctx, nkv, D, fmt);
    buf out = mk((size_t)n * nq * D * 4, NULL);
    qseq seqs[2] = {{0, 100, 0, 1}, {100, NB, PB, 0}};
    void *kc_c[2] = {kcA.c, kcB.c}, *vc_c[2] = {vcA.c, vcB.c}, *kc_g[2] = {kcA.g, kcB.g}, *vc_g[2] = {vcA.g, vcB.g};
    OK(cpu->ops->attention(cpu, q.c, k.c, v.c, seqs, 2, kc_c, vc_c, fmt, nq, nkv, D, 1.0f / 16, out.c));
    OK(gpu->ops->attention(gpu, q.g, k.g, v.g, seqs, 2, kc_g, vc_g, fmt, nq, nkv, D, 1.0f / 16, out.g));
    char name[96];
    snprintf(name, sizeof name, "attention 2 seqs, GQA 4:1, D 256, %s", kv_name(fmt));
    expect_close(name, out, cuda_flash_precision() == FLASH_SPLIT ? (fmt == QW_Q8 ? 2e-5 : 1e-5) : 2e-2);
    snprintf(name, sizeof name, "  caches written (decode and prompt rows): same bytes");
    expect_same_buf(name, kcB);
    expect_same_buf(name, vcA);
    /* EXACT(batch): seq B alone gives the same bits */
    size_t ob = (size_t)NB * nq * D * 4;
    float *together = xmalloc(ob), *alone = xmalloc(ob);
    OK(gpu->ops->download(gpu, together, (float *)out.g + (size_t)100 * nq * D, ob));
    qseq only_b = {100, NB, PB, 0};
    OK(gpu->ops->attention(gpu, q.g, k.g, v.g, &only_b, 1, &kc_g[1], &vc_g[1], fmt, nq, nkv, D, 1.0f / 16, out.g));
    OK(gpu->ops->download(gpu, alone, (float *)out.g + (size_t)100 * nq * D, ob));
    expect_same("  attention seq alone vs with another", together, alone, ob);
    free(together); free(alone);
    rm(q); rm(k); rm(v); rm(p); rm(kcA); rm(vcA); rm(kcB); rm(vcB); rm(out);
}

static void test_attention(void) {
    attention_case(QW_F32);
    attention_case(QW_BF16);
    attention_case(QW_Q8); /* the codes and scales each backend writes: byte for byte */
}

/* Prompt rows (chunked = 1) through the flash kernel: several seqs (lengths 1, 63, 64, 65, 300 at
 * positions 0 and off the 64-grid, each after a random cached prefix) against the CPU, in the mode
 * the environment picks and in both modes directly; then EXACT(chunk) (one call vs cuts at 64, 100,
 * and 1 + 170) and EXACT(batch) (a seq alone vs among the others), bitwise on the GPU. */
static void flash_case(int nq, int nkv, int D, int check_exact, qwfmt fmt) {
    enum { NS = 5 };
    const int len[NS] = {1, 63, 64, 65, 300}, p0[NS] = {0, 37, 0, 129, 70};
    int row0[NS], n = 0, ctx[NS];
    for (int s = 0; s < NS; s++) { row0[s] = n; n += len[s]; ctx[s] = p0[s] + len[s]; }
    const size_t qw = (size_t)nq * D, kw = (size_t)nkv * D;
    buf q = mk_rand((size_t)n * qw, 2.0f), k = mk_rand((size_t)n * kw, 1.0f), v = mk_rand((size_t)n * kw, 1.0f);
    buf kc[NS], vc[NS];
    void *kc_c[NS], *vc_c[NS], *kc_g[NS], *vc_g[NS];
    qseq seqs[NS];
    for (int s = 0; s < NS; s++) {
        kc[s] = mk_cache(ctx[s], nkv, D, fmt);
        vc[s] = mk_cache(ctx[s], nkv, D, fmt);
        kc_c[s] = kc[s].c; vc_c[s] = vc[s].c; kc_g[s] = kc[s].g; vc_g[s] = vc[s].g;
        seqs[s] = (qseq){row0[s], len[s], p0[s], 1};
    }
    const float scale = 1.0f / sqrtf((float)D);
    const size_t ob = (size_t)n * qw * sizeof(float);
    buf out = mk(ob, NULL);
    float *poison = xmalloc(ob);
    for (size_t i = 0; i < (size_t)n * qw; i++) poison[i] = NAN;
    OK(gpu->ops->upload(gpu, out.g, poison, ob));
    OK(cpu->ops->attention(cpu, q.c, k.c, v.c, seqs, NS, kc_c, vc_c, fmt, nq, nkv, D, scale, out.c));
    OK(gpu->ops->attention(gpu, q.g, k.g, v.g, seqs, NS, kc_g, vc_g, fmt, nq, nkv, D, scale, out.g));
    char name[96];
    const int env = cuda_flash_precision();
    snprintf(name, sizeof name, "prompt attn %d/%d D %d (%s, %s)", nq, nkv, D, env == FLASH_SPLIT ? "split" : "bf16",
             kv_name(fmt));
    expect_close(name, out, env == FLASH_SPLIT ? 1e-5 : 2e-2);
    float *ref = xmalloc(ob);
    OK(gpu->ops->download(gpu, ref, out.g, ob));
    for (int mode = 0; mode < 2; mode++) { /* both precisions, directly on the filled caches */
        OK(gpu->ops->upload(gpu, out.g, poison, ob));
        for (int s = 0; s < NS; s++)
            OK(cuda_flash_prefill(gpu, q.g, row0[s], len[s], p0[s], kc_g[s], vc_g[s], fmt, nq, nkv, D, scale, mode,
                                  out.g));
        snprintf(name, sizeof name, "  flash direct D %d (%s)", D, mode == FLASH_SPLIT ? "split" : "bf16");
        expect_close(name, out, mode == FLASH_SPLIT ? 1e-5 : 2e-2);
    }
    if (check_exact) {
        float *got = xmalloc(ob);
        /* EXACT(chunk): the 300-row seq (s = 4) cut into calls, each call writing its K/V first */
        const int cuts[3][3] = {{64, 300, 0}, {100, 300, 0}, {1, 171, 300}};
        const int s = 4;
        for (int c = 0; c < 3; c++) {
            OK(gpu->ops->upload(gpu, out.g, poison, ob));
            int a = 0;
            for (int i = 0; i < 3 && a < len[s]; i++) {
                const int b = cuts[c][i];
                qseq part = {row0[s] + a, b - a, p0[s] + a, 1};
                OK(gpu->ops->attention(gpu, q.g, k.g, v.g, &part, 1, &kc_g[s], &vc_g[s], fmt, nq, nkv, D, scale, out.g));
                a = b;
            }
            OK(gpu->ops->download(gpu, got, out.g, ob));
            snprintf(name, sizeof name, "  EXACT(chunk) D %d cut %d,%d", D, cuts[c][0], cuts[c][1]);
            expect_same(name, got + (size_t)row0[s] * qw, ref + (size_t)row0[s] * qw, (size_t)len[s] * qw * 4);
        }
        /* EXACT(batch): each seq alone vs all five in one call */
        int same = 1;
        for (int t = 0; t < NS; t++) {
            OK(gpu->ops->upload(gpu, out.g, poison, ob));
            OK(gpu->ops->attention(gpu, q.g, k.g, v.g, &seqs[t], 1, &kc_g[t], &vc_g[t], fmt, nq, nkv, D, scale, out.g));
            OK(gpu->ops->download(gpu, got, out.g, ob));
            same &= memcmp(got + (size_t)row0[t] * qw, ref + (size_t)row0[t] * qw, (size_t)len[t] * qw * 4) == 0;
        }
        snprintf(name, sizeof name, "  EXACT(batch) D %d, 5 seqs alone", D);
        expect_same(name, &same, &(int){1}, sizeof same);
        free(got);
    }
    free(ref);
    free(poison);
    for (int s = 0; s < NS; s++) { rm(kc[s]); rm(vc[s]); }
    rm(q); rm(k); rm(v); rm(out);
}

static void test_flash_prefill(void) {
    flash_case(16, 4, 256, 1, QW_F32); /* the 9B shape: GQA 4:1, dim 256 */
    flash_case(16, 4, 256, 1, QW_BF16);
    flash_case(16, 4, 256, 1, QW_Q8);
    flash_case(8, 2, 128, 1, QW_F32);
    flash_case(8, 2, 128, 0, QW_Q8);
    flash_case(8, 2, 64, 0, QW_F32);
    flash_case(8, 2, 64, 0, QW_BF16);
    flash_case(8, 2, 64, 0, QW_Q8);
    flash_case(16, 2, 128, 0, QW_F32); /* GQA 8:1 */
    flash_case(4, 4, 64, 0, QW_F32);   /* no sharing */
}

/* Equal bits of the GPU buffers in pairs p[i][0], p[i][1]. */
static int same_bufs(const buf (*p)[2], int n) {
    int same = 1;
    for (int i = 0; i < n; i++) same &= same_gpu(p[i][0].g, p[i][1].g, p[i][0].bytes);
    return same;
}

/* A GDN state of n bf16 values, uniform in [-scale, scale) (dims.state_bf16). */
static buf mk_state_bf16(size_t n, float scale) {
    float *f = xmalloc(n * 4);
    uint16_t *h = xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) f[i] = scale * frand();
    bf16_from(f, h, n);
    buf b = mk(n * 2, h);
    free(f);
    free(h);
    return b;
}
/* A state buffer's n values as f32 (bf16 with bf16 set). */
static void state_floats(qbackend *be, const void *p, size_t n, int bf16, float *out) {
    if (!bf16) {
        OK(be->ops->download(be, out, p, n * 4));
        return;
    }
    uint16_t *h = xmalloc(n * 2);
    OK(be->ops->download(be, h, p, n * 2));
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)h[i] << 16;
        memcpy(&out[i], &u, 4);
    }
    free(h);
}

/* conv_gated_delta == conv1d_silu_gates + gated_delta, bitwise (out, both seqs' conv states and S), twice in a row
 * (its tickets are left zero); the seqs are recurrent (not chunked). */
static void conv_gated_delta_case(qgdn_dims d, buf x, buf w, buf a, buf b, buf Al, buf dt, const qseq *seqs, int ns) {
    const int C = 2 * d.n_k_heads * d.k_dim + d.n_v_heads * d.v_dim, K = 4;
    const size_t Sn = (size_t)d.n_v_heads * d.k_dim * d.v_dim, n = x.bytes / 4 / C;
    buf y = mk(x.bytes, NULL), g = mk(n * d.n_v_heads * 4, NULL), be = mk(n * d.n_v_heads * 4, NULL);
    buf o1 = mk(n * d.n_v_heads * d.v_dim * 4, NULL), o2 = mk(o1.bytes, NULL);
    buf st[2][2], S[2][2];
    float *stp[2][2], *Sp[2][2];
    for (int i = 0; i < ns; i++) {
        st[0][i] = mk_rand((size_t)(K - 1) * C, 1.0f), S[0][i] = d.state_bf16 ? mk_state_bf16(Sn, 0.1f) : mk_rand(Sn, 0.1f);
        st[1][i] = mk(st[0][i].bytes, NULL), S[1][i] = mk(S[0][i].bytes, NULL);
        OK(gpu->ops->copy(gpu, st[1][i].g, st[0][i].g, st[0][i].bytes));
        OK(gpu->ops->copy(gpu, S[1][i].g, S[0][i].g, S[0][i].bytes));
        for (int v = 0; v < 2; v++) stp[v][i] = st[v][i].g, Sp[v][i] = S[v][i].g;
    }
    const qgdn_gates q = {a.g, b.g, Al.g, dt.g, g.g, be.g, (int64_t)n, d.n_v_heads, 0};
    int same = 1;
    for (int rep = 0; rep < 2; rep++) {
        OK(gpu->ops->conv1d_silu_gates(gpu, x.g, seqs, ns, stp[0], w.g, C, K, y.g, &q));
        OK(gpu->ops->gated_delta(gpu, y.g, g.g, be.g, seqs, ns, Sp[0], d, o1.g));
        OK(gpu->ops->conv_gated_delta(gpu, x.g, seqs, ns, stp[1], w.g, K, y.g, &q, Sp[1], d, o2.g));
        const buf pairs[5][2] = {{o1, o2}, {st[0][0], st[1][0]}, {st[0][1], st[1][1]}, {S[0][0], S[1][0]},
                                 {S[0][1], S[1][1]}};
        same &= same_bufs(pairs, ns == 2 ? 5 : 1);
    }
    expect_flag(d.state_bf16 ? "conv_gated_delta == conv1d_silu_gates + gated_delta (gpu), twice, bf16 states"
                             : "conv_gated_delta == conv1d_silu_gates + gated_delta (gpu), twice",
                same);
    for (int i = 0; i < ns; i++) rm(st[0][i]), rm(st[1][i]), rm(S[0][i]), rm(S[1][i]);
    rm(y); rm(g); rm(be); rm(o1); rm(o2);
}

static void test_gdn(void) {
    const qgdn_dims d = {4, 8, 128, 128, 0, 0, NULL};
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
    { /* conv1d_silu_gates: bitwise the two ops (output, conv state, g, beta) */
        buf y2 = mk(y.bytes, NULL), y3 = mk(y.bytes, NULL), g2 = mk(g.bytes, NULL), be2 = mk(be.bytes, NULL);
        buf stA2 = mk_rand((size_t)(K - 1) * C, 1.0f), stB2 = mk_rand((size_t)(K - 1) * C, 1.0f);
        buf stA3 = mk(stA2.bytes, NULL), stB3 = mk(stB2.bytes, NULL);
        OK(gpu->ops->copy(gpu, stA3.g, stA2.g, stA2.bytes));
        OK(gpu->ops->copy(gpu, stB3.g, stB2.g, stB2.bytes));
        float *s2[2] = {stA2.g, stB2.g}, *s3[2] = {stA3.g, stB3.g};
        const qgdn_gates q = {a.g, b.g, Al.g, dt.g, g2.g, be2.g, n, d.n_v_heads, 0};
        OK(gpu->ops->conv1d_silu_gates(gpu, x.g, seqs, 2, s2, w.g, C, K, y2.g, &q));
        OK(gpu->ops->conv1d_silu(gpu, x.g, seqs, 2, s3, w.g, C, K, y3.g));
        const buf pairs[5][2] = {{y3, y2}, {g, g2}, {be, be2}, {stA3, stA2}, {stB3, stB2}};
        expect_flag("conv1d_silu_gates == conv1d_silu + gdn_gates (gpu)", same_bufs(pairs, 5));
        rm(y2); rm(y3); rm(g2); rm(be2); rm(stA2); rm(stB2); rm(stA3); rm(stB3);
    }
    size_t Sn = (size_t)d.n_v_heads * d.k_dim * d.v_dim;
    buf SA = mk_rand(Sn, 0.1f), SB = mk_rand(Sn, 0.1f), o = mk((size_t)n * d.n_v_heads * d.v_dim * 4, NULL);
    conv_gated_delta_case(d, x, w, a, b, Al, dt, seqs, 2);
    const qseq dec[2] = {{10, 1, 40, 0}, {50, 1, 7, 0}}; /* decode rows */
    conv_gated_delta_case(d, x, w, a, b, Al, dt, dec, 2);
    qgdn_dims db = d;
    db.state_bf16 = 1;
    conv_gated_delta_case(db, x, w, a, b, Al, dt, seqs, 2);
    conv_gated_delta_case(db, x, w, a, b, Al, dt, dec, 2);
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
    /* (the GPU runs this seq by its chunked rule: one tf32 product in bf16 prefill mode) */
    expect_close("gated_delta chunked (cpu) vs gpu", o, cuda_flash_precision() == FLASH_SPLIT ? 1e-4 : 5e-3);
    /* EXACT(batch): seq B alone on the GPU, from the same starting state */
    size_t ob = (size_t)3 * d.n_v_heads * d.v_dim * 4;
    float *S0 = xmalloc(Sn * 4), *r1 = xmalloc(ob), *r2 = xmalloc(ob);
    OK(gpu->ops->download(gpu, S0, SB.g, Sn * 4));
    OK(gpu->ops->gated_delta(gpu, y.g, g.g, be.g, seqs, 2, Sg, d, o.g));
    OK(gpu->ops->download(gpu, r1, (float *)o.g + (size_t)87 * d.n_v_heads * d.v_dim, ob));
    OK(gpu->ops->upload(gpu, SB.g, S0, Sn * 4));
    OK(gpu->ops->gated_delta(gpu, y.g, g.g, be.g, &seqs[1], 1, &Sg[1], d, o.g));
    OK(gpu->ops->download(gpu, r2, (float *)o.g + (size_t)87 * d.n_v_heads * d.v_dim, ob));
    expect_same("gated_delta seq alone vs with another", r1, r2, ob);
    free(S0); free(r1); free(r2);
    { /* dv 96: with bf16 states the plain rule's second block of column pairs is half past dv (its lanes read a valid
       * pair and write nothing); bitwise the fused rule's one column a lane */
        const qgdn_dims d96 = {2, 4, 64, 96, 1, 0, NULL};
        const int C96 = 2 * d96.n_k_heads * d96.k_dim + d96.n_v_heads * d96.v_dim, n96 = 8;
        buf x96 = mk_rand((size_t)n96 * C96, 1.0f), w96 = mk_rand((size_t)C96 * K, 0.5f);
        buf a96 = mk_rand((size_t)n96 * d96.n_v_heads, 3.0f), b96 = mk_rand((size_t)n96 * d96.n_v_heads, 3.0f);
        buf Al96 = mk_rand(d96.n_v_heads, 1.0f), dt96 = mk_rand(d96.n_v_heads, 1.0f);
        const qseq s96[2] = {{0, 5, 0, 0}, {5, 3, 9, 0}};
        conv_gated_delta_case(d96, x96, w96, a96, b96, Al96, dt96, s96, 2);
        rm(x96); rm(w96); rm(a96); rm(b96); rm(Al96); rm(dt96);
    }
    rm(x); rm(w); rm(y); rm(stA); rm(stB); rm(a); rm(b); rm(Al); rm(dt); rm(g); rm(be); rm(SA); rm(SB); rm(SC); rm(o);
}

/* Many decode seqs: their tables no longer fit the kernel parameters (cu_tab, 2 KB: 64 attention rows,
 * 128 GDN seqs), so they are staged and read through a device pointer. One row each at varied positions,
 * against the CPU, and one seq alone vs among all (bitwise). Attention at D 256 (16-byte rows), D 128 (bf16, 6 query
 * heads per kv head) and D 64; with bf16 and q8 caches the tensor-core split kernel (QUILL_CUDA_ATT_TC=0: the SIMT
 * one). */
static void attention_many_case(int nq, int nkv, int D, qwfmt fmt) {
    enum { NS = 100 };
    const size_t qw = (size_t)nq * D, kw = (size_t)nkv * D;
    buf q = mk_rand(NS * qw, 2.0f), k = mk_rand(NS * kw, 1.0f), v = mk_rand(NS * kw, 1.0f);
    buf out = mk(NS * qw * sizeof(float), NULL);
    buf kc[NS], vc[NS];
    void *kc_c[NS], *vc_c[NS], *kc_g[NS], *vc_g[NS];
    qseq seqs[NS];
    for (int s = 0; s < NS; s++) {
        const int pos = (s * 37) % 600; /* up to 3 splits of 256 keys */
        kc[s] = mk_cache(pos + 1, nkv, D, fmt);
        vc[s] = mk_cache(pos + 1, nkv, D, fmt);
        kc_c[s] = kc[s].c; vc_c[s] = vc[s].c; kc_g[s] = kc[s].g; vc_g[s] = vc[s].g;
        seqs[s] = (qseq){s, 1, pos, 0};
    }
    const float scale = 1.0f / sqrtf((float)D);
    OK(cpu->ops->attention(cpu, q.c, k.c, v.c, seqs, NS, kc_c, vc_c, fmt, nq, nkv, D, scale, out.c));
    OK(gpu->ops->attention(gpu, q.g, k.g, v.g, seqs, NS, kc_g, vc_g, fmt, nq, nkv, D, scale, out.g));
    char name[96];
    snprintf(name, sizeof name, "decode attn %d seqs (staged) D %d, %s", NS, D, kv_name(fmt));
    expect_close(name, out, 1e-5);
    /* seq 61 (2 splits) and seq 3 (position 111: alone, its one split writes the output and no combine runs) */
    float *together = xmalloc(qw * 4), *alone = xmalloc(qw * 4);
    for (int c = 0; c < 2; c++) {
        const int t = c ? 3 : 61;
        OK(gpu->ops->attention(gpu, q.g, k.g, v.g, seqs, NS, kc_g, vc_g, fmt, nq, nkv, D, scale, out.g));
        OK(gpu->ops->download(gpu, together, (float *)out.g + (size_t)t * qw, qw * 4));
        OK(gpu->ops->attention(gpu, q.g, k.g, v.g, &seqs[t], 1, &kc_g[t], &vc_g[t], fmt, nq, nkv, D, scale, out.g));
        OK(gpu->ops->download(gpu, alone, (float *)out.g + (size_t)t * qw, qw * 4));
        snprintf(name, sizeof name, "  decode attn seq alone vs %d D %d%s", NS, D, c ? " (one split)" : "");
        expect_same(name, together, alone, qw * 4);
    }
    free(together); free(alone);
    for (int s = 0; s < NS; s++) { rm(kc[s]); rm(vc[s]); }
    rm(q); rm(k); rm(v); rm(out);
}

static void test_many_seqs(void) {
    attention_many_case(16, 4, 256, QW_F32);
    attention_many_case(16, 4, 256, QW_BF16); /* 16-byte rows of 8 bf16 */
    attention_many_case(8, 2, 64, QW_F32);
    attention_many_case(8, 2, 64, QW_BF16);
    attention_many_case(12, 2, 128, QW_BF16); /* groups of 4 and 2 query heads per kv head */
    attention_many_case(16, 4, 256, QW_Q8);   /* q8: the tensor-core kernel's three head dims */
    attention_many_case(12, 2, 128, QW_Q8);
    attention_many_case(8, 2, 64, QW_Q8);
    enum { NS = 130 };
    const qgdn_dims d = {2, 4, 64, 64, 0, 0, NULL};
    const int C = 2 * d.n_k_heads * d.k_dim + d.n_v_heads * d.v_dim, K = 4, Hv = d.n_v_heads;
    const size_t Sn = (size_t)Hv * d.k_dim * d.v_dim, ow = (size_t)Hv * d.v_dim;
    buf x = mk_rand((size_t)NS * C, 1.0f), w = mk_rand((size_t)C * K, 0.5f), y = mk((size_t)NS * C * 4, NULL);
    buf g = mk_rand((size_t)NS * Hv, 0.5f), be = mk_rand((size_t)NS * Hv, 0.5f), o = mk(NS * ow * 4, NULL);
    buf st[NS], S[NS];
    float *st_c[NS], *st_g[NS], *S_c[NS], *S_g[NS];
    qseq seqs[NS];
    for (int s = 0; s < NS; s++) {
        st[s] = mk_rand((size_t)(K - 1) * C, 1.0f);
        S[s] = mk_rand(Sn, 0.1f);
        st_c[s] = st[s].c; st_g[s] = st[s].g; S_c[s] = S[s].c; S_g[s] = S[s].g;
        seqs[s] = (qseq){s, 1, 5 + s, 0};
    }
    /* g must be <= 0 (a decay): the gates' output range */
    float *gh = xmalloc((size_t)NS * Hv * 4);
    OK(cpu->ops->download(cpu, gh, g.c, (size_t)NS * Hv * 4));
    for (size_t i = 0; i < (size_t)NS * Hv; i++) gh[i] = -fabsf(gh[i]);
    OK(cpu->ops->upload(cpu, g.c, gh, (size_t)NS * Hv * 4));
    OK(gpu->ops->upload(gpu, g.g, gh, (size_t)NS * Hv * 4));
    free(gh);
    float *S0 = xmalloc(Sn * 4);
    const int t = 97;
    OK(gpu->ops->download(gpu, S0, S[t].g, Sn * 4));
    OK(cpu->ops->conv1d_silu(cpu, x.c, seqs, NS, st_c, w.c, C, K, y.c));
    OK(gpu->ops->conv1d_silu(gpu, x.g, seqs, NS, st_g, w.g, C, K, y.g));
    expect_close("conv1d_silu 130 seqs (staged)", y, 1e-5);
    expect_close("  conv1d state of seq 129", st[NS - 1], 1e-7);
    OK(cpu->ops->gated_delta(cpu, y.c, g.c, be.c, seqs, NS, S_c, d, o.c));
    OK(gpu->ops->gated_delta(gpu, y.g, g.g, be.g, seqs, NS, S_g, d, o.g));
    expect_close("gated_delta 130 seqs (staged)", o, 1e-4);
    expect_close("  gated_delta state of seq 129", S[NS - 1], 1e-4);
    float *together = xmalloc(ow * 4), *alone = xmalloc(ow * 4);
    OK(gpu->ops->download(gpu, together, (float *)o.g + (size_t)t * ow, ow * 4));
    OK(gpu->ops->upload(gpu, S[t].g, S0, Sn * 4));
    OK(gpu->ops->gated_delta(gpu, y.g, g.g, be.g, &seqs[t], 1, &S_g[t], d, o.g));
    OK(gpu->ops->download(gpu, alone, (float *)o.g + (size_t)t * ow, ow * 4));
    expect_same("  gated_delta seq alone vs 130", together, alone, ow * 4);
    free(together); free(alone); free(S0);
    for (int s = 0; s < NS; s++) { rm(st[s]); rm(S[s]); }
    rm(x); rm(w); rm(y); rm(g); rm(be); rm(o);
}

/* The inputs of a gated delta rule call over ns seqs of lens[s] rows at pos0s[s] (chunked chk[s]), laid out one after
 * the other: qkv as after conv + SiLU, g in [-gmax, 0), beta in (0.01, 0.99); returns the rows. */
static int gdn_inputs(qgdn_dims d, int ns, const int *lens, const int *pos0s, const int *chk, float gmax, qseq *seqs,
                      buf *x, buf *g, buf *be) {
    const int W = 2 * d.n_k_heads * d.k_dim + d.n_v_heads * d.v_dim, Hv = d.n_v_heads;
    int n = 0;
    for (int s = 0; s < ns; s++) { seqs[s] = (qseq){n, lens[s], pos0s[s], chk[s]}; n += lens[s]; }
    float *hx = xmalloc((size_t)n * W * 4), *hg = xmalloc((size_t)n * Hv * 4), *hb = xmalloc((size_t)n * Hv * 4);
    for (size_t i = 0; i < (size_t)n * W; i++) { float u = 3.0f * frand(); hx[i] = u / (1.0f + expf(-u)); }
    for (int i = 0; i < n * Hv; i++) { hg[i] = -0.5f * gmax * (frand() + 1.0f); hb[i] = 0.5f + 0.49f * frand(); }
    *x = mk((size_t)n * W * 4, hx), *g = mk((size_t)n * Hv * 4, hg), *be = mk((size_t)n * Hv * 4, hb);
    free(hx); free(hg); free(hb);
    return n;
}

/* The chunked gated delta rule (prompt seqs, chunked = 1) on the GPU (cuda_gdn_chunked.cu) vs the CPU's
 * chunked rule: lengths 1, 63, 64, 65, 200 at pos0 0 and non-multiples of 64, nonzero states, one
 * recurrent seq in the same call; then EXACT(batch) (a seq alone) and EXACT(chunk) (two seqs cut at
 * their multiples of 64, the pieces sharing calls), bitwise on the GPU. */
static void gdn_chunked_case(qgdn_dims d, float gmax) {
    enum { NS = 6 };
    const int lens[NS] = {200, 65, 64, 63, 1, 3}, pos0s[NS] = {0, 100, 37, 64, 5, 50}, chk[NS] = {1, 1, 1, 1, 1, 0};
    const int Hv = d.n_v_heads, no = Hv * d.v_dim;
    const size_t Sn = (size_t)Hv * d.k_dim * d.v_dim;
    qseq seqs[NS];
    buf x, g, be;
    const int n = gdn_inputs(d, NS, lens, pos0s, chk, gmax, seqs, &x, &g, &be);
    buf o = mk((size_t)n * no * 4, NULL), St[NS];
    float *S0[NS], *Sc[NS], *Sg[NS], *Sgpu[NS];
    for (int s = 0; s < NS; s++) {
        S0[s] = xmalloc(Sn * 4);
        for (size_t i = 0; i < Sn; i++) S0[s][i] = 0.5f * frand();
        St[s] = mk(Sn * 4, S0[s]);
        Sc[s] = St[s].c; Sg[s] = St[s].g;
        Sgpu[s] = xmalloc(Sn * 4);
    }
    OK(cpu->ops->gated_delta(cpu, x.c, g.c, be.c, seqs, NS, Sc, d, o.c));
    OK(gpu->ops->gated_delta(gpu, x.g, g.g, be.g, seqs, NS, Sg, d, o.g));
    float *oc = xmalloc((size_t)n * no * 4), *og = xmalloc((size_t)n * no * 4), *o2 = xmalloc((size_t)n * no * 4);
    float *sc = xmalloc(Sn * 4), *s2 = xmalloc(Sn * 4);
    OK(cpu->ops->download(cpu, oc, o.c, (size_t)n * no * 4));
    OK(gpu->ops->download(gpu, og, o.g, (size_t)n * no * 4));
    double eo = rel_err(oc, og, (size_t)(n - lens[5]) * no); /* the chunked seqs: every row before the last seq */
    double es = 0;
    for (int s = 0; s < NS; s++) {
        OK(cpu->ops->download(cpu, sc, Sc[s], Sn * 4));
        OK(gpu->ops->download(gpu, Sgpu[s], Sg[s], Sn * 4));
        if (chk[s]) { double e = rel_err(sc, Sgpu[s], Sn); if (e > es) es = e; }
    }
    char nm[96];
    snprintf(nm, sizeof nm, "gdn chunked %d/%d dk%d dv%d g>-%g out", d.n_k_heads, Hv, d.k_dim, d.v_dim, (double)gmax);
    /* bf16 prefill mode: one tf32 product (operands rounded to 11 bits) where the split sums three */
    const double tol = cuda_flash_precision() == FLASH_SPLIT ? 1e-5 : 5e-3;
    expect_err(nm, eo, tol);
    snprintf(nm, sizeof nm, "gdn chunked %d/%d dk%d dv%d g>-%g state", d.n_k_heads, Hv, d.k_dim, d.v_dim, (double)gmax);
    expect_err(nm, es, tol);
    double er = rel_err(oc + (size_t)(n - lens[5]) * no, og + (size_t)(n - lens[5]) * no, (size_t)lens[5] * no);
    expect_err("gdn recurrent seq in a chunked call", er, 1e-4);
    /* EXACT(batch): seq 1 alone, from its first state */
    OK(gpu->ops->upload(gpu, Sg[1], S0[1], Sn * 4));
    OK(gpu->ops->gated_delta(gpu, x.g, g.g, be.g, &seqs[1], 1, &Sg[1], d, o.g));
    OK(gpu->ops->download(gpu, o2, o.g, (size_t)n * no * 4));
    OK(gpu->ops->download(gpu, s2, Sg[1], Sn * 4));
    int same = memcmp(o2 + (size_t)seqs[1].row0 * no, og + (size_t)seqs[1].row0 * no, (size_t)lens[1] * no * 4) == 0 &&
               memcmp(s2, Sgpu[1], Sn * 4) == 0;
    snprintf(nm, sizeof nm, "gdn chunked dk%d: seq alone vs among 6", d.k_dim);
    expect_same(nm, &same, &(int){1}, sizeof same);
    /* EXACT(chunk): seqs 0 and 1 cut at multiples of 64 of their positions, piece k of both in call k */
    OK(gpu->ops->upload(gpu, Sg[0], S0[0], Sn * 4));
    OK(gpu->ops->upload(gpu, Sg[1], S0[1], Sn * 4));
    int done[2] = {0, 0};
    while (done[0] < lens[0] || done[1] < lens[1]) {
        qseq pc[2];
        float *ps[2];
        int np = 0;
        for (int s = 0; s < 2; s++) {
            if (done[s] >= lens[s]) continue;
            int p = pos0s[s] + done[s], len = 64 - p % 64;
            if (len > lens[s] - done[s]) len = lens[s] - done[s];
            pc[np] = (qseq){seqs[s].row0 + done[s], len, p, 1};
            ps[np++] = Sg[s];
            done[s] += len;
        }
        OK(gpu->ops->gated_delta(gpu, x.g, g.g, be.g, pc, np, ps, d, o.g));
    }
    OK(gpu->ops->download(gpu, o2, o.g, (size_t)n * no * 4));
    same = memcmp(o2, og, (size_t)(lens[0] + lens[1]) * no * 4) == 0;
    for (int s = 0; s < 2; s++) {
        OK(gpu->ops->download(gpu, s2, Sg[s], Sn * 4));
        same = same && memcmp(s2, Sgpu[s], Sn * 4) == 0;
    }
    snprintf(nm, sizeof nm, "gdn chunked dk%d: cut at 64s vs whole", d.k_dim);
    expect_same(nm, &same, &(int){1}, sizeof same);
    for (int s = 0; s < NS; s++) { rm(St[s]); free(S0[s]); free(Sgpu[s]); }
    free(oc); free(og); free(o2); free(sc); free(s2);
    rm(x); rm(g); rm(be); rm(o);
}

/* bf16 GDN states (dims.state_bf16): the GPU's chunked and recurrent rules against the CPU's, which round at the
 * same points (a value near a rounding boundary may round the other way, so within bf16's step); then on the GPU
 * EXACT(chunk) and EXACT(draft) together: every seq cut into pieces (prompt seqs at their multiples of 64,
 * recurrent seqs a row each), the pieces sharing calls, gives the whole call's bits. */
static void test_gdn_bf16_state(void) {
    enum { NS = 4 };
    const qgdn_dims d = {4, 8, 128, 128, 1, 0, NULL};
    const int lens[NS] = {200, 65, 6, 1}, pos0s[NS] = {0, 100, 40, 7}, chk[NS] = {1, 1, 0, 0};
    const int Hv = d.n_v_heads, no = Hv * d.v_dim;
    const size_t Sn = (size_t)Hv * d.k_dim * d.v_dim;
    qseq seqs[NS];
    buf x, g, be;
    const int n = gdn_inputs(d, NS, lens, pos0s, chk, 1.0f, seqs, &x, &g, &be);
    buf o = mk((size_t)n * no * 4, NULL), St[NS];
    uint16_t *S0[NS];
    float *Sc[NS], *Sg[NS];
    for (int s = 0; s < NS; s++) {
        St[s] = mk_state_bf16(Sn, 0.5f);
        S0[s] = xmalloc(Sn * 2);
        OK(gpu->ops->download(gpu, S0[s], St[s].g, Sn * 2));
        Sc[s] = St[s].c; Sg[s] = St[s].g;
    }
    OK(cpu->ops->gated_delta(cpu, x.c, g.c, be.c, seqs, NS, Sc, d, o.c));
    OK(gpu->ops->gated_delta(gpu, x.g, g.g, be.g, seqs, NS, Sg, d, o.g));
    /* split prefill mode's three tf32 products are f32-class; bf16 mode's one is ~5e-4 */
    const double tol = cuda_flash_precision() == FLASH_SPLIT ? 2e-3 : 1e-2;
    expect_close("gated_delta, bf16 states: 4 seqs, 2 chunked, out", o, tol);
    float *sc = xmalloc(Sn * 4), *sg = xmalloc(Sn * 4);
    double es = 0;
    for (int s = 0; s < NS; s++) {
        state_floats(cpu, Sc[s], Sn, 1, sc);
        state_floats(gpu, Sg[s], Sn, 1, sg);
        const double e = rel_err(sc, sg, Sn);
        if (e > es) es = e;
    }
    expect_err("gated_delta, bf16 states: the states", es, 2 * tol);
    /* the whole call's bits, then the pieces from the same states */
    float *whole = xmalloc((size_t)n * no * 4), *cut = xmalloc((size_t)n * no * 4);
    uint16_t *Sw[NS];
    OK(gpu->ops->download(gpu, whole, o.g, (size_t)n * no * 4));
    for (int s = 0; s < NS; s++) {
        Sw[s] = xmalloc(Sn * 2);
        OK(gpu->ops->download(gpu, Sw[s], Sg[s], Sn * 2));
        OK(gpu->ops->upload(gpu, Sg[s], S0[s], Sn * 2));
    }
    int done[NS] = {0};
    for (;;) {
        qseq pc[NS];
        float *ps[NS];
        int np = 0;
        for (int s = 0; s < NS; s++) {
            if (done[s] >= lens[s]) continue;
            const int p = pos0s[s] + done[s];
            int len = chk[s] ? 64 - p % 64 : 1;
            if (len > lens[s] - done[s]) len = lens[s] - done[s];
            pc[np] = (qseq){seqs[s].row0 + done[s], len, p, chk[s]};
            ps[np++] = Sg[s];
            done[s] += len;
        }
        if (!np) break;
        OK(gpu->ops->gated_delta(gpu, x.g, g.g, be.g, pc, np, ps, d, o.g));
    }
    OK(gpu->ops->download(gpu, cut, o.g, (size_t)n * no * 4));
    int same = memcmp(whole, cut, (size_t)n * no * 4) == 0;
    uint16_t *s2 = xmalloc(Sn * 2);
    for (int s = 0; s < NS; s++) {
        OK(gpu->ops->download(gpu, s2, Sg[s], Sn * 2));
        same = same && memcmp(s2, Sw[s], Sn * 2) == 0;
    }
    expect_flag("gated_delta, bf16 states: pieces (64s, a row each) vs whole (gpu, bitwise)", same);
    for (int s = 0; s < NS; s++) { rm(St[s]); free(S0[s]); free(Sw[s]); }
    free(sc); free(sg); free(whole); free(cut); free(s2);
    rm(x); rm(g); rm(be); rm(o);
}

static void test_gdn_chunked(void) {
    gdn_chunked_case((qgdn_dims){4, 8, 128, 128, 0, 0, NULL}, 1.0f);
    gdn_chunked_case((qgdn_dims){4, 8, 128, 128, 0, 0, NULL}, 8.0f);
    gdn_chunked_case((qgdn_dims){2, 4, 32, 32, 0, 0, NULL}, 0.05f);
    gdn_chunked_case((qgdn_dims){2, 4, 64, 96, 0, 0, NULL}, 1.0f);
}

int main(void) {
    static void (*const tests[])(void) = {test_attention, test_flash_prefill, test_gdn, test_gdn_chunked,
                                          test_gdn_bf16_state, test_many_seqs};
    return run_cuda_tests(tests, (int)(sizeof tests / sizeof tests[0]));
}
