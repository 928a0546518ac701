/* cmd_serve.c: `quill serve [MODEL_DIR] [options]`: loads the model, tokenizer and chat template,
 * starts the engine and the HTTP server, and runs until SIGINT or SIGTERM.
 * Shutdown order: stop accepting, end every stream (engine_destroy: clients get a final error event
 * or a 503), close the connections, free; exit code 0. Not here: any request handling (src/server/). */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "engine/engine.h"
#include "engine/memfit.h"
#include "format/config.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/server.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "util/log.h"

#define SERVE_FALLBACK_CONTEXT 4096 /* when the config names no max_position_embeddings */
#define SERVE_DEFAULT_KV_GROW 1024  /* rows: 8 MiB per attention layer of a 9B slot in f32, 4 CUDA granules */

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: quill serve [MODEL_DIR] [options]\n"
            "OpenAI-compatible HTTP server: /v1/chat/completions, /v1/completions, /v1/models, /tokenize,\n"
            "/detokenize, /health, /metrics, /memory.\n"
            "  --host ADDR          numeric address to listen on (default 127.0.0.1)\n"
            "  --port N             (default 8080)\n"
            "  --parallel N         streams decoding together (slots; default 1)\n"
            "  --context N          positions per slot (default: the model's max_position_embeddings)\n"
            "  --kv-grow ROWS       K/V grows in steps of ROWS as a stream uses it and is given back when it\n"
            "                       ends (a multiple of 16; also QUILL_KV_GROW; default %d; 0: each slot\n"
            "                       holds --context rows from its first use)\n"
            "  --kv-budget-rows N   K/V rows all slots may hold together (default parallel x context);\n"
            "                       a request is charged prompt + max_tokens rows and waits until it fits\n"
            "  --kv-type bf16|f32|q8  K/V cache element type (default bf16: each K/V value rounded to bf16 as it\n"
            "                       is written; f32 holds twice the bytes and reads twice at long contexts; q8\n"
            "                       8-bit codes with a scale per position and head, about half of bf16's bytes)\n"
            "  --gdn-state-type f32|bf16  GDN recurrent state element type (default f32, the model's\n"
            "                       mamba_ssm_dtype; bf16 halves the states' bytes and a decode step's state\n"
            "                       traffic, each value rounded to bf16 as the state is stored)\n"
            "  --memory-reserve-gib G  memory left free by the startup fit (default max(10 %%, 2 GiB))\n"
            "  --prefill-chunk N    prompt rows per round (default 512)\n"
            "  --queue N            requests waiting for a slot; beyond it 503 + Retry-After (default 64)\n"
            "  --backend cpu|cuda   (default: cuda when a GPU is present, else cpu)\n"
            "  --threads N          CPU threads (default: all cores)\n"
            "  --name NAME          model id reported by /v1/models (default: MODEL_DIR's base name)\n"
            "MODEL_DIR defaults to $QUILL_MODEL, else the model bundled in the repo. It must hold\n"
            "tokenizer.json; the chat template comes from chat_template.jinja or tokenizer_config.json.\n"
            "Startup refuses, with the arithmetic, a --context / --parallel whose memory cannot be kept.\n",
            SERVE_DEFAULT_KV_GROW);
}

typedef struct serve_opts {
    const char *model, *host, *backend, *name;
    long long port, parallel, context, prefill_chunk, queue, threads, kv_grow, kv_budget_rows;
    int kv_type, gdn_state_type;
    double reserve_gib; /* < 0: the default */
} serve_opts;

