/* test_tok_load.c: tokenizer.json loading on small synthetic files: the features Qwen's files do not
 * exercise (lstrip / rstrip / single_word / normalized added tokens, [a, b] merges, merge ranks) and
 * clear errors for malformed or unsupported files (bad JSON, missing model, merges naming unknown
 * tokens, bad regex, unknown component types). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "harness.h"
#include "tokenizer/tokenizer.h"

/* Byte-level vocabulary: printable ASCII stands for itself, space is "Ġ" (U+0120). */
static const char BASE[] =
    "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,"
    " \"added_tokens\": ["
    "  {\"id\": 100, \"content\": \"<X>\", \"special\": true, \"lstrip\": true, \"rstrip\": false,"
    "   \"normalized\": false, \"single_word\": false},"
    "  {\"id\": 101, \"content\": \"<Y>\", \"special\": false, \"lstrip\": false, \"rstrip\": true,"
    "   \"normalized\": false, \"single_word\": false},"
    "  {\"id\": 102, \"content\": \"cc\", \"special\": false, \"single_word\": true, \"normalized\": false},"
    "  {\"id\": 103, \"content\": \"\\u00e9\", \"special\": false, \"normalized\": true}],"
    " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}]},"
    " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
    "  {\"type\": \"Split\", \"pattern\": {\"Regex\": \" ?[a-z]+|\\\\s+|[^a-z\\\\s]+\"},"
    "   \"behavior\": \"Isolated\", \"invert\": false},"
    "  {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": false}]},"
    " \"post_processor\": null,"
    " \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false},"
    " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"byte_fallback\": false,"
    "  \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"\\u0120\": 3, \"ab\": 4, \"abc\": 5, \"\\u0120a\": 6,"
    "   \"<\": 7, \">\": 8, \"x\": 9, \"bc\": 10},"
    "  \"merges\": [\"a b\", [\"ab\", \"c\"], \"\\u0120 a\", \"b c\"]}}";

static char path[64];

