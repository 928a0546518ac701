/* cmd_tokenize.c: `quill tokenize`, the tokenizer and chat template from the command line.
 *
 *   quill tokenize [MODEL_DIR] TEXT            ids of TEXT, one line, space-separated
 *   quill tokenize [MODEL_DIR] --file PATH     ids of a file's bytes
 *   quill tokenize [MODEL_DIR] --chat REQ.json the rendered prompt, byte for byte (--ids: its ids)
 *   quill tokenize [MODEL_DIR] --decode "IDS"  text of ids (space- or comma-separated)
 *   quill tokenize [MODEL_DIR] --bench FILE    encode speed (MB/s, tokens/s); a command, not a test
 * Options: --pieces (each id beside its text, one per line), --no-special (special added tokens as
 * plain text), --skip-special (with --decode).
 * MODEL_DIR is any directory holding tokenizer.json (or the file itself); without it,
 * cli_model_dir() picks $QUILL_MODEL or the bundled model. With --file/--chat/--decode/--bench a
 * single positional argument is MODEL_DIR; otherwise it is TEXT.
 * Exit: 0 ok, 1 error (message on stderr), 2 usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "cli.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "util/fileio.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: quill tokenize [MODEL_DIR] TEXT\n"
            "       quill tokenize [MODEL_DIR] --file PATH | --chat REQUEST.json [--ids] |\n"
            "                      --decode \"ID ID ...\" [--skip-special] | --bench FILE\n"
            "options: --pieces       print each id beside its text\n"
            "         --no-special   do not parse special tokens' strings (HF split_special_tokens)\n"
            "MODEL_DIR: a directory holding tokenizer.json (default: $QUILL_MODEL, else the bundled model)\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void print_ids(const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", (int)ids[i]);
    printf("\n");
}

/* Bytes as readable text: escapes for control characters, backslash and bytes that are not whole
 * UTF-8 characters (a token can hold part of one). */
static void print_escaped(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\\') fputs("\\\\", stdout);
        else if (c >= 0x20 && c < 0x7F) putchar(c);
        else {
            int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
            int ok = len > 0 && i + (size_t)len <= n;
            for (int k = 1; ok && k < len; k++) ok = (s[i + (size_t)k] & 0xC0) == 0x80;
            if (ok) {
                fwrite(s + i, 1, (size_t)len, stdout);
                i += (size_t)len;
                continue;
            }
            printf("\\x%02X", c);
        }
        i++;
    }
}

static int print_pieces(const qtokenizer *tok, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const char *b;
        size_t nb;
        if (tok_token_bytes(tok, ids[i], &b, &nb)) {
            fprintf(stderr, "quill tokenize: %s\n", q_lasterr());
            return 1;
        }
        printf("%d\t", (int)ids[i]);
        print_escaped((const unsigned char *)b, nb);
        printf("%s\n", tok_is_special(tok, ids[i]) ? "\t(special)" : "");
    }
    return 0;
}

static int fail(const char *what) {
    fprintf(stderr, "quill tokenize: %s: %s\n", what, q_lasterr());
    return 1;
}

static int run_bench(const qtokenizer *tok, const char *path, double load_s) {
    char *text;
    size_t n;
    if (q_read_file(path, &text, &n)) return fail("--bench");
    double best = 1e30, total = 0;
    size_t n_ids = 0;
    int reps = 0;
    while (reps < 3 || (total < 2.0 && reps < 50)) {
        int32_t *ids;
        double t0 = now_s();
        if (tok_encode(tok, text, n, 1, &ids, &n_ids)) {
            free(text);
            return fail("--bench");
        }
        double dt = now_s() - t0;
        free(ids);
        total += dt;
        if (dt < best) best = dt;
        reps++;
    }
    printf("bench: %s: %zu bytes -> %zu tokens (%.2f bytes/token)\n", path, n, n_ids,
           n_ids ? (double)n / (double)n_ids : 0.0);
    printf("encode: %.2f MB/s, %.0f tokens/s (best of %d runs, %.1f ms; one thread)\n",
           (double)n / best / 1e6, (double)n_ids / best, reps, best * 1e3);
    printf("load: %.0f ms\n", load_s * 1e3);
    free(text);
    return 0;
}

