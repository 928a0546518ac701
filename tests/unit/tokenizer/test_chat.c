/* test_chat.c: the chat API (chat.h): loading templates from checkpoint directories, request
 * validation errors naming fields, the normalisation (string tool-call arguments, content format,
 * add_generation_prompt default, chat_template_kwargs), and chat_prompt_ids through the real
 * Qwen3.5 tokenizer. Byte-exact renderings against transformers: tests/golden/test_chat_goldens.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "tokenizer/chat.h"
#include "util/fileio.h"

#define QWEN35_DIR QUILL_SHARED_DIR "/data/qwen35-tokenizer"
#define QWEN3_TEMPLATE QUILL_SHARED_DIR "/data/chat-templates/Qwen-Qwen3-0.6B.jinja"

static chat_template *from_file(const char *path) {
    char *src;
    size_t n;
    chat_template *t;
    assert_ok(q_read_file(path, &src, &n));
    assert_ok(chat_template_from_source(src, &t));
    free(src);
    return t;
}

static char *render(const chat_template *t, const char *req_json) {
    json_error_t je;
    json_t *req = json_loads(req_json, 0, &je);
    char *out = NULL;
    if (!req) fail_msg("bad test JSON: %s", je.text);
    assert_ok(chat_render(t, req, &out));
    json_decref(req);
    return out;
}

static void render_err(const chat_template *t, const char *req_json, qstatus st, const char *needle) {
    json_t *req = json_loads(req_json, 0, NULL);
    char *out = NULL;
    qstatus rc = chat_render(t, req, &out);
    if (rc != st) fail_msg("%s: want %s, got %s (%s)", req_json, q_status_name(st), q_status_name(rc), q_lasterr());
    if (!strstr(q_lasterr(), needle)) fail_msg("%s: message [%s] lacks [%s]", req_json, q_lasterr(), needle);
    free(out);
    json_decref(req);
}

static void test_load_dir(void **state) {
    (void)state;
    chat_template *t;
    assert_ok(chat_template_load_dir(QWEN35_DIR, &t));
    char *out = render(t, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}");
    /* the tokenizer_config.json variant opens thinking only when enable_thinking is true */
    assert_string_equal(out, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    free(out);
    out = render(t, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], "
                    "\"chat_template_kwargs\": {\"enable_thinking\": true}}");
    assert_string_equal(out, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n");
    free(out);
    chat_template_free(t);

    /* chat_template.jinja wins over tokenizer_config.json; a list of named templates gives "default";
     * eos_token as {content: ...} reaches the template */
    char dir[] = "/tmp/quill_chat_XXXXXX", path[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"eos_token\": {\"content\": \"<E>\"}, \"bos_token\": null, \"chat_template\": "
          "[{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": \"default\", \"template\": "
          "\"D{{ eos_token }}{{ bos_token is defined }}\"}]}", f);
    fclose(f);
    assert_ok(chat_template_load_dir(dir, &t));
    out = render(t, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}");
    assert_string_equal(out, "D<E>False");
    free(out);
    chat_template_free(t);
    char jpath[256];
    snprintf(jpath, sizeof jpath, "%s/chat_template.jinja", dir);
    f = fopen(jpath, "w");
    assert_non_null(f);
    fputs("J{{ messages|length }}\n", f);
    fclose(f);
    assert_ok(chat_template_load_dir(dir, &t));
    out = render(t, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}");
    assert_string_equal(out, "J1");
    free(out);
    chat_template_free(t);
    unlink(jpath);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"eos_token\": \"<E>\"}", f);
    fclose(f);
    assert_int_equal(chat_template_load_dir(dir, &t), Q_EFORMAT);
    unlink(path);
    rmdir(dir);
    chat_template_free(NULL);
}

