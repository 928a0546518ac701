/* cmd_bench.c: `quill bench [MODEL_DIR]`: one table of prefill tokens/s, single-stream decode
 * tokens/s at several contexts, aggregate decode tokens/s at several stream counts (each stream at context
 * --stream-context, 512 by default), the weight bytes a decode step reads, the copy bandwidth measured in
 * the same run, and the decode floor they imply (bytes per step / bandwidth). A number is a median of
 * repeats after a warm-up.
 * Decode at context C starts from a state whose K/V rows 0..C-1 and GDN states hold random values
 * (what a decode step reads and costs is the same as after a real prefill of C tokens, which the
 * prefill rows measure separately). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "format/safetensors.h"
#ifdef QUILL_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

/* --profile: the per-op GPU time table after each figure (CUDA only; see cuda_profile.cu). */
static int g_profile;
/* --temperature, --top-k, --top-p, --min-p, --seed: how the decode rows sample (greedy by default), as the server's
 * streams do (gen_out_row): ids drawn on the backend. */
static qsampling g_sampling;

static void profile_reset(void) {
#ifdef QUILL_HAVE_CUDA
    if (g_profile) cuda_profile_reset();
#endif
}

static void profile_report(const char *unit, int units) {
#ifdef QUILL_HAVE_CUDA
    if (g_profile) {
        cuda_profile_report(stdout, unit, units);
        printf("\n");
    }
#else
    (void)unit, (void)units;
#endif
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int parse_list(const char *s, int *out, int cap) {
    int n = 0;
    while (*s && n < cap) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

/* Read + write bytes per second of a large device-to-device copy. */
static double copy_bandwidth(qbackend *be) {
    const size_t bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    if (be->ops->alloc(be, bytes, &a) != Q_OK || be->ops->alloc(be, bytes, &b) != Q_OK) {
        be->ops->free(be, a);
        return 0;
    }
    be->ops->copy(be, b, a, bytes);
    be->ops->sync(be);
    const int reps = 10;
    double t0 = now_s();
    for (int i = 0; i < reps; i++) be->ops->copy(be, i & 1 ? a : b, i & 1 ? b : a, bytes);
    be->ops->sync(be);
    double dt = now_s() - t0;
    be->ops->free(be, a);
    be->ops->free(be, b);
    return 2.0 * bytes * reps / dt;
}

/* Bytes of weights one decode step reads: every layer's matrices and the head (one embedding row). */
static int64_t decode_weight_bytes(const qwen35_model *m) {
    const qwen35_weights *w = &m->w;
    int64_t b = qweight_bytes(&w->lm_head);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const qwen35_layer *L = &w->layers[l];
        const qweight *ws[] = {&L->gate_proj, &L->up_proj, &L->down_proj, &L->attn.q_proj, &L->attn.k_proj,
                               &L->attn.v_proj, &L->attn.o_proj, &L->gdn.in_proj_qkv, &L->gdn.in_proj_z,
                               &L->gdn.in_proj_b, &L->gdn.in_proj_a, &L->gdn.out_proj};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (L->is_attn ? (i < 7) : (i < 3 || i >= 7)) b += qweight_bytes(ws[i]);
    }
    return b;
}

static float *random_floats(size_t n, unsigned seed, float scale) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; v && i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * scale;
    }
    return v;
}

