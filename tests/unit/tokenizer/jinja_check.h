/* jinja_check.h: what the Jinja tests (test_jinja.c, test_jinja_filters.c) share: render a template
 * with JSON variables and compare the output with the expected string. Include once per test program,
 * after harness.h. */
#ifndef QUILL_JINJA_CHECK_H
#define QUILL_JINJA_CHECK_H

#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja.h"

/* Renders src with vars (JSON text, or NULL) and compares with want. */
static void check(const char *src, const char *vars, const char *want) {
    jinja_tmpl *t;
    json_error_t je;
    json_t *v = vars ? json_loads(vars, 0, &je) : NULL;
    char *out;
    size_t n;
    if (vars && !v) fail_msg("bad test JSON: %s", je.text);
    assert_ok(jinja_compile(src, strlen(src), &t));
    assert_ok(jinja_render(t, v, &out, &n));
    if (strcmp(out, want)) fail_msg("template %s\n want [%s]\n got  [%s]", src, want, out);
    assert_int_equal(n, strlen(want));
    free(out);
    jinja_free(t);
    json_decref(v);
}

#endif
