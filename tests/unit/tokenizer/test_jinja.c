/* test_jinja.c: the Jinja interpreter's language: expressions, whitespace control, loops and
 * scoping, macros, errors naming lines, hostile nesting, and a hand-checked rendering of the
 * Qwen3.5 template. Expected strings were checked against jinja2 3.1 with transformers' settings.
 * Filters, tests and methods: test_jinja_filters.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "jinja_check.h"
#include "tokenizer/jinja.h"
#include "util/fileio.h"

/* Compiles and renders; expects status st with `needle` in the message. */
static void check_err(const char *src, const char *vars, qstatus st, const char *needle) {
    jinja_tmpl *t = NULL;
    json_t *v = vars ? json_loads(vars, 0, NULL) : NULL;
    char *out = NULL;
    size_t n;
    qstatus rc = jinja_compile(src, strlen(src), &t);
    if (rc == Q_OK) rc = jinja_render(t, v, &out, &n);
    if (rc != st) fail_msg("template %s: want %s, got %s (%s)", src, q_status_name(st), q_status_name(rc), q_lasterr());
    if (!strstr(q_lasterr(), needle)) fail_msg("template %s: message [%s] lacks [%s]", src, q_lasterr(), needle);
    free(out);
    jinja_free(t);
    json_decref(v);
}

static void test_expressions(void **state) {
    (void)state;
    check("{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 / 2 }}|{{ 2 ** 10 }}", NULL,
          "7|9|3|-4|2|3.5|1024");
    check("{{ 0.1 + 0.2 }}|{{ 1e20 }}|{{ 1e-5 }}|{{ 100.0 }}|{{ 1/3 }}", NULL,
          "0.30000000000000004|1e+20|1e-05|100.0|0.3333333333333333");
    check("{{ 'a' ~ 1 ~ none ~ true ~ undefined_thing }}|{{ 'x' + 'y' }}|{{ 'ab' * 2 }}", NULL, "a1NoneTrue|xy|abab");
    check("{{ 1 < 2 < 3 }}{{ 'a' < 'b' }}{{ 1 == 1.0 }}{{ true == 1 }}{{ [1, 'a'] == [1, 'a'] }}{{ 2 != 2 }}", NULL,
          "TrueTrueTrueTrueTrueFalse");
    check("{{ 'a' in 'cat' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 'z' not in {'k': 1} }}{{ 'x' in nothing }}", NULL,
          "TrueTrueTrueTrueFalse");
    check("{{ none or 'd' }}|{{ 0 and 1 }}|{{ 'y' if 1 > 0 else 'n' }}|{{ 'y' if false }}|{{ not 0 }}", NULL,
          "d|0|y||True");
    check("{{ m|length - 1 }}|{{ '<' + s | trim + '>' }}|{{ -2|abs }}", "{\"m\": [1, 2, 3], \"s\": \"  x  \"}",
          "2|<x>|2");
    check("{{ l[0] }}{{ l[-1] }}{{ l[5] is defined }}{{ l[1:] }}{{ l[::-1] }}{{ l[::2] }}", "{\"l\": [1, 2, 3]}",
          "13False[2, 3][3, 2, 1][1, 3]");
    check("{{ s[1] }}|{{ s[::-1] }}|{{ s[1:3] }}", "{\"s\": \"h\\u00e9llo\"}", "\xc3\xa9|oll\xc3\xa9h|\xc3\xa9l");
    check("{{ d.a }}|{{ d['b'] }}|{{ d.c.d }}|{{ d.zz is defined }}|{{ d.items()|list }}",
          "{\"d\": {\"a\": 1, \"b\": \"two\", \"c\": {\"d\": null}}}",
          "1|two|None|False|[('a', 1), ('b', 'two'), ('c', {'d': None})]");
    check("{{ [1, 'a', none, true, 2.5] }}|{{ {'k': 'v', 'n': [1]} }}|{{ (1, 2) }}|{{ (1,) }}", NULL,
          "[1, 'a', None, True, 2.5]|{'k': 'v', 'n': [1]}|(1, 2)|(1,)");
    check("{{ \"it's\" }}|{{ [\"it's\", 'say \"hi\"', 'tab\\t', 'nl\\n'] }}", NULL,
          "it's|[\"it's\", 'say \"hi\"', 'tab\\t', 'nl\\n']");
    check("{{ 'esc\\x41\\u00e9\\n' }}|{{ \"a\" 'b' }}", NULL, "escA\xc3\xa9\n|ab");
    check("{{ x }}|{{ none }}|{{ true }}|{{ 3 }}", NULL, "|None|True|3");
}