/* Puts st at position ctx with random K/V rows and GDN states (see the top comment). */
static qstatus fill_context(qwen35_model *m, qwen35_state *st, int ctx) {
    const qwen35_config *c = &m->cfg;
    Q_TRY(qwen35_state_reset(m, st));
    const size_t width = (size_t)c->n_kv_heads * c->head_dim, kv = (size_t)ctx * width;
    size_t S = (size_t)c->lin_n_v_heads * c->lin_k_dim * c->lin_v_dim;
    float *r = random_floats(kv > S ? kv : S, 7u, 1.0f);
    if (!r) return q_fail(Q_ENOMEM, "bench: out of memory");
    const qwfmt fmt = qwen35_kv_fmt(c);
    const size_t row = (size_t)qwen35_kv_row_bytes(c), kv_bytes = (size_t)ctx * row;
    void *rows = kv_bytes ? malloc(kv_bytes) : NULL; /* the rows as the cache holds them */
    uint16_t *sb = c->gdn_state_type == QSTATE_BF16 ? malloc(S * sizeof *sb) : NULL; /* a bf16 state's values */
    if ((kv_bytes && !rows) || (c->gdn_state_type == QSTATE_BF16 && !sb)) {
        free(rows);
        free(sb);
        free(r);
        return q_fail(Q_ENOMEM, "bench: out of memory");
    }
    for (int p = 0; p < ctx; p++) qkv_encode_row(fmt, r + (size_t)p * width, c->n_kv_heads, c->head_dim,
                                                 (unsigned char *)rows + (size_t)p * row);
    qstatus rc = Q_OK;
    for (int l = 0; rc == Q_OK && l < c->n_layers; l++) {
        if (c->layer_is_attn[l]) {
            if (kv) rc = m->be->ops->upload(m->be, st->k_cache[l], rows, kv_bytes);
            if (kv && rc == Q_OK) rc = m->be->ops->upload(m->be, st->v_cache[l], rows, kv_bytes);
        } else {
            for (size_t i = 0; i < S; i++) r[i] *= 0.01f;
            if (sb) { /* the state as the stream holds it */
                for (size_t i = 0; i < S; i++) sb[i] = st_f32_to_bf16(r[i]);
                rc = m->be->ops->upload(m->be, st->S[l], sb, S * sizeof *sb);
            } else {
                rc = m->be->ops->upload(m->be, st->S[l], r, S * sizeof(float));
            }
            for (size_t i = 0; i < S; i++) r[i] *= 100.0f;
        }
    }
    free(r);
    free(rows);
    free(sb);
    st->n_past = ctx;
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Decode steps for n_streams streams at context ctx; returns aggregate tokens/s (median of reps). */
static qstatus bench_decode(qwen35_model *m, int n_streams, int ctx, int steps, double *tps) {
    qwen35_state **states = calloc((size_t)n_streams, sizeof *states);
    qrow *rows = calloc((size_t)n_streams, sizeof *rows);
    int32_t *ids = malloc((size_t)n_streams * sizeof *ids);
    double times[64];
    qstatus rc = (!states || !rows || !ids) ? q_fail(Q_ENOMEM, "bench: out of memory") : Q_OK;
    for (int s = 0; rc == Q_OK && s < n_streams; s++) {
        rc = qwen35_state_create(m, ctx + steps + 4, &states[s]);
        if (rc == Q_OK) rc = fill_context(m, states[s], ctx);
    }
    if (steps > 64) steps = 64;
    for (int t = -2; rc == Q_OK && t < steps; t++) { /* two warm-up steps */
        for (int s = 0; s < n_streams; s++)
            rows[s] = gen_out_row(&g_sampling, (qrow){.stream = s, .pos = states[s]->n_past,
                                                      .token = ((t + 2) * 31 + s) % 1000 + 1});
        if (t == 0) profile_reset();
        double t0 = now_s();
        rc = qwen35_forward_ex(m, rows, n_streams, states, NULL, ids); /* greedy or drawn: ids, not logits */
        if (t >= 0) times[t] = now_s() - t0;
    }
    if (rc == Q_OK) {
        qsort(times, (size_t)steps, sizeof times[0], cmp_double);
        *tps = n_streams / times[steps / 2];
        profile_report("decode step", steps);
    }
    for (int s = 0; states && s < n_streams; s++) qwen35_state_destroy(m, states[s]);
    free(states);
    free(rows);
    free(ids);
    return rc;
}

static qstatus bench_prefill(qwen35_model *m, int n, int chunk, double *tps) {
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    float *logits = malloc((size_t)m->cfg.vocab_size * sizeof *logits);
    qwen35_state *st = NULL;
    qstatus rc = (!ids || !logits) ? q_fail(Q_ENOMEM, "bench: out of memory") : qwen35_state_create(m, n, &st);
    for (int i = 0; ids && i < n; i++) ids[i] = (i * 7919) % 1000 + 1;
    double best = 0;
    for (int rep = 0; rc == Q_OK && rep < 2; rep++) { /* the first run warms up */
        rc = qwen35_state_reset(m, st);
        profile_reset();
        double t0 = now_s();
        if (rc == Q_OK) rc = prefill(m, st, ids, n, chunk, logits);
        double dt = now_s() - t0;
        if (rep > 0 || n > 8192) best = dt; /* long prompts: one run is enough */
        if (n > 8192) break;
    }
    if (rc == Q_OK) {
        *tps = n / best;
        profile_report("prefill", 1);
    }
    qwen35_state_destroy(m, st);
    free(ids);
    free(logits);
    return rc;
}

/* Cold prefill of an n-token prompt through the engine (one slot, default chunking), K/V growing in
 * steps of kv_grow rows (0: allocated whole): seconds from submit to the first token. */
static qstatus engine_prefill_seconds(qwen35_model *m, int n, int kv_grow, double *secs) {
    qengine_params p = engine_params_default();
    p.n_parallel = 1;
    p.n_ctx = n + 1;
    p.kv_grow = kv_grow;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids) return q_fail(Q_ENOMEM, "bench: out of memory");
    for (int i = 0; i < n; i++) ids[i] = (i * 7919) % 1000 + 1;
    qengine *e = NULL;
    qstatus rc = engine_create(m, &p, &e);
    qreq *r = NULL;
    qreq_params rp = {.prompt = ids, .n_prompt = n, .max_tokens = 1, .ignore_eos = 1, .sampling = qsampling_default()};
    double t0 = now_s();
    if (rc == Q_OK) rc = engine_submit(e, &rp, &r);
    if (rc == Q_OK) {
        qfinish fin = QFINISH_NONE;
        int32_t tok;
        while (fin == QFINISH_NONE) engine_next(r, 0, &tok, 1, -1, &fin);
        *secs = now_s() - t0;
        if (fin == QFINISH_ERROR) rc = q_fail(Q_EINVAL, "bench: %s", engine_error(r));
        engine_release(r);
    }
    engine_destroy(e);
    free(ids);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    const char *model_arg = NULL, *backend = NULL;
    int prefills[8] = {512, 4096, 16384}, n_pre = 3, ctxs[8] = {0, 8192, 32768}, n_ctx = 3;
    int streams[8] = {4, 16, 64}, n_streams = 3, chunk = 512, steps = 32, grow_prefill = 0, kv_type = QKV_BF16;
    int stream_ctx = 512, state_type = QSTATE_F32;
    g_sampling = qsampling_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: quill bench [MODEL_DIR] [--prefill 512,4096,16384] [--contexts 0,8192,32768]\n"
                   "                   [--streams 4,16,64] [--prefill-chunk 512] [--steps 32] [--backend cpu|cuda]\n"
                   "                   [--kv-type bf16|f32|q8] [--stream-context 512]  (the streams' context)\n"
                   "                   [--gdn-state-type f32|bf16]\n"
                   "                   [--temperature T] [--top-k K] [--top-p P] [--min-p M] [--seed S]\n"
                   "                                       (decode rows sample so; greedy by default)\n"
                   "                   [--grow-prefill N]  (only: cold N-token prefill through the engine,\n"
                   "                                        K/V whole vs growing in 1024-row steps)\n"
                   "                   [--profile]         (CUDA: per-op GPU time after each figure;\n"
                   "                                        the events slow the figures a little)\n");
            return 0;
        }
        if (a[0] != '-') { model_arg = a; continue; }
        if (!strcmp(a, "--profile")) { g_profile = 1; continue; }
        if (!v) { fprintf(stderr, "quill bench: %s needs a value\n", a); return 2; }
        i++;
        long long iv;
        double dv;
        if (!strcmp(a, "--prefill")) n_pre = parse_list(v, prefills, 8);
        else if (!strcmp(a, "--contexts")) n_ctx = parse_list(v, ctxs, 8);
        else if (!strcmp(a, "--streams")) n_streams = parse_list(v, streams, 8);
        else if (!strcmp(a, "--backend")) backend = v;
        else if (!strcmp(a, "--prefill-chunk") && !cli_parse_int(v, 1, 1 << 20, &iv)) chunk = (int)iv;
        else if (!strcmp(a, "--steps") && !cli_parse_int(v, 1, 64, &iv)) steps = (int)iv;
        else if (!strcmp(a, "--grow-prefill") && !cli_parse_int(v, 1, 1 << 24, &iv)) grow_prefill = (int)iv;
        else if (!strcmp(a, "--kv-type") && !cli_parse_kv_type(v, &kv_type)) {}
        else if (!strcmp(a, "--gdn-state-type") && !cli_parse_gdn_state_type(v, &state_type)) {}
        else if (!strcmp(a, "--stream-context") && !cli_parse_int(v, 0, 1 << 22, &iv)) stream_ctx = (int)iv;
        else if (!strcmp(a, "--temperature") && !cli_parse_float(v, &dv)) g_sampling.temperature = (float)dv;
        else if (!strcmp(a, "--top-p") && !cli_parse_float(v, &dv)) g_sampling.top_p = (float)dv;
        else if (!strcmp(a, "--min-p") && !cli_parse_float(v, &dv)) g_sampling.min_p = (float)dv;
        else if (!strcmp(a, "--top-k") && !cli_parse_int(v, 0, 1 << 30, &iv)) g_sampling.top_k = (int)iv;
        else if (!strcmp(a, "--seed") && !cli_parse_int(v, 0, INT64_MAX, &iv)) g_sampling.seed = (uint64_t)iv;
        else { fprintf(stderr, "quill bench: bad option %s %s\n", a, v); return 2; }
        if (n_pre < 0 || n_ctx < 0 || n_streams < 0) { fprintf(stderr, "quill bench: bad list '%s'\n", v); return 2; }
    }
    if (qsampling_check(&g_sampling) != Q_OK) {
        fprintf(stderr, "quill bench: %s\n", q_lasterr());
        return 2;
    }
    const char *dir = cli_model_dir(model_arg);
    qbackend *be = cli_backend_create(backend, 0);
    if (!be) return 1;
    qwen35_model *m = NULL;
    if (qwen35_open(dir, be, &m) != Q_OK) {
        fprintf(stderr, "quill bench: %s: %s\n", dir, q_lasterr());
        be->ops->destroy(be);
        return 1;
    }
    m->cfg.kv_type = kv_type;
    m->cfg.gdn_state_type = state_type;