static void write_json(const json_t *j) {
    strcpy(path, "/tmp/quill_tok_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(json_dump_file(j, path, 0), 0);
}

static json_t *base(void) {
    json_error_t err;
    json_t *j = json_loads(BASE, 0, &err);
    if (!j) fail_msg("BASE: %s at %d", err.text, err.column);
    return j;
}

static void expect_ids(const qtokenizer *t, const char *s, int special, const int32_t *want, size_t n_want) {
    int32_t *ids;
    size_t n;
    assert_ok(tok_encode(t, s, strlen(s), special, &ids, &n));
    if (n != n_want) fail_msg("\"%s\": got %zu ids, want %zu", s, n, n_want);
    for (size_t i = 0; i < n; i++)
        if (ids[i] != want[i]) fail_msg("\"%s\": id %zu is %d, want %d", s, i, ids[i], want[i]);
    free(ids);
}

#define EXPECT(t, s, special, ...)                                              \
    do {                                                                        \
        static const int32_t w_[] = {__VA_ARGS__};                              \
        expect_ids(t, s, special, w_, sizeof w_ / sizeof w_[0]);                \
    } while (0)

static void test_synthetic_features(void **state) {
    (void)state;
    json_t *j = base();
    write_json(j);
    json_decref(j);
    qtokenizer *t;
    assert_ok(tok_load(path, &t));
    unlink(path);
    assert_int_equal(tok_n_vocab(t), 104);
    EXPECT(t, "abc", 1, 5);
    EXPECT(t, "aab", 1, 0, 4);       /* "a b" (rank 0) at position 1 */
    EXPECT(t, "abbc", 1, 4, 10);      /* ab, then bc */
    EXPECT(t, " a", 1, 6);
    EXPECT(t, "a <X>b", 1, 0, 100, 1); /* lstrip takes the space */
    EXPECT(t, "a <Y>b", 1, 0, 3, 101, 1);
    EXPECT(t, "<Y>   a", 1, 101, 0); /* rstrip takes the spaces */
    EXPECT(t, "cc", 1, 102);
    EXPECT(t, "x cc", 1, 9, 3, 102);
    EXPECT(t, "acc", 1, 0, 2, 2); /* single_word: inside a word it is not the added token */
    EXPECT(t, "e\xcc\x81", 1, 103); /* NFC(e + U+0301) = U+00E9, a normalized added token */
    EXPECT(t, "<X>", 0, 7, 8);     /* special not parsed: '<' '>' ('X' is not in the vocabulary) */
    char *text;
    size_t n;
    int32_t ids[] = {0, 100, 3, 101, 103};
    assert_ok(tok_decode(t, ids, 5, 0, &text, &n));
    /* HF's ByteLevel decoder maps added tokens' characters too: U+00E9 is the byte-level symbol of
     * byte E9, a lone lead byte, so it decodes to U+FFFD (checked with tokenizers 0.23.2). */
    assert_string_equal(text, "a<X> <Y>\xef\xbf\xbd");
    free(text);
    assert_ok(tok_decode(t, ids, 5, 1, &text, &n));
    assert_string_equal(text, "a <Y>\xef\xbf\xbd");
    free(text);
    assert_int_equal(tok_token_id(t, "<Y>"), 101);
    assert_true(tok_is_special(t, 100));
    assert_false(tok_is_special(t, 50)); /* a hole in the ids */
    assert_int_equal(tok_decode(t, (int32_t[]){50}, 1, 0, &text, &n), Q_EINVAL);
    tok_free(t);
}

typedef void (*mutate_fn)(json_t *j);

static void expect_error(mutate_fn f, qstatus want, const char *needle1, const char *needle2) {
    json_t *j = base();
    f(j);
    write_json(j);
    json_decref(j);
    qtokenizer *t = (qtokenizer *)1;
    qstatus st = tok_load(path, &t);
    unlink(path);
    if (st != want) fail_msg("got %s (%s), want %s", q_status_name(st), q_lasterr(), q_status_name(want));
    assert_null(t);
    if (!strstr(q_lasterr(), needle1) || (needle2 && !strstr(q_lasterr(), needle2)))
        fail_msg("message \"%s\" lacks \"%s\"/\"%s\"", q_lasterr(), needle1, needle2 ? needle2 : "");
    if (!strstr(q_lasterr(), "/tmp/quill_tok_")) fail_msg("message \"%s\" does not name the file", q_lasterr());
}

static json_t *model(json_t *j) { return json_object_get(j, "model"); }
static json_t *split0(json_t *j) {
    return json_array_get(json_object_get(json_object_get(j, "pre_tokenizer"), "pretokenizers"), 0);
}

static void m_no_model(json_t *j) { json_object_del(j, "model"); }
static void m_unknown_merge(json_t *j) { json_array_append_new(json_object_get(model(j), "merges"), json_string("a z")); }
static void m_unmerged(json_t *j) { json_array_append_new(json_object_get(model(j), "merges"), json_string("c a")); }
static void m_merge_shape(json_t *j) { json_array_append_new(json_object_get(model(j), "merges"), json_string("abc")); }
static void m_bad_regex(json_t *j) { json_object_set_new(json_object_get(split0(j), "pattern"), "Regex", json_string("(ab")); }
static void m_lowercase(json_t *j) { json_object_set_new(j, "normalizer", json_pack("{s:s}", "type", "Lowercase")); }
static void m_wordpiece(json_t *j) { json_object_set_new(model(j), "type", json_string("WordPiece")); }
static void m_no_decoder(json_t *j) { json_object_set_new(j, "decoder", json_null()); }
static void m_bad_decoder(json_t *j) { json_object_set_new(j, "decoder", json_pack("{s:s}", "type", "Metaspace")); }
static void m_added_no_id(json_t *j) { json_object_del(json_array_get(json_object_get(j, "added_tokens"), 0), "id"); }
static void m_behavior(json_t *j) { json_object_set_new(split0(j), "behavior", json_string("Removed")); }
static void m_vocab_str(json_t *j) { json_object_set_new(json_object_get(model(j), "vocab"), "q", json_string("7")); }
static void m_dup_id(json_t *j) { json_object_set_new(json_object_get(model(j), "vocab"), "q", json_integer(3)); }
static void m_template(json_t *j) { json_object_set_new(j, "post_processor", json_pack("{s:s}", "type", "TemplateProcessing")); }
static void m_no_bytelevel(json_t *j) { json_object_set_new(j, "pre_tokenizer", json_null()); }
static void m_fallback(json_t *j) { json_object_set_new(model(j), "byte_fallback", json_true()); }

static void test_errors(void **state) {
    (void)state;
    expect_error(m_no_model, Q_EFORMAT, "model", NULL);
    expect_error(m_unknown_merge, Q_EFORMAT, "model.merges[4]", "\"z\" is not in model.vocab");
    expect_error(m_unmerged, Q_EFORMAT, "model.merges[4]", "merged token \"ca\"");
    expect_error(m_merge_shape, Q_EFORMAT, "model.merges[4]", NULL);
    expect_error(m_bad_regex, Q_EFORMAT, "pre_tokenizer.pretokenizers[0].pattern", "bad regex");
    expect_error(m_lowercase, Q_EUNSUPPORTED, "normalizer", "Lowercase");
    expect_error(m_wordpiece, Q_EUNSUPPORTED, "model.type", "WordPiece");
    expect_error(m_no_decoder, Q_EUNSUPPORTED, "decoder", NULL);
    expect_error(m_bad_decoder, Q_EUNSUPPORTED, "decoder", "Metaspace");
    expect_error(m_added_no_id, Q_EFORMAT, "added_tokens[0].id", NULL);
    expect_error(m_behavior, Q_EUNSUPPORTED, "behavior", "Removed");
    expect_error(m_vocab_str, Q_EFORMAT, "model.vocab[\"q\"]", NULL);
    expect_error(m_dup_id, Q_EFORMAT, "used twice", NULL);
    expect_error(m_template, Q_EUNSUPPORTED, "post_processor", "TemplateProcessing");
    expect_error(m_no_bytelevel, Q_EUNSUPPORTED, "pre_tokenizer", "ByteLevel");
    expect_error(m_fallback, Q_EUNSUPPORTED, "model.byte_fallback", NULL);
}

static void test_bad_files(void **state) {
    (void)state;
    qtokenizer *t;
    strcpy(path, "/tmp/quill_tok_XXXXXX");
    int fd = mkstemp(path);
    assert_true(write(fd, "{\"model\": [1, 2", 15) == 15);
    close(fd);
    assert_int_equal(tok_load(path, &t), Q_EFORMAT);
    assert_non_null(strstr(q_lasterr(), "bad JSON"));
    assert_non_null(strstr(q_lasterr(), path));
    unlink(path);
    assert_int_equal(tok_load("/nonexistent/quill/tokenizer.json", &t), Q_EIO);
    assert_non_null(strstr(q_lasterr(), "/nonexistent/quill/tokenizer.json"));
    assert_int_equal(tok_load("/", &t), Q_EIO); /* a directory without tokenizer.json */
    assert_non_null(strstr(q_lasterr(), "tokenizer.json"));
    tok_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synthetic_features),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
