/* test_pycoder_goldens.c: the bundled trained model (models/qwen35-pycoder, MLX 4-bit, made by
 * tools/train/device_pipeline.sh) through the quill binary against transformers' greedy
 * continuations, computed from the same dequantized weights (tests/fixtures/pycoder/goldens.json,
 * tools/train/make_goldens.py). For each prompt: `quill tokenize --file` gives transformers' ids,
 * `quill run --prompt-file --print-ids` gives its greedy ids token for token (EOS included when it
 * stopped there), and `quill run --prompt-file` prints its decoded completion. Skipped while the
 * bundle or its goldens are not in the tree. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

/* $QUILL_PYCODER_MODEL / $QUILL_PYCODER_GOLDENS override the two paths (tools/train/tests/smoke_local.sh
 * points them at a toy pair). */
static const char *env_or(const char *name, const char *dflt) {
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

/* Runs cmd; returns its stdout (owned, NUL-terminated) or NULL when it exits non-zero. */
static char *run(const char *cmd) {
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t k;
    while (buf && (k = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += k;
        if (cap - n < 2) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); buf = NULL; }
            else buf = nb;
        }
    }
    int rc = pclose(p);
    if (!buf || rc != 0) { free(buf); return NULL; }
    buf[n] = 0;
    return buf;
}

/* Compares whitespace-separated ids in text with a JSON array of ints. */
static int ids_equal(const char *text, const json_t *want, char *why, size_t cap) {
    size_t i = 0, n = json_array_size(want);
    const char *p = text;
    char *end;
    for (;; i++) {
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (i >= n || v != json_integer_value(json_array_get(want, i))) {
            snprintf(why, cap, "id %zu is %ld, want %lld", i, v,
                     i < n ? (long long)json_integer_value(json_array_get(want, i)) : -1LL);
            return 0;
        }
        p = end;
    }
    if (i != n) snprintf(why, cap, "%zu ids, want %zu", i, n);
    return i == n;
}

/* Runs cmd and fails prompt i unless its output is the ids want (what names the command). */
static void expect_ids(const char *cmd, json_t *want, size_t i, const char *what) {
    char why[200];
    char *out = run(cmd);
    if (!out) fail_msg("prompt %zu: %s failed", i, what);
    if (!ids_equal(out, want, why, sizeof why)) fail_msg("prompt %zu: %s differs from transformers: %s", i, what, why);
    free(out);
}

static void test_pycoder_goldens(void **state) {
    (void)state;
    const char *model = env_or("QUILL_PYCODER_MODEL", QUILL_SOURCE_DIR "/models/qwen35-pycoder");
    const char *goldens = env_or("QUILL_PYCODER_GOLDENS", QUILL_FIXTURES "/pycoder/goldens.json");
    char st_path[1100];
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", model);
    struct stat sb;
    if (stat(st_path, &sb) != 0 || stat(goldens, &sb) != 0) {
        printf("%s or %s is not in the tree yet: skipped\n", model, goldens);
        skip();
    }
    json_error_t jerr;
    json_t *g = json_load_file(goldens, 0, &jerr);
    if (!g) fail_msg("%s: %s", goldens, jerr.text);
    json_t *prompts = json_object_get(g, "prompts");
    assert_true(json_array_size(prompts) >= 3);
    char dir[] = "/tmp/quill-pycoder-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char file[1200], cmd[4096];
    snprintf(file, sizeof file, "%s/prompt.txt", dir);
    size_t i;
    json_t *p;
    json_array_foreach(prompts, i, p) {
        const char *text = json_string_value(json_object_get(p, "text"));
        int n = (int)json_integer_value(json_object_get(p, "n_predict"));
        assert_non_null(text);
        FILE *f = fopen(file, "wb");
        assert_non_null(f);
        fwrite(text, 1, strlen(text), f);
        assert_int_equal(fclose(f), 0);

        snprintf(cmd, sizeof cmd, "'%s' tokenize '%s' --file '%s'", QUILL_BINARY, model, file);
        expect_ids(cmd, json_object_get(p, "ids"), i, "quill tokenize");

        snprintf(cmd, sizeof cmd, "'%s' run '%s' --backend cpu --prompt-file '%s' -n %d --print-ids 2>/dev/null",
                 QUILL_BINARY, model, file, n);
        expect_ids(cmd, json_object_get(p, "greedy"), i, "quill run --print-ids (greedy)");

        snprintf(cmd, sizeof cmd, "'%s' run '%s' --backend cpu --prompt-file '%s' -n %d 2>/dev/null",
                 QUILL_BINARY, model, file, n);
        char *out = run(cmd);
        if (!out) fail_msg("prompt %zu: quill run (text) failed", i);
        const char *want = json_string_value(json_object_get(p, "completion_text"));
        size_t len = strlen(out);
        if (len > 0 && out[len - 1] == '\n') out[--len] = 0; /* run adds one newline */
        if (want && strcmp(out, want) != 0)
            fail_msg("prompt %zu: completion text differs:\n--- quill\n%s\n--- transformers\n%s", i, out, want);
        printf("prompt %zu: %d tokens equal; completion: %.60s...\n", i, n, out);
        free(out);
    }
    unlink(file);
    rmdir(dir);
    json_decref(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_pycoder_goldens)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
