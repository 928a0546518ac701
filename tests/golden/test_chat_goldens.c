/* test_chat_goldens.c: chat_render against transformers' apply_chat_template, byte for byte, for
 * every case x template in tests/fixtures/chat/goldens.json (tools/goldens/make_chat_goldens.py).
 * A case the template rejects in Python must fail here too. A missing fixture fails the test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tokenizer/chat.h"
#include "util/fileio.h"

static chat_template *load_template(json_t *desc) {
    char path[4096];
    chat_template *t = NULL;
    json_t *file = json_object_get(json_object_get(desc, "source"), "file");
    json_t *dir = json_object_get(json_object_get(desc, "source"), "tokenizer_dir");
    if (json_is_string(file)) {
        char *src;
        size_t n;
        assert_ok(q_path_join(path, sizeof path, QUILL_SHARED_DIR, json_string_value(file)));
        assert_ok(q_read_file(path, &src, &n));
        assert_ok(chat_template_from_source(src, &t));
        free(src);
    } else {
        assert_true(json_is_string(dir));
        assert_ok(q_path_join(path, sizeof path, QUILL_SHARED_DIR, json_string_value(dir)));
        assert_ok(chat_template_load_dir(path, &t));
    }
    return t;
}

static void report_diff(const char *tmpl, const char *name, const char *want, const char *got) {
    size_t i = 0;
    while (want[i] && want[i] == got[i]) i++;
    size_t from = i > 60 ? i - 60 : 0;
    fprintf(stderr, "MISMATCH %s / %s at byte %zu\n  want: %.120s\n  got:  %.120s\n", tmpl, name, i,
            want + from, got + from);
}

static void test_chat_goldens(void **state) {
    (void)state;
    char path[4096];
    json_error_t je;
    assert_ok(q_path_join(path, sizeof path, QUILL_FIXTURES, "chat/goldens.json"));
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc) fail_msg("%s: %s (run tools/goldens/make_chat_goldens.py)", path, je.text);
    json_t *templates = json_object_get(doc, "templates"), *cases = json_object_get(doc, "cases");
    assert_true(json_array_size(templates) >= 5);
    assert_true(json_array_size(cases) >= 30);
    int n_fail = 0, n_ok = 0;
    size_t ti;
    json_t *td;
    json_array_foreach(templates, ti, td) {
        const char *tname = json_string_value(json_object_get(td, "name"));
        chat_template *t = load_template(td);
        size_t ci;
        json_t *c;
        json_array_foreach(cases, ci, c) {
            const char *cname = json_string_value(json_object_get(c, "name"));
            json_t *exp = json_object_get(json_object_get(c, "expected"), tname);
            assert_non_null(exp);
            char *out = NULL;
            qstatus rc = chat_render(t, json_object_get(c, "request"), &out);
            json_t *text = json_object_get(exp, "text");
            if (json_is_string(text)) {
                if (rc != Q_OK) {
                    fprintf(stderr, "FAIL %s / %s: %s: %s\n", tname, cname, q_status_name(rc), q_lasterr());
                    n_fail++;
                } else if (strlen(out) != json_string_length(text) || strcmp(out, json_string_value(text))) {
                    report_diff(tname, cname, json_string_value(text), out);
                    n_fail++;
                } else {
                    n_ok++;
                }
            } else if (rc == Q_OK) {
                fprintf(stderr, "FAIL %s / %s: expected an error (%s), rendered\n", tname, cname,
                        json_string_value(json_object_get(exp, "error")));
                n_fail++;
            } else {
                /* the template's own raise_exception: the message must match too */
                const char *err = json_string_value(json_object_get(exp, "error"));
                const char *pfx = "TemplateError: ";
                if (err && !strncmp(err, pfx, strlen(pfx)) && strcmp(err + strlen(pfx), q_lasterr())) {
                    fprintf(stderr, "FAIL %s / %s: error [%s], expected [%s]\n", tname, cname, q_lasterr(), err);
                    n_fail++;
                } else {
                    n_ok++;
                }
            }
            free(out);
        }
        chat_template_free(t);
    }
    json_decref(doc);
    fprintf(stderr, "chat goldens: %d ok, %d failed\n", n_ok, n_fail);
    assert_int_equal(n_fail, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_chat_goldens)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
