/* test_tok_encode.c: encode/decode with the real Qwen3.5 and Qwen3 tokenizers, without goldens:
 * the ids SOURCE.md records, round trips over the fixture corpus, special-token parsing, invalid
 * UTF-8, long inputs. (Exact ids for the whole corpus: tests/golden/test_tokenizer_goldens.c.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <utf8proc.h>

#include "harness.h"
#include "tokenizer/tokenizer.h"

static qtokenizer *q35, *q3;

static int setup(void **state) {
    (void)state;
    if (tok_load(QUILL_SHARED_DIR "/data/qwen35-tokenizer", &q35)) return -1;
    if (tok_load(QUILL_SHARED_DIR "/data/qwen3-tokenizer/tokenizer.json", &q3)) return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tok_free(q35);
    tok_free(q3);
    return 0;
}

static void encode(const qtokenizer *t, const char *s, size_t n, int special, int32_t **ids, size_t *k) {
    assert_ok(tok_encode(t, s, n, special, ids, k));
}

static void test_source_md_prompt(void **state) {
    (void)state;
    static const char prompt[] = "<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\n"
                                 "<think>\n\n</think>\n\n";
    static const int32_t want[] = {248045, 846, 198, 9419, 11, 1204, 513, 488, 30, 248046, 198, 248045,
                                   74455, 198, 248068, 271, 248069, 271};
    int32_t *ids;
    size_t n;
    encode(q35, prompt, strlen(prompt), 1, &ids, &n);
    assert_int_equal(n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < n; i++) assert_int_equal(ids[i], want[i]);
    char *text;
    size_t nt;
    assert_ok(tok_decode(q35, ids, n, 0, &text, &nt));
    assert_string_equal(text, prompt);
    free(text);
    /* skip_special drops <|im_start|>/<|im_end|> but keeps <think> (not special). */
    assert_ok(tok_decode(q35, ids, n, 1, &text, &nt));
    assert_string_equal(text, "user\nHello, how are you?\nassistant\n<think>\n\n</think>\n\n");
    free(text);
    free(ids);
}

static void test_vocab_queries(void **state) {
    (void)state;
    assert_int_equal(tok_n_vocab(q35), 248077);
    assert_int_equal(tok_n_vocab(q3), 151669);
    assert_int_equal(tok_token_id(q35, "<|im_end|>"), 248046);
    assert_int_equal(tok_token_id(q35, "<|endoftext|>"), 248044);
    assert_int_equal(tok_token_id(q3, "<|im_end|>"), 151645);
    assert_int_equal(tok_token_id(q35, "user"), 846);
    assert_int_equal(tok_token_id(q35, "no such token at all"), -1);
    assert_true(tok_is_special(q35, 248046));
    assert_false(tok_is_special(q35, 248068)); /* <think> */
    assert_false(tok_is_special(q35, 846));
    assert_false(tok_is_special(q35, -1));
    assert_false(tok_is_special(q35, 1 << 30));
    assert_string_equal(tok_token_str(q35, 248068), "<think>");
    assert_null(tok_token_str(q35, 248077));
}

static void test_parse_special_off(void **state) {
    (void)state;
    static const char s[] = "<|im_start|>x<think>";
    int32_t *ids;
    size_t n;
    encode(q35, s, strlen(s), 0, &ids, &n);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(ids[i], 248045);
    assert_int_equal(ids[n - 1], 248068); /* non-special added tokens still match */
    char *text;
    size_t nt;
    assert_ok(tok_decode(q35, ids, n, 1, &text, &nt));
    assert_string_equal(text, s);
    free(text);
    free(ids);
}

static void test_empty_and_errors(void **state) {
    (void)state;
    int32_t *ids;
    size_t n;
    encode(q35, "", 0, 1, &ids, &n);
    assert_int_equal(n, 0);
    assert_non_null(ids);
    free(ids);
    char *text;
    size_t nt;
    int32_t bad[] = {1, 248077};
    assert_int_equal(tok_decode(q35, bad, 2, 0, &text, &nt), Q_EINVAL);
    assert_non_null(strstr(q_lasterr(), "248077"));
    bad[1] = -5;
    assert_int_equal(tok_decode(q35, bad, 2, 0, &text, &nt), Q_EINVAL);
    assert_ok(tok_decode(q35, bad, 0, 0, &text, &nt));
    assert_int_equal(nt, 0);
    free(text);
}