static int run_chat(const qtokenizer *tok, const char *dir, const char *req_path, int want_ids, int pieces) {
    json_error_t jerr;
    json_t *req = json_load_file(req_path, 0, &jerr);
    if (!req) {
        fprintf(stderr, "quill tokenize: --chat %s:%d:%d: %s\n", req_path, jerr.line, jerr.column, jerr.text);
        return 1;
    }
    chat_template *t = NULL;
    int rc = 1;
    if (chat_template_load_dir(dir, &t)) {
        fail("chat template");
        goto out;
    }
    if (want_ids || pieces) {
        int32_t *ids;
        size_t n;
        if (chat_template_blame(t, chat_prompt_ids(tok, t, req, &ids, &n))) {
            fail(req_path);
            goto out;
        }
        if (pieces) rc = print_pieces(tok, ids, n);
        else {
            print_ids(ids, n);
            rc = 0;
        }
        free(ids);
    } else {
        char *text;
        if (chat_template_blame(t, chat_render(t, req, &text))) {
            fail(req_path);
            goto out;
        }
        fwrite(text, 1, strlen(text), stdout);
        free(text);
        rc = 0;
    }
out:
    chat_template_free(t);
    json_decref(req);
    return rc;
}

static int run_decode(const qtokenizer *tok, const char *list, int skip, int pieces) {
    size_t cap = strlen(list) / 2 + 1, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return fail("--decode");
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n' || *p == '[' || *p == ']') p++;
        if (!*p) break;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "quill tokenize: --decode: not an id list at \"%.20s\"\n", p);
            free(ids);
            return 2;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    int rc = 0;
    if (pieces) {
        rc = print_pieces(tok, ids, n);
    } else {
        char *text;
        size_t nt;
        if (tok_decode(tok, ids, n, skip, &text, &nt)) rc = fail("--decode");
        else {
            fwrite(text, 1, nt, stdout);
            free(text);
        }
    }
    free(ids);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    const char *pos[2] = {NULL, NULL}, *file = NULL, *chat = NULL, *bench = NULL, *decode = NULL;
    int n_pos = 0, pieces = 0, ids_flag = 0, no_special = 0, skip_special = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = !strcmp(a, "--file") ? &file : !strcmp(a, "--chat") ? &chat
                          : !strcmp(a, "--bench") ? &bench : !strcmp(a, "--decode") ? &decode : NULL;
        if (slot) {
            if (i + 1 >= argc) {
                fprintf(stderr, "quill tokenize: %s needs a value\n", a);
                return 2;
            }
            *slot = argv[++i];
        } else if (!strcmp(a, "--pieces")) pieces = 1;
        else if (!strcmp(a, "--ids")) ids_flag = 1;
        else if (!strcmp(a, "--no-special")) no_special = 1;
        else if (!strcmp(a, "--skip-special")) skip_special = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "quill tokenize: unknown option %s\n", a);
            usage(stderr);
            return 2;
        } else if (n_pos < 2) pos[n_pos++] = a;
        else {
            fprintf(stderr, "quill tokenize: too many arguments (quote TEXT)\n");
            return 2;
        }
    }
    int n_inputs = !!file + !!chat + !!bench + !!decode;
    if (n_inputs > 1) {
        fprintf(stderr, "quill tokenize: use one of --file, --chat, --decode, --bench\n");
        return 2;
    }
    const char *dir_arg = NULL, *text = NULL;
    if (n_inputs) {
        if (n_pos > 1) {
            fprintf(stderr, "quill tokenize: TEXT cannot be combined with --file/--chat/--decode/--bench\n");
            return 2;
        }
        dir_arg = pos[0];
    } else if (n_pos == 0) {
        usage(stderr);
        return 2;
    } else {
        dir_arg = n_pos == 2 ? pos[0] : NULL;
        text = pos[n_pos - 1];
    }
    const char *dir = cli_model_dir(dir_arg);
    qtokenizer *tok;
    double t0 = now_s();
    if (tok_load(dir, &tok)) {
        fprintf(stderr, "quill tokenize: %s%s: %s\n", dir, dir_arg ? "" : " (default model dir; pass MODEL_DIR or set QUILL_MODEL)",
                q_lasterr());
        return 1;
    }
    double load_s = now_s() - t0;
    int rc = 0;
    if (bench) rc = run_bench(tok, bench, load_s);
    else if (chat) rc = run_chat(tok, dir, chat, ids_flag, pieces);
    else if (decode) rc = run_decode(tok, decode, skip_special, pieces);
    else {
        char *buf = NULL;
        size_t n;
        if (file) {
            if (q_read_file(file, &buf, &n)) rc = fail("--file");
            text = buf;
        } else {
            n = strlen(text);
        }
        int32_t *ids;
        size_t n_ids;
        if (!rc && tok_encode(tok, text, n, !no_special, &ids, &n_ids)) rc = fail("encode");
        else if (!rc) {
            rc = pieces ? print_pieces(tok, ids, n_ids) : (print_ids(ids, n_ids), 0);
            free(ids);
        }
        free(buf);
    }
    tok_free(tok);
    if (fflush(stdout) != 0) {
        perror("quill tokenize: stdout");
        rc = 1;
    }
    return rc;
}