static void test_whitespace(void **state) {
    (void)state;
    check("  {% if true %}\n  x\n  {% endif %}\n", NULL, "  x\n");
    check("a  {% if true %}b{% endif %}  c\n", NULL, "a  b  c");
    check("  {%+ if true %}x{% endif %}", NULL, "  x");
    check("{% if true +%}\nx{% endif %}", NULL, "\nx");
    check("  {{- 1 -}}  \n x", NULL, "1x");
    check("x {#- c -#} y\n  {# c #}\n  z", NULL, "xy\n  z");
    check("line1\r\nline2\r\n{% if true %}\r\nz\r\n{% endif %}\r\n", NULL, "line1\nline2\nz\n");
    check("{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n", NULL, "  1\n  2\n");
    check("{%- for i in [1, 2] -%}\n  {{ i }}\n{%- endfor -%}\n", NULL, "12");
    check("{{ '{%' }} {{ {'a': {'b': 1}} }}", NULL, "{% {'a': {'b': 1}}");
    check("x\n\n", NULL, "x\n");
}

static void test_loops_and_scope(void **state) {
    (void)state;
    const char *msgs = "{\"m\": [{\"role\": \"user\"}, {\"role\": \"assistant\"}, {\"role\": \"tool\"}]}";
    check("{% for x in m %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
          "{{ loop.revindex }}{{ loop.previtem.role if loop.previtem else '-' }}"
          "{{ loop.nextitem.role if loop.nextitem is defined else '-' }};{% endfor %}",
          msgs, "01TrueFalse33-assistant;12FalseFalse32usertool;23FalseTrue31assistant-;");
    check("{% for x in [0, 1, 2, 3] if x %}{{ x }}{{ loop.last }}{% endfor %}", NULL, "1False2False3True");
    check("{% for x in [] %}{{ x }}{% else %}empty{% endfor %}", NULL, "empty");
    check("{% for x in range(6) %}{% if x == 4 %}{% break %}{% endif %}{% if x == 1 %}{% continue %}{% endif %}"
          "{{ x }}{% endfor %}", NULL, "023");
    check("{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
          "{\"d\": {\"z\": 1, \"a\": 2}}", "z=1;a=2;za");
    check("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", NULL, "21");
    check("{% for i in [1, 2] %}{% if i == 2 %}{{ y is defined }}{% endif %}{% set y = i %}{% endfor %}", NULL,
          "False");
    check("{% set ns = namespace(c=0, s='') %}{% for i in [1, 2, 3] %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }}",
          NULL, "6");
    check("{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set blk %}B{{ a }}{% endset %}{{ blk }}", NULL, "12B1");
    check("{% for x in 'ab' %}{{ x }}.{% endfor %}{% for x in nothing %}no{% endfor %}", NULL, "a.b.");
    check("{% if false %}a{% elif 0 %}b{% elif 1 %}c{% else %}d{% endif %}", NULL, "c");
}

static void test_macros(void **state) {
    (void)state;
    check("{% macro m(x, y='dy', z=none) %}[{{ x }}|{{ y }}|{{ z }}]{% endmacro %}"
          "{{ m(1) }}{{ m(1, 2) }}{{ m(1, z=3) }}{{ m() }}", NULL,
          "[1|dy|None][1|2|None][1|dy|3][|dy|None]");
    check("{% set g = 'G' %}{% macro m() %}{% set local = 1 %}{{ g }}{% endmacro %}{{ m()|trim }}{{ local is defined }}",
          NULL, "GFalse");
    check("{% set ns = namespace(n=0) %}{% macro inc() %}{% set ns.n = ns.n + 1 %}{% endmacro %}"
          "{{ inc() }}{{ inc() }}{{ ns.n }}", NULL, "2");
    check("{% generation %}gen{% endgeneration %}", NULL, "gen");
}

static void test_errors_name_lines(void **state) {
    (void)state;
    check_err("a\nb\n{{ x|wordcount }}", NULL, Q_EUNSUPPORTED, "line 3: unknown filter 'wordcount'");
    check_err("\n{{ x is foo }}", NULL, Q_EUNSUPPORTED, "line 2: unknown test 'foo'");
    check_err("\n\n\n{{ 'a'.title() }}", NULL, Q_EUNSUPPORTED, "line 4: method str.title not supported");
    check_err("{% include 'x' %}", NULL, Q_EUNSUPPORTED, "line 1: statement 'include' not supported");
    check_err("\n{% for x in y recursive %}{% endfor %}", NULL, Q_EUNSUPPORTED, "line 2");
    check_err("{{ lipsum() }}", NULL, Q_EUNSUPPORTED, "unknown function 'lipsum'");
    check_err("\n{% raw %}{{ {% endraw %}", NULL, Q_EUNSUPPORTED, "line 2: statement 'raw' not supported");
    check_err("{{ d.pop('a') }}", "{\"d\": {}}", Q_EUNSUPPORTED, "dict.pop");
    check_err("{{ d.items }}", "{\"d\": {}}", Q_EUNSUPPORTED, "cannot print a method");
    check_err("x\n{{ raise_exception('No messages provided.') }}", NULL, Q_EINVAL, "No messages provided.");
    check_err("\n{% if true %}", NULL, Q_EINVAL, "line 2");
    check_err("{{ 'abc }}", NULL, Q_EINVAL, "unterminated string");
    check_err("\n\n{% endif %}", NULL, Q_EINVAL, "line 3: unexpected 'endif'");
    check_err("{{ a.b }}", NULL, Q_EINVAL, "'a' is undefined");
    check_err("{{ '<' + m.name + '>' }}", "{\"m\": {}}", Q_EINVAL, "attribute 'name' is undefined");
    check_err("{{ 'a' + 1 }}", NULL, Q_EINVAL, "unsupported operand types for +");
    check_err("{{ [1]|items }}", NULL, Q_EINVAL, "can only get item pairs from a mapping");
    check_err("{% set x.y = 1 %}", NULL, Q_EINVAL, "can only set attributes of a namespace");
    check_err("{{ 1 / 0 }}", NULL, Q_EINVAL, "division by zero");
    check_err("{{ x|tojson }}", NULL, Q_EINVAL, "not JSON serializable");
    check_err("{{ l|map('string') }}", "{\"l\": [1]}", Q_EUNSUPPORTED, "cannot print a generator");
    check_err("{{ l|select|length }}", "{\"l\": [1]}", Q_EINVAL, "has no len()");
    check_err("{{ '%s' % 1 }}", NULL, Q_EUNSUPPORTED, "string formatting");
    check("{{ d.keys() }}|{{ d.values() }}|{{ d.items() }}|{{ (l|reverse)[0] is defined }}|{{ l|reverse|list }}",
          "{\"d\": {\"a\": 1}, \"l\": [1, 2]}", "dict_keys(['a'])|dict_values([1])|dict_items([('a', 1)])|False|[2, 1]");
}

