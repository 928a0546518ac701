/* test_reply.c: a reply's ids -> text -> stop strings -> reasoning, with the bundled model's tokenizer:
 * a stop string spread over several ids stops at the id that completes it; an end id ends the reply
 * without being counted; the think split works on ids fed one at a time. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "server/reply.h"
#include "tokenizer/tokenizer.h"

static qtokenizer *tok;

static int setup(void **st) {
    (void)st;
    return tok_load(QUILL_SOURCE_DIR "/models/qwen35-tiny", &tok) == Q_OK ? 0 : -1;
}

static int teardown(void **st) {
    (void)st;
    tok_free(tok);
    return 0;
}

static int32_t *encode(const char *text, int *n) {
    int32_t *ids = NULL;
    size_t nn = 0;
    assert_ok(tok_encode(tok, text, strlen(text), 1, &ids, &nn));
    *n = (int)nn;
    return ids;
}

static void test_stop_over_ids(void **st) {
    (void)st;
    int n;
    int32_t *ids = encode("hello world, STOPPED here and more", &n);
    const char *stops[] = {"STOP"};
    qreply r;
    assert_ok(reply_init(&r, tok, stops, 1, 0, NULL, 0));
    int over = 0, fed = 0;
    for (; fed < n && !over; fed++) over = reply_feed(&r, ids + fed, 1);
    assert_int_equal(over, 1);
    assert_true(fed < n);
    assert_int_equal(r.n_ids, fed);
    assert_int_equal(reply_finish(&r), 0);
    assert_string_equal(r.content.p, "hello world, ");
    assert_int_equal(reply_feed(&r, ids, n), 1); /* later ids are ignored */
    assert_int_equal(r.n_ids, fed);
    reply_fini(&r);
    free(ids);
}

static void test_end_id(void **st) {
    (void)st;
    int n;
    int32_t *ids = encode("short answer<|im_end|>ignored", &n);
    int32_t end = tok_token_id(tok, "<|im_end|>");
    assert_true(end >= 0);
    qreply r;
    assert_ok(reply_init(&r, tok, NULL, 0, 0, &end, 1));
    assert_int_equal(reply_feed(&r, ids, n), 1);
    assert_int_equal(reply_finish(&r), 0);
    assert_string_equal(r.content.p, "short answer");
    int k;
    int32_t *head = encode("short answer", &k);
    assert_int_equal(r.n_ids, k);
    free(head);
    reply_fini(&r);
    free(ids);
}

static void test_think(void **st) {
    (void)st;
    int n;
    int32_t *ids = encode("step one</think>\n\nThe answer.", &n);
    qreply r;
    assert_ok(reply_init(&r, tok, NULL, 0, 1, NULL, 0));
    for (int i = 0; i < n; i++) assert_int_equal(reply_feed(&r, ids + i, 1), 0);
    assert_int_equal(reply_finish(&r), 0);
    assert_string_equal(r.reasoning.p, "step one");
    assert_string_equal(r.content.p, "The answer.");
    assert_int_equal(r.n_ids, n);
    reply_fini(&r);
    free(ids);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_over_ids),
        cmocka_unit_test(test_end_id),
        cmocka_unit_test(test_think),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
