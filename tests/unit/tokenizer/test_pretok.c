/* test_pretok.c: the split regex through PCRE2 cuts text where HF's Oniguruma does. Expected pieces
 * are tokenizers 0.23.2's pre_tokenize_str on the Qwen3.5 tokenizer.json (run on the GPU machine,
 * 2026-11-30): U+0085 is whitespace, U+180E is not (PCRE2's own UCP \s would take it). */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tokenizer/tok_internal.h"

typedef struct pieces {
    char buf[256];
    size_t n;
} pieces;

/* Joins the pieces with '|' so one string comparison checks them all. */
static qstatus collect(void *ctx, const char *s, size_t n) {
    pieces *p = ctx;
    if (p->n) p->buf[p->n++] = '|';
    memcpy(p->buf + p->n, s, n);
    p->n += n;
    p->buf[p->n] = '\0';
    return Q_OK;
}

static void expect_split(const qtokenizer *tok, const char *text, const char *want) {
    pcre2_match_data *md[TOK_MAX_SPLITS] = {0};
    for (int i = 0; i < tok->n_split; i++) md[i] = pcre2_match_data_create_from_pattern(tok->split_re[i], NULL);
    pieces p = {.n = 0};
    p.buf[0] = '\0';
    assert_ok(tok_pretokenize(tok, md, text, strlen(text), collect, &p));
    assert_string_equal(p.buf, want);
    for (int i = 0; i < tok->n_split; i++) pcre2_match_data_free(md[i]);
}

static void test_splits(void **state) {
    (void)state;
    qtokenizer *tok;
    assert_ok(tok_load(QUILL_SHARED_DIR "/data/qwen35-tokenizer", &tok));
    expect_split(tok, "!\xe1\xa0\x8e", "!\xe1\xa0\x8e");                 /* "!\u180e": one piece */
    expect_split(tok, "!\xc2\x85", "!|\xc2\x85");                        /* "!\u0085": NEL is \s */
    expect_split(tok, "x!\xc2\x85y", "x|!|\xc2\x85y");
    expect_split(tok, "a\xe1\xa0\x8e\xe1\xa0\x8e b", "a|\xe1\xa0\x8e\xe1\xa0\x8e| b");
    expect_split(tok, "Hello, world!  It'S 123", "Hello|,| world|!| | It|'S| |1|2|3");
    expect_split(tok, "a  \n\n b\r\n", "a|  \n\n| b|\r\n"); /* \s*[\r\n]+ */
    tok_free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_splits)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
