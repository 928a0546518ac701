/* qwen35.c: the Qwen3.5 text model's forward pass, written once over the backend's ops.
 * Section numbers (§) refer to ../shared/reference/qwen35-architecture.md.
 *
 * One forward for everything: a batch is rows (stream, pos, token, flags); consecutive rows of one
 * stream form a seq (qseq). Dense ops (matmul, norms, MLP) run over all rows at once; per-stream ops
 * (attention, conv1d, gated delta rule) take the seq list with each seq's state pointers.
 * EXACT(batch): every op computes a row the same way whatever else is in the batch, so a stream's
 * logits do not depend on its neighbours (tests/golden/test_model_batch.c).
 * EXACT(chunk): a seq runs the GDN chunked rule only when all its rows are prompt rows (QROW_PREFILL);
 * the backend aligns its 64-row chunks to absolute positions.
 * Not here: which rows run together (engine), sampling (engine/sample.c), loading (weights.c), a stream's
 * state and the byte counts (qwen35_state.c). */
#include "qwen35.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Activation buffers for up to cap_rows rows, in backend memory; host arrays for the seq list. */
typedef struct qwen35_scratch {
    int cap_rows;
    int32_t *ids, *pos;          /* [cap] backend */
    float *x, *h, *out;          /* [cap][hidden] residual, normed input, block output */
    float *qg, *q, *k, *v, *o;   /* attention: [cap][nq*2D], [cap][nq*D], [cap][nkv*D] x2, [cap][nq*D] */
    float *qkv, *qkv_c, *z;      /* GDN: [cap][conv_dim] x2, [cap][Hv*dv] */
    float *a, *b, *g, *beta;     /* GDN gates: [cap][Hv] */
    float *go;                   /* GDN output (the gated norm applies where out_proj reads it): [cap][Hv*dv] */
    float *gate, *up;            /* MLP: [cap][intermediate] */
    float *hl, *logits;          /* [cap][hidden], [cap][vocab]: rows that return logits */
    float *ss;                   /* [cap][norm_parts]: sums of squares of x at a fused residual boundary */
    /* host */
    qseq *seqs;                  /* [cap] */
    int *range_start, *range_prefill; /* [cap] runs of rows of one kind (prompt or decode) */
    int *range_fused;            /* [cap] the last residual boundary of the range ran fused (res_range) */
    int n_ranges;
    int *seq_stream;             /* [cap] stream index of each seq */
    float **p0, **p1;            /* [cap] per-seq state pointers handed to the ops */
    void **kp, **vp;             /* [cap] per-seq K/V caches handed to attention */
    int32_t *host_ids, *host_pos;
    qdraw *draws;                /* [cap] the id rows' draws, in row order (greedy rows: temperature 0) */
    int n_draw;                  /* rows asking QROW_DRAW in this batch */
    int head_sketched;           /* the last pass took its greedy id from the head's sketch (an id of -1: undecided) */
} qwen35_scratch;

/* Parts of a row's sums of squares at a fused residual boundary (backend.h's qnorm). */
static int64_t norm_parts(const qwen35_config *c) { return (c->hidden + QNORM_PART - 1) / QNORM_PART; }

/* Floats per row of the scratch plan in scratch_create (keep the two in step), times the rows the
 * forward would allocate for n_rows. */
int64_t qwen35_scratch_bytes(const qwen35_config *c, int n_rows) {
    const int64_t H = c->hidden, nqD = (int64_t)c->n_heads * c->head_dim;
    const int64_t kvD = (int64_t)c->n_kv_heads * c->head_dim, Hv = c->lin_n_v_heads;
    const int64_t vD = Hv * c->lin_v_dim;
    int64_t per_row = 2 + 4 * H + 4 * nqD + 2 * kvD + 2 * (int64_t)qwen35_conv_dim(c) + 2 * vD + 4 * Hv +
                      2 * (int64_t)c->intermediate + c->vocab_size + norm_parts(c);
    int64_t cap = 16;
    while (cap < n_rows) cap *= 2;
    return per_row * cap * 4;
}

/* ---- scratch ---------------------------------------------------------------------------------- */

static void scratch_free(qbackend *be, qwen35_scratch *s) {
    if (!s) return;
    void *dev[] = {s->ids, s->pos, s->x, s->h, s->out, s->qg, s->q, s->k, s->v, s->o, s->qkv,
                   s->qkv_c, s->z, s->a, s->b, s->g, s->beta, s->go, s->gate, s->up,
                   s->hl, s->logits, s->ss};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) be->ops->free(be, dev[i]);
    free(s->seqs);
    free(s->range_start);
    free(s->range_prefill);
    free(s->range_fused);
    free(s->seq_stream);
    free(s->p0);
    free(s->p1);
    free(s->kp);
    free(s->vp);
    free(s->host_ids);
    free(s->host_pos);
    free(s->draws);
    free(s);
}

