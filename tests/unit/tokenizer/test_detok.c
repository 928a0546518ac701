/* test_detok.c: the streaming detokenizer never emits part of a UTF-8 character, and its chunks add
 * up to tok_decode of the same ids (emoji fed token by token and byte by byte, invalid bytes,
 * skip_special, flush, reset). Also the UTF-8 classifier it rests on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tokenizer/detok.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

static qtokenizer *tok;

static int setup(void **state) {
    (void)state;
    return tok_load(QUILL_SHARED_DIR "/data/qwen35-tokenizer", &tok) ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    tok_free(tok);
    return 0;
}

static int chunk_is_whole_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        int r = tok_utf8_next((const uint8_t *)s + i, n - i);
        if (r <= 0) return 0;
        i += (size_t)r;
    }
    return 1;
}

/* Streams ids through a detok, checks every chunk, compares the sum with tok_decode. */
static void stream_and_check(const int32_t *ids, size_t n, int skip) {
    detok *d;
    assert_ok(detok_create(tok, skip, &d));
    char *acc = malloc(16 * n + 16);
    size_t got = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *c;
        size_t nc;
        if (i < n) assert_ok(detok_feed(d, ids[i], &c, &nc));
        else assert_ok(detok_flush(d, &c, &nc));
        assert_true(chunk_is_whole_utf8(c, nc));
        assert_int_equal(c[nc], '\0'); /* NUL-terminated */
        memcpy(acc + got, c, nc);
        got += nc;
    }
    char *want;
    size_t nw;
    assert_ok(tok_decode(tok, ids, n, skip, &want, &nw));
    assert_int_equal(got, nw);
    assert_memory_equal(acc, want, nw);
    free(want);
    free(acc);
    detok_destroy(d);
}

static void test_emoji_token_by_token(void **state) {
    (void)state;
    static const char s[] = "🤗 👨\u200d👩\u200d👧\u200d👦 👍🏽 \u2764\ufe0f 🇯🇵 你好 e\u0301 ok";
    int32_t *ids;
    size_t n;
    assert_ok(tok_encode(tok, s, strlen(s), 1, &ids, &n));
    stream_and_check(ids, n, 0);
    free(ids);
}

/* An id per byte: the worst case, every multi-byte character arrives in pieces. */
static int32_t byte_token(uint8_t b) {
    char u[4] = {0};
    int len = tok_utf8_put(tok_byte_to_cp(b), u);
    char key[5] = {0};
    memcpy(key, u, (size_t)len);
    return tok_token_id(tok, key);
}

static void test_byte_by_byte(void **state) {
    (void)state;
    static const char s[] = "a🤗b\xe4\xbd\xa0\xf0\x9f\x98\x80";
    size_t n = strlen(s);
    int32_t ids[64];
    for (size_t i = 0; i < n; i++) {
        ids[i] = byte_token((uint8_t)s[i]);
        assert_true(ids[i] >= 0);
    }
    detok *d;
    assert_ok(detok_create(tok, 0, &d));
    const char *c;
    size_t nc;
    assert_ok(detok_feed(d, ids[0], &c, &nc));
    assert_string_equal(c, "a");
    for (int i = 1; i < 4; i++) {
        assert_ok(detok_feed(d, ids[i], &c, &nc));
        assert_int_equal(nc, 0); /* held: F0, F0 9F, F0 9F A4 */
    }
    assert_ok(detok_feed(d, ids[4], &c, &nc));
    assert_string_equal(c, "🤗");
    detok_destroy(d);
    stream_and_check(ids, n, 0);
}

static void test_invalid_and_flush(void **state) {
    (void)state;
    /* F0 9F then 'x': the cut emoji can never complete -> U+FFFD at once, then "x". */
    int32_t ids[] = {byte_token(0xF0), byte_token(0x9F), byte_token('x'), byte_token(0xE4)};
    detok *d;
    assert_ok(detok_create(tok, 0, &d));
    const char *c;
    size_t nc;
    assert_ok(detok_feed(d, ids[0], &c, &nc));
    assert_ok(detok_feed(d, ids[1], &c, &nc));
    assert_int_equal(nc, 0);
    assert_ok(detok_feed(d, ids[2], &c, &nc));
    assert_string_equal(c, "\xef\xbf\xbdx");
    assert_ok(detok_feed(d, ids[3], &c, &nc));
    assert_int_equal(nc, 0);
    assert_ok(detok_flush(d, &c, &nc));
    assert_string_equal(c, "\xef\xbf\xbd");
    assert_ok(detok_flush(d, &c, &nc)); /* nothing left */
    assert_int_equal(nc, 0);
    /* reset drops held bytes. */
    assert_ok(detok_feed(d, ids[0], &c, &nc));
    detok_reset(d);
    assert_ok(detok_feed(d, ids[2], &c, &nc));
    assert_string_equal(c, "x");
    /* A bad id changes nothing. */
    assert_int_equal(detok_feed(d, 1 << 29, &c, &nc), Q_EINVAL);
    detok_destroy(d);
    stream_and_check(ids, 4, 0);
}

static void test_skip_special(void **state) {
    (void)state;
    static const char s[] = "<|im_start|>assistant\n<think>\nhi 🤗</think><|im_end|>";
    int32_t *ids;
    size_t n;
    assert_ok(tok_encode(tok, s, strlen(s), 1, &ids, &n));
    stream_and_check(ids, n, 1);
    stream_and_check(ids, n, 0);
    free(ids);
    detok_destroy(NULL);
}

static void test_utf8_classifier(void **state) {
    (void)state;
    assert_int_equal(tok_utf8_next((const uint8_t *)"a", 1), 1);
    assert_int_equal(tok_utf8_next((const uint8_t *)"\xc3\xa9", 2), 2);
    assert_int_equal(tok_utf8_next((const uint8_t *)"\xc3", 1), 0);
    assert_int_equal(tok_utf8_next((const uint8_t *)"\xf0\x9f\x98", 3), 0);
    assert_int_equal(tok_utf8_next((const uint8_t *)"\xf0\x9f\x98\x80", 4), 4);
    assert_int_equal(tok_utf8_next((const uint8_t *)"\x80", 1), -1);
    assert_int_equal(tok_utf8_next((const uint8_t *)"\xc0\x80", 2), -1);     /* C0 never leads */
    assert_int_equal(tok_utf8_next((const uint8_t *)"\xe0\x80\x80", 3), -1); /* overlong */
    assert_int_equal(tok_utf8_next((const uint8_t *)"\xed\xa0\x80", 3), -1); /* surrogate */
    assert_int_equal(tok_utf8_next((const uint8_t *)"\xf0\x9f\x41", 3), -2); /* maximal subpart F0 9F */
    assert_int_equal(tok_utf8_next((const uint8_t *)"\xf4\x90\x80\x80", 4), -1);
    char *o;
    size_t no, used;
    assert_ok(tok_utf8_lossy((const uint8_t *)"ab\xe4\xbd", 4, 0, &o, &no, &used));
    assert_string_equal(o, "ab");
    assert_int_equal(used, 2);
    free(o);
    assert_ok(tok_utf8_lossy((const uint8_t *)"ab\xe4\xbd", 4, 1, &o, &no, &used));
    assert_string_equal(o, "ab\xef\xbf\xbd");
    free(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_emoji_token_by_token), cmocka_unit_test(test_byte_by_byte),
        cmocka_unit_test(test_invalid_and_flush),    cmocka_unit_test(test_skip_special),
        cmocka_unit_test(test_utf8_classifier),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
