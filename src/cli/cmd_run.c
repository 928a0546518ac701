/* cmd_run.c: `quill run [MODEL_DIR] PROMPT [options]`: one greedy (or sampled) generation.
 * PROMPT is --prompt-ids 1,2,3 (ids in, ids out on one line), or text through the model's own
 * tokenizer: --prompt TEXT, --prompt-file PATH (the file's bytes), --chat TEXT (one user message
 * rendered with the model's chat template), which print the completion as text (special tokens
 * dropped), or its ids with --print-ids. Speed goes to stderr; --dump-logits writes the last prompt
 * position's logits as little-endian float32. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine/generate.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "util/fileio.h"
#include "util/log.h"

static void run_usage(FILE *f) {
    fprintf(f,
            "usage: quill run [MODEL_DIR] (--prompt TEXT | --prompt-file PATH | --chat TEXT | --prompt-ids ID,...)\n"
            "  --prompt TEXT        text prompt, tokenized with the model's tokenizer; prints the completion text\n"
            "  --prompt-file PATH   the same with a file's bytes\n"
            "  --chat TEXT          one user message through the model's chat template; prints the reply text\n"
            "  --prompt-ids IDS     comma-separated token ids; prints the generated ids\n"
            "  --print-ids          print ids also for a text prompt\n"
            "  -n N                 tokens to generate (default 32)\n"
            "  --temperature T      0 = greedy (default 0)\n"
            "  --top-k K            keep the K most likely (0 = off)\n"
            "  --top-p P            nucleus (1 = off)\n"
            "  --min-p P            drop tokens below P x the most likely (0 = off)\n"
            "  --seed S             sampling seed (default 0)\n"
            "  --ignore-eos         do not stop at an end-of-sequence token\n"
            "  --prefill-chunk N    prompt rows per forward (default 512)\n"
            "  --dump-logits PATH   write the last prompt position's logits (float32 LE)\n"
            "  --backend cpu|cuda   (default: cuda when a GPU is present, else cpu)\n"
            "  --threads N          CPU threads (default: all cores)\n"
            "  --kv-type bf16|f32|q8  K/V cache element type (default bf16)\n"
            "  --gdn-state-type f32|bf16  GDN recurrent state element type (default f32)\n");
}

/* Parses "1,2,3" into an owned array. Returns -1 on a malformed list. */
static int parse_ids(const char *s, int32_t **out, int *n_out) {
    int cap = 16, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return -1;
    const char *p = s;
    while (*p) {
        char buf[32];
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        long long v;
        if (len == 0 || len >= sizeof buf) { free(ids); return -1; }
        memcpy(buf, p, len);
        buf[len] = 0;
        if (cli_parse_int(buf, 0, INT32_MAX, &v)) { free(ids); return -1; }
        if (n == cap) {
            int32_t *nb = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            if (!nb) { free(ids); return -1; }
            ids = nb;
        }
        ids[n++] = (int32_t)v;
        p += len + (comma ? 1 : 0);
        if (comma && !*p) { free(ids); return -1; }
    }
    if (n == 0) { free(ids); return -1; }
    *out = ids;
    *n_out = n;
    return 0;
}

/* The prompt's ids from text (kind 't': as is, 'f': a file's bytes, 'c': one chat turn). Loads the
 * tokenizer into *tok (kept for decoding). Prints the error and returns -1 on failure. */