/* Allocates scratch for cap rows. Returns NULL-safe owned struct in *out. */
static qstatus scratch_create(qbackend *be, const qwen35_config *c, int cap, qwen35_scratch **out) {
    qwen35_scratch *s = calloc(1, sizeof *s);
    if (!s) return q_fail(Q_ENOMEM, "scratch: out of memory");
    s->cap_rows = cap;
    const int64_t H = c->hidden, nqD = (int64_t)c->n_heads * c->head_dim;
    const int64_t kvD = (int64_t)c->n_kv_heads * c->head_dim, Hv = c->lin_n_v_heads;
    const int64_t vD = Hv * c->lin_v_dim;
    struct { void **p; int64_t elems; size_t size; } plan[] = {
        {(void **)&s->ids, 1, 4}, {(void **)&s->pos, 1, 4},
        {(void **)&s->x, H, 4}, {(void **)&s->h, H, 4}, {(void **)&s->out, H, 4},
        {(void **)&s->qg, 2 * nqD, 4}, {(void **)&s->q, nqD, 4}, {(void **)&s->k, kvD, 4},
        {(void **)&s->v, kvD, 4}, {(void **)&s->o, nqD, 4},
        {(void **)&s->qkv, qwen35_conv_dim(c), 4}, {(void **)&s->qkv_c, qwen35_conv_dim(c), 4},
        {(void **)&s->z, vD, 4}, {(void **)&s->a, Hv, 4}, {(void **)&s->b, Hv, 4},
        {(void **)&s->g, Hv, 4}, {(void **)&s->beta, Hv, 4}, {(void **)&s->go, vD, 4},
        {(void **)&s->gate, c->intermediate, 4},
        {(void **)&s->up, c->intermediate, 4}, {(void **)&s->hl, H, 4},
        {(void **)&s->logits, c->vocab_size, 4}, {(void **)&s->ss, norm_parts(c), 4},
    };
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        qstatus st = be->ops->alloc(be, (size_t)(plan[i].elems * cap) * plan[i].size, plan[i].p);
        if (st != Q_OK) { scratch_free(be, s); return q_wrap(st, "scratch for %d rows", cap); }
    }
    s->seqs = calloc((size_t)cap, sizeof *s->seqs);
    s->range_start = calloc((size_t)cap + 1, sizeof *s->range_start);
    s->range_prefill = calloc((size_t)cap, sizeof *s->range_prefill);
    s->range_fused = calloc((size_t)cap, sizeof *s->range_fused);
    s->seq_stream = calloc((size_t)cap, sizeof *s->seq_stream);
    s->p0 = calloc((size_t)cap, sizeof *s->p0);
    s->p1 = calloc((size_t)cap, sizeof *s->p1);
    s->kp = calloc((size_t)cap, sizeof *s->kp);
    s->vp = calloc((size_t)cap, sizeof *s->vp);
    s->host_ids = calloc((size_t)cap, sizeof *s->host_ids);
    s->host_pos = calloc((size_t)cap, sizeof *s->host_pos);
    s->draws = calloc((size_t)cap, sizeof *s->draws);
    if (!s->seqs || !s->range_start || !s->range_prefill || !s->range_fused || !s->seq_stream || !s->p0 || !s->p1 ||
        !s->kp || !s->vp || !s->host_ids || !s->host_pos || !s->draws) {
        scratch_free(be, s);
        return q_fail(Q_ENOMEM, "scratch: out of memory");
    }
    *out = s;
    return Q_OK;
}

/* Makes sure the scratch holds n rows; grows (reallocates) to the next power of two at least 16. */
static qstatus scratch_reserve(qwen35_model *m, int n) {
    if (m->scratch && m->scratch->cap_rows >= n) return Q_OK;
    int cap = 16;
    while (cap < n) cap *= 2;
    qwen35_scratch *s = NULL;
    scratch_free(m->be, m->scratch);
    m->scratch = NULL;
    Q_TRY(scratch_create(m->be, &m->cfg, cap, &s));
    m->scratch = s;
    return Q_OK;
}

/* ---- open / close ------------------------------------------------------------------------------ */

/* The head's sketch, where the backend makes one: a bf16 head of at least 2^26 values (the 0.8B's and up; the
 * fixtures' are too small to gain) whose rows are whole 512-value passes, at most 8192. A greedy row then reads about
 * half the head's bytes for the same id. QUILL_HEAD_SKETCH=0: none. */