#ifdef QUILL_HAVE_CUDA
    if (g_profile && cuda_profile_enable(be) != Q_OK) {
        fprintf(stderr, "quill bench: %s\n", q_lasterr());
        g_profile = 0;
    }
#endif
    double bw = copy_bandwidth(be);
    int64_t wb = decode_weight_bytes(m);
    printf("model %s, backend %s, K/V %s, GDN state %s, weights %.2f GB held, %.3f GB read per decode step\n", dir,
           be->ops->name, qwen35_kv_type_name(&m->cfg), qwen35_gdn_state_type_name(&m->cfg), m->w.n_bytes / 1e9,
           wb / 1e9);
    /* one greedy stream reads the head's sketch instead of its rows where the backend made one (qwen35_open) */
    const qweight *hd = &m->w.lm_head;
    const int greedy = g_sampling.temperature <= 0.0f;
    const int64_t wb1 = m->w.head_sketch && greedy
                            ? wb - qweight_bytes(hd) + qwen35_head_sketch_read_bytes(hd->n_out, hd->n_in)
                            : wb;
    if (!greedy)
        printf("decode rows sample: temperature %g, top-k %d, top-p %g, min-p %g (drawn on the backend)\n",
               g_sampling.temperature, g_sampling.top_k, g_sampling.top_p, g_sampling.min_p);
    if (wb1 != wb) printf("one greedy stream reads the lm_head's sketch: %.3f GB a step\n", wb1 / 1e9);
    printf("copy bandwidth %.0f GB/s (read + write) -> decode floor %.1f tokens/s for one stream\n", bw / 1e9,
           bw > 0 ? bw / (double)wb1 : 0.0);
    if (!strcmp(be->ops->name, "cuda")) { /* the activation precisions the figures were taken in (README) */
        const char *pp = getenv("QUILL_PREFILL_PRECISION"), *dp = getenv("QUILL_DECODE_PRECISION");
        printf("activations: prefill %s, decode matmuls %s\n", pp && *pp ? pp : "split", dp && *dp ? dp : "split");
    }
    printf("\n");
    int rc = 0;
    if (grow_prefill) { /* issue 6: growth must cost next to nothing */
        double t_whole = 0, t_grow = 0;
        for (int rep = 0; rep < 2 && !rc; rep++) /* the first pair warms up */
            if (engine_prefill_seconds(m, grow_prefill, 0, &t_whole) != Q_OK ||
                engine_prefill_seconds(m, grow_prefill, 1024, &t_grow) != Q_OK) {
                fprintf(stderr, "quill bench: %s\n", q_lasterr());
                rc = 1;
            }
        if (!rc)
            printf("| cold prefill %d through the engine | K/V whole %.3f s (%.0f tokens/s) | grow 1024: %.3f s "
                   "(%.0f tokens/s) | grow / whole %.4f |\n",
                   grow_prefill, t_whole, grow_prefill / t_whole, t_grow, grow_prefill / t_grow, t_grow / t_whole);
        qwen35_close(m);
        be->ops->destroy(be);
        return rc;
    }
    printf("| figure | tokens/s | floor |\n|---|---|---|\n");
    for (int i = 0; i < n_pre && !rc; i++) {
        double t = 0;
        if (bench_prefill(m, prefills[i], chunk, &t) != Q_OK) { fprintf(stderr, "quill bench: %s\n", q_lasterr()); rc = 1; break; }
        printf("| prefill %d (chunks of %d) | %.1f | |\n", prefills[i], chunk, t);
        fflush(stdout);
    }
    for (int i = 0; i < n_ctx && !rc; i++) {
        double t = 0;
        if (bench_decode(m, 1, ctxs[i], steps, &t) != Q_OK) { fprintf(stderr, "quill bench: %s\n", q_lasterr()); rc = 1; break; }
        printf("| decode, 1 stream, context %d | %.1f | %.1f |\n", ctxs[i], t, bw / (double)wb1);
        fflush(stdout);
    }
    for (int i = 0; i < n_streams && !rc; i++) {
        double t = 0;
        if (bench_decode(m, streams[i], stream_ctx, steps, &t) != Q_OK) { fprintf(stderr, "quill bench: %s\n", q_lasterr()); rc = 1; break; }
        printf("| decode, %d streams at context %d (aggregate) | %.1f | %.1f |\n", streams[i], stream_ctx, t,
               streams[i] * bw / (double)wb);
        fflush(stdout);
    }
    qwen35_close(m);
    be->ops->destroy(be);
    return rc;
}