static int text_prompt(const char *dir, char kind, const char *arg, qtokenizer **tok, int32_t **ids, int *n) {
    if (tok_load(dir, tok) != Q_OK) {
        fprintf(stderr, "quill run: %s: %s\n", dir, q_lasterr());
        *tok = NULL;
        return -1;
    }
    size_t n_ids = 0, len = 0;
    char *buf = NULL;
    qstatus st;
    if (kind == 'c') {
        chat_template *t = NULL;
        json_t *req = json_pack("{s:[{s:s, s:s}]}", "messages", "role", "user", "content", arg);
        st = req ? chat_template_load_dir(dir, &t) : q_fail(Q_EINVAL, "--chat: the text is not valid UTF-8");
        if (st == Q_OK) st = chat_template_blame(t, chat_prompt_ids(*tok, t, req, ids, &n_ids));
        chat_template_free(t);
        json_decref(req);
    } else {
        st = Q_OK;
        len = strlen(arg);
        if (kind == 'f') st = q_read_file(arg, &buf, &len);
        if (st == Q_OK) st = tok_encode(*tok, kind == 'f' ? buf : arg, len, 1, ids, &n_ids);
        free(buf);
    }
    if (st != Q_OK || n_ids == 0) {
        if (st != Q_OK) fprintf(stderr, "quill run: prompt: %s\n", q_lasterr());
        else fprintf(stderr, "quill run: the prompt has no tokens\n");
        if (st == Q_OK) free(*ids);
        *ids = NULL;
        tok_free(*tok);
        *tok = NULL;
        return -1;
    }
    *n = (int)n_ids;
    return 0;
}