static int head_sketch_wanted(int64_t V, int64_t K) {
    const char *env = getenv("QUILL_HEAD_SKETCH");
    return !(env && !strcmp(env, "0")) && V * K >= (1LL << 26) && K % 512 == 0 && K <= 8192;
}
int64_t qwen35_head_sketch_bytes(int64_t V, int64_t K) {
    if (!head_sketch_wanted(V, K)) return 0;
    return V * K + V * (K / 64) * 4 + V * 12 + 512 * K * 2 + (1 << 20); /* cuda_head.cu's, rounded up */
}
int64_t qwen35_head_sketch_read_bytes(int64_t V, int64_t K) {
    return V * K + V * (K / 64) * 4 + V * 8; /* codes, a scale a group, two bounds a row (and a few candidates' rows) */
}
static qstatus head_sketch_open(qwen35_model *m) {
    qbackend *be = m->be;
    const qweight *W = &m->w.lm_head;
    if (!be->ops->head_sketch_make || W->fmt != QW_BF16 || !head_sketch_wanted(W->n_out, W->n_in)) return Q_OK;
    int64_t bytes = 0;
    Q_TRY(be->ops->head_sketch_make(be, W, &m->w.head_sketch, &bytes));
    m->w.n_bytes += bytes;
    return Q_OK;
}

qstatus qwen35_open(const char *dir, qbackend *be, qwen35_model **out) {
    qwen35_model *m = calloc(1, sizeof *m);
    if (!m) return q_fail(Q_ENOMEM, "model: out of memory");
    m->be = be;
    qstatus st = qwen35_config_load(dir, &m->cfg);
    int loaded = 0;
    if (st == Q_OK) st = qwen35_weights_load(be, dir, &m->cfg, &m->w), loaded = st == Q_OK;
    if (st == Q_OK) st = head_sketch_open(m);
    if (st != Q_OK) {
        if (loaded) qwen35_weights_free(be, &m->cfg, &m->w);
        qwen35_config_free(&m->cfg);
        free(m);
        return st;
    }
    *out = m;
    return Q_OK;
}

void qwen35_close(qwen35_model *m) {
    if (!m) return;
    scratch_free(m->be, m->scratch);
    qwen35_weights_free(m->be, &m->cfg, &m->w);
    qwen35_config_free(&m->cfg);
    free(m);
}

/* ---- forward ----------------------------------------------------------------------------------- */

/* Cuts the rows into seqs and checks them: rows of a stream consecutive and at consecutive positions
 * continuing the stream; each stream in one seq; tokens in the vocabulary; positions inside the
 * stream's context. Returns the number of seqs and of rows that want logits. */
static qstatus plan_seqs(qwen35_model *m, const qrow *rows, int n, qwen35_state *const *states,
                         int *n_seqs_out, int *n_logits_out, int *n_argmax_out) {
    qwen35_scratch *s = m->scratch;
    int n_seqs = 0, n_logits = 0, n_argmax = 0;
    s->n_ranges = 0;
    s->n_draw = 0;
    for (int i = 0; i < n; i++) {
        const qrow *r = &rows[i];
        qwen35_state *st = r->stream >= 0 ? states[r->stream] : NULL;
        if (!st) return q_fail(Q_EINVAL, "row %d: stream %d has no state", i, r->stream);
        if (r->token < 0 || r->token >= m->cfg.vocab_size)
            return q_fail(Q_EINVAL, "row %d: token id %d outside the vocabulary (0..%d)", i, r->token,
                          m->cfg.vocab_size - 1);
        if (r->pos < 0 || r->pos >= st->n_ctx)
            return q_fail(Q_EINVAL, "row %d: position %d outside the stream's context %d", i, r->pos,
                          st->n_ctx);
        if (r->pos >= st->n_kv_rows) /* the engine grows K/V before a round needs it */
            return q_fail(Q_EINVAL, "row %d: position %d past the stream's %d mapped K/V rows", i,
                          r->pos, st->n_kv_rows);
        int chunked = (r->flags & QROW_PREFILL) != 0;
        if (i > 0 && rows[i - 1].stream == r->stream) {
            qseq *q = &s->seqs[n_seqs - 1];
            if (r->pos != q->pos0 + q->n_rows)
                return q_fail(Q_EINVAL, "row %d: position %d does not follow %d", i, r->pos,
                              q->pos0 + q->n_rows - 1);
            q->n_rows++;
            q->chunked &= chunked;
        } else {
            for (int j = 0; j < n_seqs; j++)
                if (s->seq_stream[j] == r->stream)
                    return q_fail(Q_EINVAL, "row %d: stream %d's rows are not consecutive", i, r->stream);
            if (r->pos != st->n_past)
                return q_fail(Q_EINVAL, "row %d: stream %d is at position %d, row says %d", i,
                              r->stream, st->n_past, r->pos);
            s->seqs[n_seqs] = (qseq){.row0 = i, .n_rows = 1, .pos0 = r->pos, .chunked = chunked};
            s->seq_stream[n_seqs++] = r->stream;
        }
        int prefill = (r->flags & QROW_PREFILL) != 0;
        if (i == 0 || prefill != s->range_prefill[s->n_ranges - 1]) {
            s->range_start[s->n_ranges] = i;
            s->range_prefill[s->n_ranges++] = prefill;
        }
        s->host_ids[i] = r->token;
        s->host_pos[i] = r->pos;
        const uint32_t out = r->flags & (QROW_LOGITS | QROW_ARGMAX | QROW_DRAW);
        if (out & (out - 1))
            return q_fail(Q_EINVAL, "row %d: asks for more than one of logits, a greedy id, a drawn id", i);
        if ((out & QROW_DRAW) && !(r->draw.temperature > 0.0 && isfinite(r->draw.temperature)))
            return q_fail(Q_EINVAL, "row %d: a draw at temperature %g", i, r->draw.temperature);
        if ((out & QROW_DRAW) && !m->be->ops->draw) return q_fail(Q_EINVAL, "row %d: the backend has no draw op", i);
        n_logits += out == QROW_LOGITS;
        if (out & (QROW_ARGMAX | QROW_DRAW)) {
            s->n_draw += out == QROW_DRAW;
            const qdraw greedy = {.min_rel = -INFINITY, .top_p = 1.0}; /* temperature 0: argmax's rule */
            s->draws[n_argmax++] = out == QROW_DRAW ? r->draw : greedy;
        }
    }
    s->range_start[s->n_ranges] = n;
    *n_seqs_out = n_seqs;
    *n_logits_out = n_logits;
    *n_argmax_out = n_argmax;
    return Q_OK;
}