/* Invalid bytes encode exactly as the same text with U+FFFD per maximal invalid subpart. */
static void test_invalid_utf8(void **state) {
    (void)state;
    static const char raw[] = "a\x80" "b \xf0\x9f\x98 c \xc0\x80 \xed\xa0\x80 \xe4\xbd";
    static const char fixed[] = "a\xef\xbf\xbd" "b \xef\xbf\xbd c \xef\xbf\xbd\xef\xbf\xbd "
                                "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd";
    int32_t *a, *b;
    size_t na, nb;
    encode(q35, raw, sizeof raw - 1, 1, &a, &na);
    encode(q35, fixed, sizeof fixed - 1, 1, &b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a);
    free(a);
    free(b);
}

static void test_bpe_examples(void **state) {
    (void)state;
    /* Single pieces whose BPE result is one vocabulary entry. */
    static const char *const words[] = {" the", "hello", " world", "\n\n", "   "};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        int32_t *ids;
        size_t n;
        encode(q35, words[i], strlen(words[i]), 1, &ids, &n);
        assert_int_equal(n, 1);
        const char *b;
        size_t nb;
        assert_ok(tok_token_bytes(q35, ids[0], &b, &nb));
        assert_int_equal(nb, strlen(words[i]));
        assert_memory_equal(b, words[i], nb);
        free(ids);
    }
}

static void round_trip(const qtokenizer *t, const char *s, size_t n) {
    int32_t *ids;
    size_t k;
    encode(t, s, n, 1, &ids, &k);
    char *text;
    size_t nt;
    assert_ok(tok_decode(t, ids, k, 0, &text, &nt));
    /* The pipeline normalizes to NFC, so the round trip gives NFC(s). */
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t m = n ? utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &nfc,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE)
                           : 0;
    assert_true(m >= 0);
    assert_int_equal(nt, (size_t)m);
    if (m) assert_memory_equal(text, nfc, nt);
    free(nfc);
    free(text);
    free(ids);
}

static int valid_utf8(const unsigned char *s, size_t n) {
    utf8proc_int32_t cp;
    for (size_t i = 0; i < n;) {
        utf8proc_ssize_t r = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (r <= 0) return 0;
        i += (size_t)r;
    }
    return 1;
}

static void test_corpus_round_trip(void **state) {
    (void)state;
    json_error_t err;
    json_t *root = json_load_file(QUILL_FIXTURES "/tokenizer/corpus.json", 0, &err);
    if (!root) fail_msg("corpus.json: %s", err.text);
    json_t *texts = json_object_get(root, "texts"), *e;
    size_t i, n_valid = 0;
    json_array_foreach(texts, i, e) {
        const char *b64 = json_string_value(json_object_get(e, "b64"));
        assert_non_null(b64);
        /* base64 decode */
        size_t len = strlen(b64), n = 0;
        unsigned char *raw = malloc(len + 1);
        unsigned v = 0;
        int bits = 0;
        for (size_t j = 0; j < len; j++) {
            const char *tab = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            const char *p = strchr(tab, b64[j]);
            if (!p || b64[j] == '\0') continue;
            v = (v << 6) | (unsigned)(p - tab);
            bits += 6;
            if (bits >= 8) {
                bits -= 8;
                raw[n++] = (unsigned char)(v >> bits);
            }
        }
        if (valid_utf8(raw, n)) {
            round_trip(q35, (const char *)raw, n);
            round_trip(q3, (const char *)raw, n);
            n_valid++;
        }
        free(raw);
    }
    assert_true(n_valid >= 50);
    json_decref(root);
}

static void test_long_inputs(void **state) {
    (void)state;
    size_t n = 200000;
    char *s = malloc(n + 1);
    static const char *const fills[] = {" ", "a", "\n", "1", "\xe4\xbd\xa0", "!"};
    for (size_t f = 0; f < sizeof fills / sizeof fills[0]; f++) {
        size_t l = strlen(fills[f]), k = 0;
        while (k + l <= n) {
            memcpy(s + k, fills[f], l);
            k += l;
        }
        round_trip(q35, s, k);
    }
    free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_source_md_prompt),  cmocka_unit_test(test_vocab_queries),
        cmocka_unit_test(test_parse_special_off), cmocka_unit_test(test_empty_and_errors),
        cmocka_unit_test(test_invalid_utf8),      cmocka_unit_test(test_bpe_examples),
        cmocka_unit_test(test_corpus_round_trip), cmocka_unit_test(test_long_inputs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