int cmd_run(int argc, char **argv) {
    const char *model_arg = NULL, *ids_arg = NULL, *dump = NULL, *backend = NULL, *text_arg = NULL;
    char text_kind = 0;
    int print_ids = 0, kv_type = QKV_BF16, state_type = QSTATE_F32;
    qgen_params gp = {.n_predict = 32, .prefill_chunk = 512, .sampling = qsampling_default()};
    long long threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long iv;
        double fv;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { run_usage(stdout); return 0; }
        else if (!strcmp(a, "--ignore-eos")) { gp.ignore_eos = 1; continue; }
        else if (!strcmp(a, "--print-ids")) { print_ids = 1; continue; }
        else if (a[0] != '-') {
            if (model_arg) { fprintf(stderr, "quill run: unexpected argument '%s'\n", a); return 2; }
            model_arg = a;
            continue;
        }
        if (!v) { fprintf(stderr, "quill run: %s needs a value\n", a); return 2; }
        i++;
        if (!strcmp(a, "--prompt-ids")) ids_arg = v;
        else if (!strcmp(a, "--prompt") || !strcmp(a, "--prompt-file") || !strcmp(a, "--chat")) {
            text_arg = v;
            text_kind = !strcmp(a, "--chat") ? 'c' : !strcmp(a, "--prompt-file") ? 'f' : 't';
        }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (cli_parse_int(v, 0, 1 << 24, &iv)) goto bad;
            gp.n_predict = (int)iv;
        } else if (!strcmp(a, "--temperature")) {
            if (cli_parse_float(v, &fv)) goto bad;
            gp.sampling.temperature = (float)fv;
        } else if (!strcmp(a, "--top-k")) {
            if (cli_parse_int(v, 0, 1 << 30, &iv)) goto bad;
            gp.sampling.top_k = (int)iv;
        } else if (!strcmp(a, "--top-p")) {
            if (cli_parse_float(v, &fv)) goto bad;
            gp.sampling.top_p = (float)fv;
        } else if (!strcmp(a, "--min-p")) {
            if (cli_parse_float(v, &fv)) goto bad;
            gp.sampling.min_p = (float)fv;
        } else if (!strcmp(a, "--seed")) {
            if (cli_parse_int(v, 0, INT64_MAX, &iv)) goto bad;
            gp.sampling.seed = (uint64_t)iv;
        } else if (!strcmp(a, "--prefill-chunk")) {
            if (cli_parse_int(v, 1, 1 << 20, &iv)) goto bad;
            gp.prefill_chunk = (int)iv;
        } else if (!strcmp(a, "--threads")) {
            if (cli_parse_int(v, 1, 4096, &iv)) goto bad;
            threads = iv;
        } else if (!strcmp(a, "--dump-logits")) dump = v;
        else if (!strcmp(a, "--backend")) backend = v;
        else if (!strcmp(a, "--kv-type")) {
            if (cli_parse_kv_type(v, &kv_type)) goto bad;
        } else if (!strcmp(a, "--gdn-state-type")) {
            if (cli_parse_gdn_state_type(v, &state_type)) goto bad;
        } else { fprintf(stderr, "quill run: unknown option %s\n", a); run_usage(stderr); return 2; }
        continue;
    bad:
        fprintf(stderr, "quill run: bad value for %s: '%s'\n", a, v);
        return 2;
    }
    if (!ids_arg == !text_arg) {
        fprintf(stderr, "quill run: give one prompt: --prompt, --prompt-file, --chat or --prompt-ids\n");
        run_usage(stderr);
        return 2;
    }
    if (qsampling_check(&gp.sampling) != Q_OK) {
        fprintf(stderr, "quill run: %s\n", q_lasterr());
        return 2;
    }
    int32_t *prompt = NULL;
    int n_prompt = 0;
    if (ids_arg && parse_ids(ids_arg, &prompt, &n_prompt)) {
        fprintf(stderr, "quill run: --prompt-ids: expected comma-separated ids, got '%s'\n", ids_arg);
        return 2;
    }

    int rc = 1;
    const char *dir = cli_model_dir(model_arg);
    qtokenizer *tok = NULL;
    if (text_arg && text_prompt(dir, text_kind, text_arg, &tok, &prompt, &n_prompt)) return 1;
    qbackend *be = cli_backend_create(backend, (int)threads);
    qwen35_model *m = NULL;
    qwen35_state *st = NULL;
    int32_t *out = malloc((size_t)(gp.n_predict + 1) * sizeof *out);
    float *last = NULL;
    if (!be || !out) goto done;
    if (qwen35_open(dir, be, &m) != Q_OK) {
        fprintf(stderr, "quill run: %s: %s\n", dir, q_lasterr());
        goto done;
    }
    m->cfg.kv_type = kv_type;
    m->cfg.gdn_state_type = state_type;
    last = malloc((size_t)m->cfg.vocab_size * sizeof *last);
    if (!last) goto done;
    if (qwen35_state_create(m, n_prompt + gp.n_predict, &st) != Q_OK) {
        fprintf(stderr, "quill run: %s\n", q_lasterr());
        goto done;
    }
    qgen_result res;
    if (generate(m, st, prompt, n_prompt, &gp, out, last, &res) != Q_OK) {
        fprintf(stderr, "quill run: %s\n", q_lasterr());
        goto done;
    }
    if (tok && !print_ids) {
        char *text = NULL;
        size_t nt = 0;
        if (tok_decode(tok, out, (size_t)res.n_tokens, 1, &text, &nt) != Q_OK) {
            fprintf(stderr, "quill run: decode: %s\n", q_lasterr());
            goto done;
        }
        fwrite(text, 1, nt, stdout);
        printf("\n");
        free(text);
    } else {
        for (int i = 0; i < res.n_tokens; i++) printf(i ? " %d" : "%d", out[i]);
        printf("\n");
    }
    fflush(stdout);
    fprintf(stderr, "prefill: %d tokens in %.3f s (%.1f tokens/s); decode: %d tokens in %.3f s (%.1f tokens/s)%s\n",
            n_prompt, res.prefill_s, n_prompt / (res.prefill_s > 0 ? res.prefill_s : 1e-9),
            res.n_tokens, res.decode_s,
            res.n_tokens > 1 ? (res.n_tokens - 1) / (res.decode_s > 0 ? res.decode_s : 1e-9) : 0.0,
            res.stopped_eos ? " (stopped at end of sequence)" : "");
    if (dump) {
        FILE *f = fopen(dump, "wb");
        /* float32 little-endian: this code assumes a little-endian host (x86-64, arm64) */
        if (!f || fwrite(last, sizeof(float), (size_t)m->cfg.vocab_size, f) != (size_t)m->cfg.vocab_size) {
            fprintf(stderr, "quill run: --dump-logits: cannot write %s\n", dump);
            if (f) fclose(f);
            goto done;
        }
        if (fclose(f) != 0) { fprintf(stderr, "quill run: --dump-logits: cannot write %s\n", dump); goto done; }
    }
    rc = 0;
done:
    if (st) qwen35_state_destroy(m, st);
    qwen35_close(m);
    if (be) be->ops->destroy(be);
    tok_free(tok);
    free(prompt);
    free(out);
    free(last);
    return rc;
}