/* y[i] = x . W[i]^T for weights that share the rows x, over range r of the batch (x, y[i] at its first row):
 * decode ranges in one pass where the backend has matmul_multi, prompt ranges where it has
 * matmul_prefill_multi (bitwise the same as one call each). */
static qstatus mm_range(qwen35_model *m, int r, const float *x, int count, const qweight *const *W, float *const *y) {
    const qwen35_scratch *s = m->scratch;
    qbackend *be = m->be;
    const int len = s->range_start[r + 1] - s->range_start[r], prefill = s->range_prefill[r];
    if (!prefill && be->ops->matmul_multi) return be->ops->matmul_multi(be, x, len, count, W, y);
    if (prefill && be->ops->matmul_prefill_multi) return be->ops->matmul_prefill_multi(be, x, len, count, W, y);
    for (int i = 0; i < count; i++)
        Q_TRY(prefill ? be->ops->matmul_prefill(be, x, len, W[i], y[i]) : be->ops->matmul(be, x, len, W[i], y[i]));
    return Q_OK;
}

/* y = (x gated by glu) . W^T over range r of the batch (x, glu's gates and y at its first row): a decode range
 * in one pass where the backend has glu_matmul, else the gate (swiglu, mul_sigmoid or, with a norm,
 * gated_rmsnorm, in place on x), then mm_range; bitwise the same. */
static qstatus glu_mm_range(qwen35_model *m, int r, float *x, const qglu *glu, const qweight *W, float *y) {
    const qwen35_scratch *s = m->scratch;
    qbackend *be = m->be;
    const int len = s->range_start[r + 1] - s->range_start[r];
    if (!s->range_prefill[r] && be->ops->glu_matmul) return be->ops->glu_matmul(be, x, glu, len, W, y);
    const int64_t n_vec = (int64_t)len * (W->n_in / glu->dim);
    if (glu->norm_w) /* g_stride == dim */
        Q_TRY(be->ops->gated_rmsnorm(be, x, glu->g, glu->norm_w, n_vec, glu->dim, glu->norm_eps, x));
    else if (glu->act == QGLU_SILU) Q_TRY(be->ops->swiglu(be, glu->g, x, n_vec * glu->dim, x)); /* g_stride == dim */
    else Q_TRY(be->ops->mul_sigmoid(be, x, glu->g, glu->g_stride, n_vec, glu->dim));
    return mm_range(m, r, x, 1, &W, &y);
}

/* ---- residual boundaries --------------------------------------------------------------------------
 * A block's output and the MLP's are added to the residual x and the sum normed for the next projections.
 * Per range: where the backend fuses the boundary (backend.h's qnorm: decode rows, weights it can fuse), the
 * producer adds into x and leaves the sums of squares in s->ss, and the consumers normalise x as they read
 * it (s->h is not written); else the product goes to s->out and add_rmsnorm writes s->h. */

/* Whether range r's boundary from producer P to consumers C runs fused. */
static int res_fused(const qwen35_model *m, int r, const qweight *P, int count, const qweight *const *C) {
    const qbackend_ops *o = m->be->ops;
    if (m->scratch->range_prefill[r] || !o->resid_matmul || !o->norm_matmul_multi || !o->norm_fusable ||
        !o->norm_fusable(P))
        return 0;
    for (int i = 0; i < count; i++)
        if (!o->norm_fusable(C[i])) return 0;
    return 1;
}

/* Range r's boundary unfused, after its product in s->out: x += out, then s->h = rmsnorm(x) * norm_w (norm_w
 * NULL, after the last layer: the add alone). */
