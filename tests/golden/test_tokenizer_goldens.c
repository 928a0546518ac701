/* test_tokenizer_goldens.c: quill's tokenizer against HF on the fixture corpus.
 * tests/fixtures/tokenizer/corpus.json (texts, base64 of raw bytes) and goldens.json (ids from
 * transformers AutoTokenizer 5.17 / tokenizers 0.23, decode results) come from
 * tools/goldens/make_tokenizer_goldens.py. A missing fixture FAILS the test (it is not skipped).
 * Checks, for the Qwen3 and Qwen3.5 tokenizers: encode with parse_special 1 and 0 (HF's
 * split_special_tokens) gives the recorded ids; decode with and without skip_special gives the
 * recorded text; and the detokenizer's chunks add up to the same text. Every mismatch is printed
 * (text name, first differing position) before the test fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "harness.h"
#include "tokenizer/detok.h"
#include "tokenizer/tokenizer.h"

static unsigned char *b64_decode(const char *s, size_t *n_out) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t len = strlen(s), n = 0;
    unsigned char *out = malloc(len + 1);
    assert_non_null(out);
    unsigned v = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        const char *p = strchr(tab, s[i]);
        if (!p || s[i] == '\0') continue; /* '=' padding */
        v = (v << 6) | (unsigned)(p - tab);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(v >> bits);
        }
    }
    out[n] = '\0';
    *n_out = n;
    return out;
}

static json_t *load_fixture(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer/%s", QUILL_FIXTURES, name);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    if (!j)
        fail_msg("%s: %s (run tools/goldens/make_tokenizer_goldens.py --shared ../shared --out "
                 "tests/fixtures/tokenizer on a machine with transformers)", path, err.text);
    return j;
}

/* Compares ids with the JSON array want; prints the first difference. Returns 1 when equal. */
static int ids_match(const char *what, const char *name, const int32_t *ids, size_t n, const json_t *want) {
    size_t nw = json_array_size(want);
    for (size_t i = 0; i < n || i < nw; i++) {
        long long w = i < nw ? json_integer_value(json_array_get(want, i)) : -1;
        long long g = i < n ? ids[i] : -1;
        if (w != g) {
            print_message("MISMATCH %s %s: at %zu got %lld want %lld (got %zu ids, want %zu)\n", what, name, i,
                          g, w, n, nw);
            return 0;
        }
    }
    return 1;
}

static int check_tokenizer(const char *key, const json_t *g, const json_t *texts) {
    const char *dir = json_string_value(json_object_get(g, "dir"));
    assert_non_null(dir);
    char path[1024];
    snprintf(path, sizeof path, "%s/data/%s", QUILL_SHARED_DIR, dir);
    qtokenizer *tok;
    assert_ok(tok_load(path, &tok));
    int bad = 0, n_checked = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(g, "encode"), i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        json_t *t = json_array_get(texts, i);
        assert_non_null(t);
        if (strcmp(name, json_string_value(json_object_get(t, "name"))) != 0)
            fail_msg("%s: goldens.json encode[%zu] is \"%s\" but corpus.json has \"%s\"", key, i, name,
                     json_string_value(json_object_get(t, "name")));
        size_t n;
        unsigned char *raw = b64_decode(json_string_value(json_object_get(t, "b64")), &n);
        for (int special = 1; special >= 0; special--) {
            int32_t *ids;
            size_t k;
            assert_ok(tok_encode(tok, (const char *)raw, n, special, &ids, &k));
            char what[64];
            snprintf(what, sizeof what, "%s encode%s", key, special ? "" : " (parse_special=0)");
            bad += !ids_match(what, name, ids, k, json_object_get(e, special ? "ids" : "ids_nospecial"));
            n_checked++;
            free(ids);
        }
        free(raw);
    }
    json_array_foreach(json_object_get(g, "decode"), i, e) {
        json_t *jids = json_object_get(e, "ids");
        size_t n = json_array_size(jids);
        int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
        assert_non_null(ids);
        for (size_t j = 0; j < n; j++) ids[j] = (int32_t)json_integer_value(json_array_get(jids, j));
        int skip = json_is_true(json_object_get(e, "skip_special"));
        size_t nw;
        unsigned char *want = b64_decode(json_string_value(json_object_get(e, "text_b64")), &nw);
        char *text;
        size_t nt;
        assert_ok(tok_decode(tok, ids, n, skip, &text, &nt));
        if (nt != nw || memcmp(text, want, nw) != 0) {
            print_message("MISMATCH %s decode[%zu] (skip_special=%d): got \"%s\" want \"%s\"\n", key, i, skip,
                          text, (char *)want);
            bad++;
        }
        /* The streaming detokenizer must add up to the same text. */
        detok *d;
        assert_ok(detok_create(tok, skip, &d));
        size_t cap = nw + 64, got = 0;
        char *acc = malloc(cap);
        assert_non_null(acc);
        for (size_t j = 0; j <= n; j++) {
            const char *chunk;
            size_t nc;
            if (j < n) assert_ok(detok_feed(d, ids[j], &chunk, &nc));
            else assert_ok(detok_flush(d, &chunk, &nc));
            if (got + nc > cap) {
                cap = 2 * (got + nc);
                acc = realloc(acc, cap);
                assert_non_null(acc);
            }
            memcpy(acc + got, chunk, nc);
            got += nc;
        }
        if (got != nw || memcmp(acc, want, nw) != 0) {
            print_message("MISMATCH %s decode[%zu] via detok (skip_special=%d)\n", key, i, skip);
            bad++;
        }
        n_checked += 2;
        detok_destroy(d);
        free(acc);
        free(text);
        free(want);
        free(ids);
    }
    print_message("%s: %d checks, %d mismatches\n", key, n_checked, bad);
    tok_free(tok);
    return bad;
}

static void test_goldens(void **state) {
    (void)state;
    json_t *corpus = load_fixture("corpus.json");
    json_t *goldens = load_fixture("goldens.json");
    json_t *texts = json_object_get(corpus, "texts");
    json_t *toks = json_object_get(goldens, "tokenizers");
    assert_true(json_array_size(texts) >= 50);
    assert_non_null(json_object_get(toks, "qwen3"));
    assert_non_null(json_object_get(toks, "qwen35"));
    int bad = 0;
    const char *key;
    json_t *g;
    json_object_foreach(toks, key, g) bad += check_tokenizer(key, g, texts);
    json_decref(corpus);
    json_decref(goldens);
    assert_int_equal(bad, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_goldens)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
