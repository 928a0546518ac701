/* test_openai_response.c: SSE chunk formatting (same id and created, role first, finish_reason null
 * until the last, include_usage chunk, [DONE]), error bodies, UTF-8 repair. */
#include <jansson.h>
#include <string.h>

#include "harness.h"
#include "server/openai_response.h"

static json_t *event(const char *sse) {
    assert_true(!strncmp(sse, "data: ", 6));
    size_t n = strlen(sse);
    assert_true(n > 8 && !strcmp(sse + n - 2, "\n\n"));
    json_error_t e;
    json_t *j = json_loadb(sse + 6, n - 8, 0, &e);
    if (!j) fail_msg("not JSON: %s (%s)", sse, e.text);
    return j;
}

static void test_chat_chunks(void **st) {
    (void)st;
    oai_resp r;
    oai_resp_init(&r, 1, "tiny", 0x1234, 1700000000);
    r.include_usage = 1;
    sbuf a = {0}, b = {0}, c = {0}, d = {0};
    assert_int_equal(oai_sse_chunk(&a, &r, 1, "", 0, NULL, 0, NULL, NULL), 0);
    assert_int_equal(oai_sse_chunk(&b, &r, 0, "hé", 3, "why", 3, NULL, NULL), 0);
    oai_usage u = {.prompt_tokens = 3, .completion_tokens = 2, .hash = 0xabcdef};
    assert_int_equal(oai_sse_chunk(&c, &r, 0, NULL, 0, NULL, 0, "stop", &u), 0);
    assert_int_equal(oai_sse_usage(&d, &r, &u), 0);
    json_t *ja = event(a.p), *jb = event(b.p), *jc = event(c.p), *jd = event(d.p);
    json_t *all[] = {ja, jb, jc, jd};
    for (int i = 0; i < 4; i++) {
        assert_string_equal(json_string_value(json_object_get(all[i], "id")), "chatcmpl-0000000000001234");
        assert_int_equal(json_integer_value(json_object_get(all[i], "created")), 1700000000);
        assert_string_equal(json_string_value(json_object_get(all[i], "object")), "chat.completion.chunk");
    }
    json_t *c0 = json_array_get(json_object_get(ja, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(c0, "delta"), "role")), "assistant");
    assert_true(json_is_null(json_object_get(c0, "finish_reason")));
    assert_true(json_is_null(json_object_get(ja, "usage")));
    json_t *c1 = json_array_get(json_object_get(jb, "choices"), 0);
    json_t *d1 = json_object_get(c1, "delta");
    assert_null(json_object_get(d1, "role"));
    assert_string_equal(json_string_value(json_object_get(d1, "content")), "hé");
    assert_string_equal(json_string_value(json_object_get(d1, "reasoning_content")), "why");
    json_t *c2 = json_array_get(json_object_get(jc, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c2, "finish_reason")), "stop");
    assert_int_equal(json_array_size(json_object_get(jd, "choices")), 0);
    json_t *us = json_object_get(jd, "usage");
    assert_int_equal(json_integer_value(json_object_get(us, "total_tokens")), 5);
    assert_string_equal(json_string_value(json_object_get(json_object_get(jd, "quill"), "completion_hash")),
                        "0000000000abcdef");
    for (int i = 0; i < 4; i++) json_decref(all[i]);
    sbuf done = {0};
    assert_int_equal(oai_sse_done(&done), 0);
    assert_string_equal(done.p, "data: [DONE]\n\n");
    sbuf_free(&a), sbuf_free(&b), sbuf_free(&c), sbuf_free(&d), sbuf_free(&done);
}

static void test_completion_body(void **st) {
    (void)st;
    oai_resp r;
    oai_resp_init(&r, 0, "tiny", 1, 5);
    sbuf o = {0};
    oai_usage u = {.prompt_tokens = 1, .completion_tokens = 4};
    assert_int_equal(oai_response_body(&o, &r, "a\xff" "b", 3, NULL, 0, "length", &u), 0);
    json_t *j = json_loads(o.p, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "text_completion");
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "text")), "a\xEF\xBF\xBD" "b");
    assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "length");
    json_decref(j);
    sbuf_free(&o);
}

static void test_error_body(void **st) {
    (void)st;
    oai_error e;
    oai_fail(&e, 400, "max_tokens", "bad %d", 5);
    sbuf o = {0};
    assert_int_equal(oai_error_body(&o, &e), 0);
    json_t *j = json_loads(o.p, 0, NULL), *er = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(er, "message")), "bad 5");
    assert_string_equal(json_string_value(json_object_get(er, "type")), "invalid_request_error");
    assert_string_equal(json_string_value(json_object_get(er, "param")), "max_tokens");
    assert_true(json_is_null(json_object_get(er, "code")));
    json_decref(j);
    sbuf_free(&o);
}

static void test_utf8(void **st) {
    (void)st;
    assert_int_equal(oai_utf8_complete_prefix("ab\xF0\x9F", 4), 2);
    assert_int_equal(oai_utf8_complete_prefix("ab\xF0\x9F\xA4\x97", 6), 6);
    assert_int_equal(oai_utf8_complete_prefix("a\x80", 2), 2);
    sbuf o = {0};
    assert_int_equal(oai_utf8_sanitize(&o, "\xC0\x80x\xED\xA0\x80", 6), 0);
    assert_int_equal(o.n, 5 * 3 + 1); /* 5 invalid bytes -> 5 x U+FFFD, plus "x" */
    sbuf_free(&o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_chunks),
        cmocka_unit_test(test_completion_body),
        cmocka_unit_test(test_error_body),
        cmocka_unit_test(test_utf8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