static qstatus res_close(qwen35_model *m, int r, const float *norm_w) {
    qwen35_scratch *s = m->scratch;
    qbackend *be = m->be;
    const int64_t H = m->cfg.hidden, r0 = s->range_start[r], len = s->range_start[r + 1] - r0;
    s->range_fused[r] = 0;
    if (!norm_w) return be->ops->add(be, s->x + r0 * H, s->out + r0 * H, len * H);
    return be->ops->add_rmsnorm(be, s->x + r0 * H, s->out + r0 * H, norm_w, len, (int)H, m->cfg.rms_eps,
                                s->h + r0 * H);
}

/* Range r's boundary after the product xin (gated by glu when not NULL) . W^T (xin, glu at the range's first
 * row): fused where res_fused says, else into s->out and res_close. norm_w and C (count weights): the next
 * projections' norm and weights (NULL, 0 after the last layer). */
static qstatus res_range(qwen35_model *m, int r, float *xin, const qglu *glu, const qweight *W, const float *norm_w,
                         int count, const qweight *const *C) {
    qwen35_scratch *s = m->scratch;
    const int64_t r0 = s->range_start[r];
    if (res_fused(m, r, W, count, C)) {
        s->range_fused[r] = 1;
        return m->be->ops->resid_matmul(m->be, xin, glu, s->range_start[r + 1] - (int)r0, W, s->x + r0 * m->cfg.hidden,
                                        s->ss + r0 * norm_parts(&m->cfg), norm_w);
    }
    float *out = s->out + r0 * W->n_out;
    Q_TRY(glu ? glu_mm_range(m, r, xin, glu, W, out) : mm_range(m, r, xin, 1, &W, &out));
    return res_close(m, r, norm_w);
}

/* y[i] = (the normed residual) . W[i]^T over the batch: from s->h, or in a range whose boundary ran fused, x
 * normalised by norm_w as it is read. glu_pair: y[0], y[1] are a silu GLU's gate and up (qnorm). */
static qstatus norm_mm(qwen35_model *m, const float *norm_w, int count, const qweight *const *W, float *const *y,
                       int glu_pair) {
    qwen35_scratch *s = m->scratch;
    const int64_t H = m->cfg.hidden;
    for (int r = 0; r < s->n_ranges; r++) {
        const int r0 = s->range_start[r];
        float *yr[4];
        for (int i = 0; i < count; i++) yr[i] = y[i] + (int64_t)r0 * W[i]->n_out;
        if (!s->range_fused[r]) {
            Q_TRY(mm_range(m, r, s->h + r0 * H, count, W, yr));
            continue;
        }
        /* from_resid: x's rows are res_range's, which was told norm_w, and only it wrote them since */
        const qnorm nm = {s->ss + r0 * norm_parts(&m->cfg), norm_w, m->cfg.rms_eps, 1, glu_pair};
        Q_TRY(m->be->ops->norm_matmul_multi(m->be, s->x + r0 * H, &nm, s->range_start[r + 1] - r0, count, W, yr));
    }
    return Q_OK;
}

/* The attention's head norms and RoPE (§2.3) on n rows: q from qk->qx, k in place. */
static qstatus qk_norm_rope(qbackend *be, const qqk_prep *qk, float *q, float *k, int n, int nq, int nkv, int D) {
    if (be->ops->qk_norm_rope)
        return be->ops->qk_norm_rope(be, qk->qx, qk->qx_stride, qk->q_w, q, k, qk->k_w, n, nq, nkv, D, qk->eps,
                                     qk->rot_dim, qk->pos, qk->theta);
    Q_TRY(be->ops->rmsnorm(be, qk->qx, qk->qx_stride, qk->q_w, (int64_t)n * nq, D, qk->eps, q, D));
    Q_TRY(be->ops->rmsnorm(be, k, D, qk->k_w, (int64_t)n * nkv, D, qk->eps, k, D));
    Q_TRY(be->ops->rope(be, q, n, nq, D, qk->rot_dim, qk->pos, qk->theta));
    return be->ops->rope(be, k, n, nkv, D, qk->rot_dim, qk->pos, qk->theta);
}

