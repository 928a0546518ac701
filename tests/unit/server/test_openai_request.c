/* test_openai_request.c: request validation: every malformed or wrongly typed field is a 400 naming the
 * field; good requests fill the struct. */
#include <string.h>

#include "harness.h"
#include "server/openai_request.h"

static void expect_error(const char *body, int is_chat, const char *param) {
    oai_request r;
    oai_error e;
    if (oai_request_parse(body, strlen(body), is_chat, &r, &e) == 0) fail_msg("accepted: %s", body);
    assert_int_equal(e.http, 400);
    if (strcmp(e.param, param)) fail_msg("%s: param '%s', expected '%s' (%s)", body, e.param, param, e.message);
    assert_true(e.message[0] != 0);
}

static void test_bad_bodies(void **st) {
    (void)st;
    expect_error("{bad", 1, "");
    expect_error("", 1, "");
    expect_error("[1,2]", 1, "");
    expect_error("{\"a\":1,\"a\":2}", 1, "");
    expect_error("{}", 1, "messages");
    expect_error("{\"messages\":{}}", 1, "messages");
    expect_error("{\"messages\":[]}", 1, "messages");
    expect_error("{\"messages\":[1]}", 1, "messages[0]");
    expect_error("{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 1, "messages[0].role");
    expect_error("{\"messages\":[{\"role\":5,\"content\":\"x\"}]}", 1, "messages[0].role");
    expect_error("{\"messages\":[{\"role\":\"user\"}]}", 1, "messages[0].content");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 1,
                 "messages[0].content");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":7}]}", 1, "messages[0].content");
}

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static void test_bad_fields(void **st) {
    (void)st;
    expect_error("{" MSG ",\"max_tokens\":-1}", 1, "max_tokens");
    expect_error("{" MSG ",\"max_tokens\":0}", 1, "max_tokens");
    expect_error("{" MSG ",\"max_tokens\":\"5\"}", 1, "max_tokens");
    expect_error("{" MSG ",\"max_tokens\":1.5}", 1, "max_tokens");
    expect_error("{" MSG ",\"max_tokens\":1e300}", 1, "max_tokens");
    expect_error("{" MSG ",\"max_completion_tokens\":true}", 1, "max_completion_tokens");
    expect_error("{" MSG ",\"temperature\":-0.5}", 1, "temperature");
    expect_error("{" MSG ",\"temperature\":\"hot\"}", 1, "temperature");
    expect_error("{" MSG ",\"top_p\":0}", 1, "top_p");
    expect_error("{" MSG ",\"top_p\":1.5}", 1, "top_p");
    expect_error("{" MSG ",\"top_k\":-2}", 1, "top_k");
    expect_error("{" MSG ",\"min_p\":2}", 1, "min_p");
    expect_error("{" MSG ",\"seed\":1.5}", 1, "seed");
    expect_error("{" MSG ",\"stop\":5}", 1, "stop");
    expect_error("{" MSG ",\"stop\":[\"a\",3]}", 1, "stop");
    expect_error("{" MSG ",\"stream\":\"yes\"}", 1, "stream");
    expect_error("{" MSG ",\"stream_options\":[]}", 1, "stream_options");
    expect_error("{" MSG ",\"stream_options\":{\"include_usage\":1}}", 1, "stream_options.include_usage");
    expect_error("{" MSG ",\"n\":2}", 1, "n");
    expect_error("{" MSG ",\"ignore_eos\":1}", 1, "ignore_eos");
    expect_error("{" MSG ",\"draft\":\"no\"}", 1, "draft");
    expect_error("{" MSG ",\"chat_template_kwargs\":[]}", 1, "chat_template_kwargs");
    expect_error("{" MSG ",\"logprobs\":true}", 1, "logprobs");
    expect_error("{" MSG ",\"model\":3}", 1, "model");
}

static void test_prompts(void **st) {
    (void)st;
    expect_error("{}", 0, "prompt");
    expect_error("{\"prompt\":\"\"}", 0, "prompt");
    expect_error("{\"prompt\":[]}", 0, "prompt");
    expect_error("{\"prompt\":5}", 0, "prompt");
    expect_error("{\"prompt\":[1,-1]}", 0, "prompt");
    expect_error("{\"prompt\":[1,\"a\"]}", 0, "prompt");
    expect_error("{\"prompt\":[1,3000000000]}", 0, "prompt");
    expect_error("{\"prompt\":[\"a\",\"b\"]}", 0, "prompt");
    expect_error("{\"prompt\":[[1],[2]]}", 0, "prompt");
    expect_error("{\"prompt\":\"x\",\"echo\":true}", 0, "echo");
    expect_error("{\"prompt\":\"x\",\"best_of\":2}", 0, "best_of");

    oai_request r;
    oai_error e;
    const char *b = "{\"prompt\":[[5,6,7]],\"max_tokens\":9}";
    assert_int_equal(oai_request_parse(b, strlen(b), 0, &r, &e), 0);
    assert_int_equal(r.n_prompt_ids, 3);
    assert_int_equal(r.prompt_ids[2], 7);
    assert_int_equal(r.max_tokens, 9);
    oai_request_fini(&r);
    b = "{\"prompt\":[\"hello\"]}";
    assert_int_equal(oai_request_parse(b, strlen(b), 0, &r, &e), 0);
    assert_int_equal(r.prompt_len, 5);
    assert_memory_equal(r.prompt_text, "hello", 5);
    assert_int_equal(r.max_tokens, -1);
    oai_request_fini(&r);
}

static void test_good_chat(void **st) {
    (void)st;
    const char *b = "{\"model\":\"m\"," MSG ",\"max_tokens\":3,\"max_completion_tokens\":4,\"temperature\":0,"
                    "\"top_p\":0.5,\"top_k\":-1,\"min_p\":0.1,\"seed\":-7,\"stop\":[\"a\",\"\",\"bc\"],"
                    "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"ignore_eos\":true,\"n\":1,"
                    "\"draft\":false,\"chat_template_kwargs\":{\"enable_thinking\":false},\"user\":\"x\"}";
    oai_request r;
    oai_error e;
    if (oai_request_parse(b, strlen(b), 1, &r, &e)) fail_msg("%s: %s", e.param, e.message);
    assert_string_equal(r.model, "m");
    assert_int_equal(r.max_tokens, 4);
    assert_true(r.sampling.temperature == 0.0f);
    assert_true(r.sampling.top_p == 0.5f);
    assert_int_equal(r.sampling.top_k, 0);
    assert_int_equal(r.has_seed, 1);
    assert_true(r.sampling.seed == (uint64_t)-7);
    assert_int_equal(r.n_stop, 2);
    assert_string_equal(r.stop[1], "bc");
    assert_int_equal(r.stream, 1);
    assert_int_equal(r.include_usage, 1);
    assert_int_equal(r.ignore_eos, 1);
    assert_int_equal(r.draft, 0);
    assert_non_null(r.chat_template_kwargs);
    assert_int_equal(json_array_size(r.messages), 1);
    oai_request_fini(&r);

    b = "{" MSG ",\"stop\":\"###\"}";
    assert_int_equal(oai_request_parse(b, strlen(b), 1, &r, &e), 0);
    assert_int_equal(r.n_stop, 1);
    assert_true(r.sampling.temperature == 1.0f); /* OpenAI's default */
    assert_int_equal(r.has_seed, 0);
    assert_int_equal(r.stream, 0);
    oai_request_fini(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_bodies),
        cmocka_unit_test(test_bad_fields),
        cmocka_unit_test(test_prompts),
        cmocka_unit_test(test_good_chat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