/* Builds pre + n copies of open + mid + n copies of close + post. */
static char *nest(const char *pre, const char *open, const char *mid, const char *close, const char *post, int n) {
    size_t lo = strlen(open), lc = strlen(close);
    size_t len = strlen(pre) + strlen(post) + strlen(mid) + (size_t)n * (lo + lc) + 1;
    char *s = malloc(len), *p = s;
    assert_non_null(s);
    p = stpcpy(p, pre);
    for (int i = 0; i < n; i++) memcpy(p, open, lo), p += lo;
    p = stpcpy(p, mid);
    for (int i = 0; i < n; i++) memcpy(p, close, lc), p += lc;
    stpcpy(p, post);
    return s;
}

static void test_hostile_nesting(void **state) {
    (void)state;
    struct { const char *pre, *open, *mid, *close, *post; } c[] = {
        {"{{ ", "(", "1", ")", " }}"},
        {"", "{% if true %}", "x", "{% endif %}", ""},
        {"{{ ", "not ", "1", "", " }}"},
        {"{{ 1", "", "", "|trim", " }}"},
        {"{{ x", "", "", "[0]", " }}"},
        {"{{ 1", "", "", " + 1", " }}"},
        {"{{ ", "[", "1", "]", " }}"},
        {"{{ ", "-", "1", "", " }}"},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        char *src = nest(c[i].pre, c[i].open, c[i].mid, c[i].close, c[i].post, 20000);
        jinja_tmpl *t = NULL;
        char *out = NULL;
        size_t n;
        qstatus rc = jinja_compile(src, strlen(src), &t);
        if (rc == Q_OK) rc = jinja_render(t, NULL, &out, &n);
        assert_int_equal(rc, Q_EUNSUPPORTED);
        assert_non_null(strstr(q_lasterr(), "deeper than"));
        free(out);
        jinja_free(t);
        free(src);
    }
    check_err("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", NULL, Q_EUNSUPPORTED, "deeper than");
}

/* Qwen3.5's own template on a one-message conversation, checked by hand against the template text:
 * no tools and no system message -> just the user turn, then the generation prompt, which opens a
 * think block (or an empty one with enable_thinking=false). */
static void test_qwen35_hand_checked(void **state) {
    (void)state;
    char *src, *out;
    size_t n, on;
    jinja_tmpl *t;
    assert_ok(q_read_file(QUILL_SHARED_DIR "/data/chat-templates/Qwen3.5-4B.jinja", &src, &n));
    assert_ok(jinja_compile(src, n, &t));
    json_t *v = json_pack("{s:[{s:s,s:s}],s:n,s:b}", "messages", "role", "user", "content", "Hello", "tools",
                          "add_generation_prompt", 1);
    assert_ok(jinja_render(t, v, &out, &on));
    assert_string_equal(out, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n");
    free(out);
    json_object_set_new(v, "enable_thinking", json_false());
    assert_ok(jinja_render(t, v, &out, &on));
    assert_string_equal(out, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    free(out);
    json_object_set_new(v, "add_generation_prompt", json_false());
    assert_ok(jinja_render(t, v, &out, &on));
    assert_string_equal(out, "<|im_start|>user\nHello<|im_end|>\n");
    free(out);
    json_object_set_new(v, "messages", json_array());
    assert_int_equal(jinja_render(t, v, &out, &on), Q_EINVAL);
    assert_string_equal(q_lasterr(), "No messages provided.");
    assert_true(jinja_loops_over(t, "content"));
    json_decref(v);
    jinja_free(t);
    free(src);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expressions),      cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_loops_and_scope),  cmocka_unit_test(test_macros),
        cmocka_unit_test(test_errors_name_lines), cmocka_unit_test(test_hostile_nesting),
        cmocka_unit_test(test_qwen35_hand_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