/* §2.3 gated full attention over all rows, its output added to the residual (the MLP's norm, res_range). */
static qstatus attn_block(qwen35_model *m, int l, int n, int n_seqs, qwen35_state *const *states) {
    const qwen35_config *c = &m->cfg;
    const qwen35_layer *L = &m->w.layers[l];
    const qwen35_attn_weights *w = &L->attn;
    qwen35_scratch *s = m->scratch;
    qbackend *be = m->be;
    const int D = c->head_dim, nq = c->n_heads, nkv = c->n_kv_heads;
    const qweight *W[4];
    qwen35_layer_in_weights(L, W);
    float *const Y[3] = {s->qg, s->k, s->v}; /* qg: per head [query | gate] */
    Q_TRY(norm_mm(m, L->input_norm, 3, W, Y, 0));
    /* the gated attention applies the head norms and RoPE itself (with the K/V write, where it can) */
    const int gated = be->ops->attention_gated && s->n_ranges == 1;
    const qqk_prep qk = {s->qg, 2 * D, w->q_norm, w->k_norm, c->rms_eps, c->rot_dim, s->pos, c->rope_theta};
    if (!gated) Q_TRY(qk_norm_rope(be, &qk, s->q, s->k, n, nq, nkv, D));
    for (int i = 0; i < n_seqs; i++) {
        s->kp[i] = states[s->seq_stream[i]]->k_cache[l];
        s->vp[i] = states[s->seq_stream[i]]->v_cache[l];
    }
    /* o_proj reads the output through its gate, sigmoid of the gate half of qg (per head [query | gate]): the
     * attention is told so where one range takes every row */
    const qglu out_gate = {s->qg + D, 2 * D, D, QGLU_SIGMOID, NULL, 0.0f};
    const float scale = 1.0f / sqrtf((float)D);
    if (gated)
        Q_TRY(be->ops->attention_gated(be, s->q, s->k, s->v, s->seqs, n_seqs, s->kp, s->vp, qwen35_kv_fmt(c), nq, nkv,
                                       D, scale, s->o, &out_gate, &qk));
    else
        Q_TRY(be->ops->attention(be, s->q, s->k, s->v, s->seqs, n_seqs, s->kp, s->vp, qwen35_kv_fmt(c), nq, nkv, D,
                                 scale, s->o));
    const qweight *M[2] = {&L->gate_proj, &L->up_proj};
    for (int r = 0; r < s->n_ranges; r++) { /* the output gate, then o_proj */
        const int64_t r0 = s->range_start[r];
        qglu gate = out_gate;
        gate.g += r0 * nq * 2 * D;
        Q_TRY(res_range(m, r, s->o + r0 * nq * D, &gate, &w->o_proj, L->post_norm, 2, M));
    }
    return Q_OK;
}

/* §2.4 Gated DeltaNet over all rows, its output added to the residual (the MLP's norm, res_range). */
static qstatus gdn_block(qwen35_model *m, int l, int n, int n_seqs, qwen35_state *const *states) {
    const qwen35_config *c = &m->cfg;
    const qwen35_layer *L = &m->w.layers[l];
    const qwen35_gdn_weights *w = &L->gdn;
    qwen35_scratch *s = m->scratch;
    qbackend *be = m->be;
    const int64_t vD = (int64_t)c->lin_n_v_heads * c->lin_v_dim;
    /* out_proj reads the rule's out through the gated norm, rmsnorm(go) * norm_w * silu(z) per head (a gate of its
     * input): the rule is told so for all rows (a backend's use needs one range) */
    const qglu out_norm = {s->z, c->lin_v_dim, c->lin_v_dim, QGLU_SILU, w->norm_w, c->rms_eps};
    const qgdn_dims dims = {c->lin_n_k_heads, c->lin_n_v_heads, c->lin_k_dim, c->lin_v_dim,
                            c->gdn_state_type == QSTATE_BF16, 1, /* settled: the ops below follow a matmul, a conv */
                            s->n_ranges == 1 ? &out_norm : NULL};
    const qweight *W[4];
    qwen35_layer_in_weights(L, W);
    float *const Y[4] = {s->qkv, s->z, s->b, s->a};
    Q_TRY(norm_mm(m, L->input_norm, 4, W, Y, 0));
    for (int i = 0; i < n_seqs; i++) {
        s->p0[i] = states[s->seq_stream[i]]->conv[l];
        s->p1[i] = states[s->seq_stream[i]]->S[l];
    }
    const qgdn_gates gates = {s->a, s->b, w->A_log, w->dt_bias, s->g, s->beta, n, dims.n_v_heads, 1};
    const int C = qwen35_conv_dim(c);
    if (be->ops->conv_gated_delta) {
        Q_TRY(be->ops->conv_gated_delta(be, s->qkv, s->seqs, n_seqs, s->p0, w->conv_w, c->conv_kernel, s->qkv_c,
                                        &gates, s->p1, dims, s->go));
    } else if (be->ops->conv1d_silu_gates) {
        Q_TRY(be->ops->conv1d_silu_gates(be, s->qkv, s->seqs, n_seqs, s->p0, w->conv_w, C, c->conv_kernel, s->qkv_c,
                                         &gates));
    } else {
        Q_TRY(be->ops->conv1d_silu(be, s->qkv, s->seqs, n_seqs, s->p0, w->conv_w, C, c->conv_kernel, s->qkv_c));
        Q_TRY(be->ops->gdn_gates(be, s->a, s->b, n, dims.n_v_heads, w->A_log, w->dt_bias, s->g, s->beta));
    }
    if (!be->ops->conv_gated_delta)
        Q_TRY(be->ops->gated_delta(be, s->qkv_c, s->g, s->beta, s->seqs, n_seqs, s->p1, dims, s->go));
    const qweight *M[2] = {&L->gate_proj, &L->up_proj};
    for (int r = 0; r < s->n_ranges; r++) {
        const int64_t r0 = s->range_start[r];
        qglu norm = out_norm;
        norm.g = s->z + r0 * vD;
        Q_TRY(res_range(m, r, s->go + r0 * vD, &norm, &w->out_proj, L->post_norm, 2, M));
    }
    return Q_OK;
}