/* 0: run; 1: printed help; 2: usage error. */
static int parse_opts(int argc, char **argv, serve_opts *o) {
    *o = (serve_opts){.host = "127.0.0.1", .port = 8080, .parallel = 1, .prefill_chunk = 512, .queue = 64,
                      .kv_grow = -1, .reserve_gib = -1, .kv_type = QKV_BF16};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            serve_usage(stdout);
            return 1;
        }
        if (a[0] != '-') {
            if (o->model) {
                fprintf(stderr, "quill serve: unexpected argument '%s'\n", a);
                return 2;
            }
            o->model = a;
            continue;
        }
        if (!v) {
            fprintf(stderr, "quill serve: %s needs a value\n", a);
            return 2;
        }
        i++;
        int bad = 0;
        if (!strcmp(a, "--host")) o->host = v;
        else if (!strcmp(a, "--backend")) o->backend = v;
        else if (!strcmp(a, "--name")) o->name = v;
        else if (!strcmp(a, "--port")) bad = cli_parse_int(v, 0, 65535, &o->port);
        else if (!strcmp(a, "--parallel")) bad = cli_parse_int(v, 1, 1024, &o->parallel);
        else if (!strcmp(a, "--context")) bad = cli_parse_int(v, 2, 1 << 24, &o->context);
        else if (!strcmp(a, "--prefill-chunk")) bad = cli_parse_int(v, 1, 1 << 20, &o->prefill_chunk);
        else if (!strcmp(a, "--queue")) bad = cli_parse_int(v, 0, 1 << 20, &o->queue);
        else if (!strcmp(a, "--threads")) bad = cli_parse_int(v, 1, 4096, &o->threads);
        else if (!strcmp(a, "--kv-grow")) bad = cli_parse_int(v, 0, 1 << 24, &o->kv_grow) || o->kv_grow % 16;
        else if (!strcmp(a, "--kv-budget-rows")) bad = cli_parse_int(v, 1, (long long)1 << 40, &o->kv_budget_rows);
        else if (!strcmp(a, "--kv-type")) bad = cli_parse_kv_type(v, &o->kv_type);
        else if (!strcmp(a, "--gdn-state-type")) bad = cli_parse_gdn_state_type(v, &o->gdn_state_type);
        else if (!strcmp(a, "--memory-reserve-gib")) bad = cli_parse_float(v, &o->reserve_gib) || o->reserve_gib < 0;
        else {
            fprintf(stderr, "quill serve: unknown option %s\n", a);
            serve_usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "quill serve: bad value for %s: '%s'\n", a, v);
            return 2;
        }
    }
    return 0;
}

/* The startup fit (engine/memfit.h): picks the context (the model's unless --context) and refuses,
 * printing the arithmetic, what the device cannot keep. Returns 0 to go on. */
static int startup_fit(const char *dir, const char *backend, const serve_opts *o, int *n_ctx) {
    qwen35_config cfg;
    if (qwen35_config_load(dir, &cfg) != Q_OK) {
        fprintf(stderr, "quill serve: %s\n", q_lasterr());
        return 1;
    }
    cfg.kv_type = o->kv_type;
    cfg.gdn_state_type = o->gdn_state_type;
    int max_pos = cfg.max_positions > 0 ? cfg.max_positions : SERVE_FALLBACK_CONTEXT;
    *n_ctx = o->context ? (int)o->context : max_pos;
    if (o->context > max_pos)
        q_warn("--context %lld is more than the model's max_position_embeddings (%d)", o->context, max_pos);
    int64_t weights = 0, sketch = 0, free_b = 0, total_b = 0;
    const char *src = NULL;
    if (memfit_weights_bytes(dir, backend, &weights, &sketch) != Q_OK ||
        memfit_device_memory(backend, 0, &free_b, &total_b, &src) != Q_OK) {
        fprintf(stderr, "quill serve: memory fit: %s\n", q_lasterr());
        qwen35_config_free(&cfg);
        return 1;
    }
    qmemfit_params p = {.n_ctx = *n_ctx, .n_parallel = (int)o->parallel, .prefill_chunk = (int)o->prefill_chunk,
                        .kv_budget_rows = o->kv_budget_rows, .prompt_cache_gib = 0, .reserve_gib = o->reserve_gib,
                        .no_dequant_copies = !memfit_dequant_copies(&cfg, backend)};
    qmemfit f;
    memfit_compute(&cfg, weights, &p, free_b, total_b, src, &f);
    qwen35_config_free(&cfg);
    if (f.fits) return 0;
    char table[4096];
    memfit_table(&f, &p, table, sizeof table);
    fprintf(stderr, "quill serve: this does not fit in memory:\n%s", table);
    if (sketch > 0)
        fprintf(stderr, "  (the weights include the lm_head's %.3f GiB sketch for greedy tokens; QUILL_HEAD_SKETCH=0 "
                        "drops it)\n", (double)sketch / (1 << 30));
    return 1;
}