static void test_validation(void **state) {
    (void)state;
    chat_template *t = from_file(QWEN3_TEMPLATE);
    render_err(t, "{}", Q_EINVAL, "messages");
    render_err(t, "{\"messages\": []}", Q_EINVAL, "messages: must be a non-empty list");
    render_err(t, "{\"messages\": [1]}", Q_EINVAL, "messages[0]: must be an object");
    render_err(t, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\"}, {\"role\": \"bot\"}]}",
               Q_EINVAL, "messages[2].role");
    render_err(t, "{\"messages\": [{\"content\": \"a\"}]}", Q_EINVAL, "messages[0].role");
    render_err(t, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", Q_EINVAL,
               "messages[0].content[0].type");
    render_err(t, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", Q_EINVAL, "messages[0].content");
    render_err(t, "{\"messages\": [{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"function\": "
                  "{\"name\": \"f\", \"arguments\": \"{bad\"}}]}]}",
               Q_EINVAL, "messages[0].tool_calls[0].function.arguments");
    render_err(t, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"add_generation_prompt\": 1}", Q_EINVAL,
               "add_generation_prompt");
    render_err(t, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"chat_template_kwargs\": []}", Q_EINVAL,
               "chat_template_kwargs");
    render_err(t, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": {}}", Q_EINVAL, "tools");
    chat_template_free(t);
}

static void test_normalisation(void **state) {
    (void)state;
    chat_template *q3 = from_file(QWEN3_TEMPLATE), *q35;
    assert_ok(chat_template_load_dir(QWEN35_DIR, &q35));
    /* add_generation_prompt defaults to true; false is honoured */
    char *out = render(q3, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}");
    assert_string_equal(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    free(out);
    out = render(q3, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"add_generation_prompt\": false}");
    assert_string_equal(out, "<|im_start|>user\nHi<|im_end|>\n");
    free(out);
    /* Qwen3 concatenates content: text parts are joined with \n for it */
    out = render(q3, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, "
                     "{\"type\": \"text\", \"text\": \"b\"}]}], \"add_generation_prompt\": false}");
    assert_string_equal(out, "<|im_start|>user\na\nb<|im_end|>\n");
    free(out);
    /* Qwen3.5 loops over content parts itself */
    out = render(q35, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, "
                      "{\"type\": \"text\", \"text\": \"b\"}]}], \"add_generation_prompt\": false}");
    assert_string_equal(out, "<|im_start|>user\nab<|im_end|>\n");
    free(out);
    /* string tool-call arguments are parsed, so the template can iterate them */
    out = render(q35, "{\"messages\": [{\"role\": \"user\", \"content\": \"w?\"}, {\"role\": \"assistant\", "
                      "\"content\": null, \"tool_calls\": [{\"id\": \"1\", \"type\": \"function\", \"function\": "
                      "{\"name\": \"get\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\", \\\"n\\\": [1, 2]}\"}}]}], "
                      "\"add_generation_prompt\": false}");
    assert_string_equal(out, "<|im_start|>user\nw?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
                             "<tool_call>\n<function=get>\n<parameter=city>\nParis\n</parameter>\n"
                             "<parameter=n>\n[1, 2]\n</parameter>\n</function>\n</tool_call><|im_end|>\n");
    free(out);
    /* the template's own errors come back as Q_EINVAL with its message */
    render_err(q35, "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}]}", Q_EINVAL,
               "No user query found in messages.");
    chat_template_free(q3);
    chat_template_free(q35);
}

static void test_prompt_ids(void **state) {
    (void)state;
    qtokenizer *tok;
    chat_template *t;
    assert_ok(tok_load(QWEN35_DIR, &tok));
    assert_ok(chat_template_load_dir(QWEN35_DIR, &t));
    json_t *req = json_loads("{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}", 0, NULL);
    int32_t *ids;
    size_t n;
    assert_ok(chat_prompt_ids(tok, t, req, &ids, &n));
    assert_true(n > 4);
    assert_int_equal(ids[0], tok_token_id(tok, "<|im_start|>"));
    char *text, *want;
    size_t tn;
    assert_ok(tok_decode(tok, ids, n, 0, &text, &tn));
    assert_ok(chat_render(t, req, &want));
    assert_string_equal(text, want);
    free(text);
    free(want);
    free(ids);
    json_decref(req);
    chat_template_free(t);
    tok_free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_dir),      cmocka_unit_test(test_validation),
        cmocka_unit_test(test_normalisation), cmocka_unit_test(test_prompt_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