/* §2.6 SwiGLU MLP, its output added to the residual (the next layer's norm, res_range / res_close). */
static qstatus mlp_block(qwen35_model *m, int l) {
    const qwen35_layer *L = &m->w.layers[l];
    const qwen35_layer *N = l + 1 < m->cfg.n_layers ? &m->w.layers[l + 1] : NULL; /* the next layer's norm */
    qwen35_scratch *s = m->scratch;
    qbackend *be = m->be;
    const qweight *W[2] = {&L->gate_proj, &L->up_proj}, *C[4];
    float *const Y[2] = {s->gate, s->up};
    Q_TRY(norm_mm(m, L->post_norm, 2, W, Y, 1));
    /* per range, swiglu into the down projection's input where the backend can (bitwise the same as swiglu,
     * then the matmul): a prompt range by swiglu_matmul_prefill, a decode range by glu_matmul or resid_matmul */
    const int64_t I = m->cfg.intermediate, D = L->down_proj.n_out;
    const qweight *Wd = &L->down_proj;
    const int n_c = N ? qwen35_layer_in_weights(N, C) : 0;
    for (int r = 0; r < s->n_ranges; r++) {
        const int r0 = s->range_start[r], len = s->range_start[r + 1] - r0;
        float *g = s->gate + r0 * I, *u = s->up + r0 * I;
        if (s->range_prefill[r] && be->ops->swiglu_matmul_prefill) {
            Q_TRY(be->ops->swiglu_matmul_prefill(be, g, u, len, Wd, s->out + r0 * D));
            Q_TRY(res_close(m, r, N ? N->input_norm : NULL));
            continue;
        }
        const qglu act = {g, I, (int)I, QGLU_SILU, NULL, 0.0f};
        Q_TRY(res_range(m, r, u, &act, Wd, N ? N->input_norm : NULL, n_c, C));
    }
    return Q_OK;
}

qstatus qwen35_forward(qwen35_model *m, const qrow *rows, int n, qwen35_state *const *states,
                       float *logits) {
    return qwen35_forward_ex(m, rows, n, states, logits, NULL);
}

/* The forward's device work, from the embedding to the head and the greedy ids: what a decode step
 * records as one graph. Output rows: those wanting logits first, then those wanting only their
 * greedy id, each in row order; the head runs once over all of them (one matmul for both kinds). */
static qstatus device_pass(qwen35_model *m, const qrow *rows, int n, int n_seqs, int n_logits, int n_argmax,
                           qwen35_state *const *states) {
    const qwen35_config *c = &m->cfg;
    qwen35_scratch *s = m->scratch;
    qbackend *be = m->be;
    const int64_t H = c->hidden;
    s->head_sketched = 0;
    Q_TRY(be->ops->embed(be, &m->w.embed, s->ids, n, s->x)); /* §2.1: no scaling */
    /* Each residual add comes with the norm that follows it (res_range); the last layer's MLP output is
     * added alone, the final norm running on the output rows only. */
    Q_TRY(be->ops->rmsnorm(be, s->x, H, m->w.layers[0].input_norm, n, (int)H, c->rms_eps, s->h, H));
    for (int r = 0; r < s->n_ranges; r++) s->range_fused[r] = 0; /* the first layer reads s->h */
    for (int l = 0; l < c->n_layers; l++) {
        if (m->w.layers[l].is_attn) Q_TRY(attn_block(m, l, n, n_seqs, states));
        else Q_TRY(gdn_block(m, l, n, n_seqs, states));
        Q_TRY(mlp_block(m, l));
    }
    const int n_out = n_logits + n_argmax;
    if (n_out == 0) return Q_OK;
    if (n_out == n && (n_logits == 0 || n_argmax == 0)) { /* every row, in order: no gather */
        Q_TRY(be->ops->rmsnorm(be, s->x, H, m->w.final_norm, n_out, (int)H, c->rms_eps, s->hl, H));
    } else {
        for (int pass = 0, j = 0; pass < 2; pass++)
            for (int i = 0; i < n; i++)
                if (rows[i].flags & (pass ? QROW_ARGMAX | QROW_DRAW : QROW_LOGITS))
                    Q_TRY(be->ops->copy(be, s->hl + (j++) * H, s->x + i * H, (size_t)H * sizeof(float)));
        Q_TRY(be->ops->rmsnorm(be, s->hl, H, m->w.final_norm, n_out, (int)H, c->rms_eps, s->hl, H));
    }
    s->head_sketched = n_out == 1 && n_argmax == 1 && s->n_draw == 0 && m->w.head_sketch && be->ops->head_argmax;
    if (s->head_sketched) /* one greedy row: the sketch rules out most of the head's rows (forward_ex: -1) */
        return be->ops->head_argmax(be, s->hl, &m->w.lm_head, m->w.head_sketch, s->ids);
    Q_TRY(be->ops->matmul(be, s->hl, n_out, &m->w.lm_head, s->logits));
    const float *id_logits = s->logits + (int64_t)n_logits * c->vocab_size;
    if (n_argmax > 0 && s->n_draw > 0) /* s->ids is free again: the embedding read it earlier in stream order */
        return be->ops->draw(be, id_logits, n_argmax, c->vocab_size, s->draws, s->ids);
    if (n_argmax > 0) Q_TRY(be->ops->argmax(be, id_logits, n_argmax, c->vocab_size, s->ids));
    return Q_OK;
}