int cmd_serve(int argc, char **argv) {
    serve_opts o;
    int prc = parse_opts(argc, argv, &o);
    if (prc) return prc == 1 ? 0 : 2;

    /* Before any thread exists, so all inherit the mask and only http_wait_signal takes the signals. */
    http_block_signals();
    int rc = 1, lock_ready = 0;
    const char *dir = cli_model_dir(o.model);
    qbackend *be = NULL;
    qwen35_model *m = NULL;
    qtokenizer *tok = NULL;
    chat_template *tmpl = NULL;
    qmetrics *metrics = NULL;
    qhttp *http = NULL;
    qsrv s;
    memset(&s, 0, sizeof s);

    qengine_params ep = engine_params_default();
    if (engine_params_from_env(&ep) != Q_OK) {
        fprintf(stderr, "quill serve: %s\n", q_lasterr());
        goto out;
    }
    const char *env_grow = getenv("QUILL_KV_GROW");
    if (!env_grow || !*env_grow) ep.kv_grow = SERVE_DEFAULT_KV_GROW; /* memory held follows use */
    if (o.kv_grow >= 0) ep.kv_grow = (int)o.kv_grow;
    int n_ctx = 0;
    if (!(be = cli_backend_create(o.backend, (int)o.threads))) goto out;
    if (startup_fit(dir, be->ops->name, &o, &n_ctx)) goto out;
    if (qwen35_open(dir, be, &m) != Q_OK) {
        fprintf(stderr, "quill serve: %s: %s\n", dir, q_lasterr());
        goto out;
    }
    m->cfg.kv_type = o.kv_type;
    m->cfg.gdn_state_type = o.gdn_state_type;
    if (tok_load(dir, &tok) != Q_OK) {
        fprintf(stderr, "quill serve: %s: %s\n", dir, q_lasterr());
        goto out;
    }
    if (chat_template_load_dir(dir, &tmpl) != Q_OK) {
        q_warn("%s: no usable chat template (%s); /v1/chat/completions will answer 400", dir, q_lasterr());
        tmpl = NULL;
    }
    if (metrics_create(&metrics) != Q_OK) goto out;


    s.model = m;
    s.tok = tok;
    s.tmpl = tmpl;
    s.metrics = metrics;
    s.n_ctx = n_ctx;
    s.n_parallel = (int)o.parallel;
    s.n_vocab = m->cfg.vocab_size;
    s.started = (long long)time(NULL);
    s.weights_bytes = m->w.n_bytes;
    s.slot_bytes = qwen35_kv_bytes_per_token(&m->cfg) * n_ctx + qwen35_gdn_state_bytes(&m->cfg);
    static const char *const END_TOKENS[] = {"<|im_end|>", "<|endoftext|>"};
    for (size_t i = 0; i < sizeof END_TOKENS / sizeof END_TOKENS[0]; i++) {
        int32_t id = tok_token_id(tok, END_TOKENS[i]);
        if (id >= 0 && s.n_end < SERVER_MAX_END_IDS) s.end_ids[s.n_end++] = id;
    }
    if (o.name) {
        snprintf(s.model_name, sizeof s.model_name, "%s", o.name);
    } else {
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s", dir);
        size_t n = strlen(tmp);
        while (n > 1 && tmp[n - 1] == '/') tmp[--n] = 0;
        snprintf(s.model_name, sizeof s.model_name, "%s", basename(tmp));
    }
    if (pthread_rwlock_init(&s.engine_lock, NULL)) goto out;
    lock_ready = 1;

    ep.n_parallel = (int)o.parallel;
    ep.n_ctx = n_ctx;
    ep.prefill_chunk = (int)o.prefill_chunk;
    ep.queue_cap = (int)o.queue;
    ep.kv_budget_rows = o.kv_budget_rows;
    if (engine_create(m, &ep, &s.engine) != Q_OK) {
        fprintf(stderr, "quill serve: engine: %s\n", q_lasterr());
        goto out;
    }
    s.stream_rows_max = engine_stream_rows_max(s.engine);
    if (http_start(&s, o.host, (int)o.port, &http) != Q_OK) {
        fprintf(stderr, "quill serve: %s\n", q_lasterr());
        goto out;
    }
    q_info("quill serve: %s (%s) on http://%s:%lld, backend %s, %d slots x %d positions, K/V %s grow %d, GDN state %s, queue %lld",
           dir, s.model_name, o.host, o.port, be->ops->name, s.n_parallel, n_ctx, qwen35_kv_type_name(&m->cfg),
           ep.kv_grow, qwen35_gdn_state_type_name(&m->cfg), o.queue);

    int sig = http_wait_signal();
    q_info("quill serve: signal %d: stopping", sig);
    http_quiesce(http);
    rc = 0;
out:
    atomic_store(&s.stopping, 1);
    if (lock_ready) pthread_rwlock_wrlock(&s.engine_lock);
    engine_destroy(s.engine); /* every running stream ends; its client sees the end */
    s.engine = NULL;
    if (lock_ready) pthread_rwlock_unlock(&s.engine_lock);
    http_stop(http);
    if (lock_ready) pthread_rwlock_destroy(&s.engine_lock);
    metrics_destroy(metrics);
    chat_template_free(tmpl);
    tok_free(tok);
    qwen35_close(m);
    if (be) be->ops->destroy(be);
    if (rc == 0) q_info("quill serve: stopped");
    return rc;
}