/* The drawn ids the backend could not decide (-1: a top-k or top-p set past what it sorts): that row's logits come
 * to the host, which makes the same draw (draw_row). */
static qstatus draws_undecided(qwen35_model *m, int n_logits, int n_ids, int32_t *ids) {
    const qwen35_scratch *s = m->scratch;
    const int V = m->cfg.vocab_size;
    float *row = NULL;
    draw_cand *work = NULL;
    qstatus st = Q_OK;
    for (int j = 0; j < n_ids && st == Q_OK; j++) {
        if (ids[j] >= 0) continue;
        if (!row && (!(row = malloc((size_t)V * sizeof *row)) || !(work = malloc((size_t)V * sizeof *work)))) {
            st = q_fail(Q_ENOMEM, "forward: no host memory for a draw's logits");
            break;
        }
        st = m->be->ops->download(m->be, row, s->logits + (int64_t)(n_logits + j) * V, (size_t)V * sizeof *row);
        if (st == Q_OK) ids[j] = draw_row(row, V, &s->draws[j], work);
    }
    free(row);
    free(work);
    return st;
}

qstatus qwen35_forward_ex(qwen35_model *m, const qrow *rows, int n, qwen35_state *const *states,
                          float *logits, int32_t *argmax) {
    if (n <= 0) return q_fail(Q_EINVAL, "forward: empty batch");
    Q_TRY(scratch_reserve(m, n));
    const qwen35_config *c = &m->cfg;
    qwen35_scratch *s = m->scratch;
    qbackend *be = m->be;
    int n_seqs = 0, n_logits = 0, n_argmax = 0;
    Q_TRY(plan_seqs(m, rows, n, states, &n_seqs, &n_logits, &n_argmax));
    if (n_logits > 0 && !logits) return q_fail(Q_EINVAL, "forward: rows ask for logits but no buffer");
    if (n_argmax > 0 && !argmax) return q_fail(Q_EINVAL, "forward: rows ask for greedy or drawn ids but no buffer");

    Q_TRY(be->ops->upload(be, s->ids, s->host_ids, (size_t)n * sizeof(int32_t)));
    Q_TRY(be->ops->upload(be, s->pos, s->host_pos, (size_t)n * sizeof(int32_t)));
    /* A decode-only batch runs as one recorded graph where the backend has them. If the recording
     * fails (an op had to synchronise, e.g. a scratch buffer grew), nothing ran: run it directly. */
    const int decode_only = s->n_ranges == 1 && !s->range_prefill[0];
    const int graph = decode_only && be->ops->graph_begin && be->ops->graph_begin(be) == Q_OK;
    qstatus st = device_pass(m, rows, n, n_seqs, n_logits, n_argmax, states);
    if (graph && (be->ops->graph_end(be, st == Q_OK) != Q_OK || st != Q_OK))
        st = device_pass(m, rows, n, n_seqs, n_logits, n_argmax, states);
    Q_TRY(st);
    for (int i = 0; i < n_seqs; i++) states[s->seq_stream[i]]->n_past += s->seqs[i].n_rows;
    if (n_argmax > 0) Q_TRY(be->ops->download(be, argmax, s->ids, (size_t)n_argmax * sizeof(int32_t)));
    if (n_argmax > 0 && s->head_sketched && argmax[0] < 0) { /* undecided by the sketch: the whole head */
        Q_TRY(be->ops->matmul(be, s->hl, 1, &m->w.lm_head, s->logits));
        Q_TRY(be->ops->argmax(be, s->logits, 1, c->vocab_size, s->ids));
        Q_TRY(be->ops->download(be, argmax, s->ids, sizeof(int32_t)));
    }
    if (s->n_draw > 0) Q_TRY(draws_undecided(m, n_logits, n_argmax, argmax));
    if (n_logits == 0) return Q_OK;
    return be->ops->download(be, logits, s->logits, (size_t)n_logits * c->vocab_size * sizeof(float));
}
