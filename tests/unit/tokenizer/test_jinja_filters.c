/* test_jinja_filters.c: filters, tests and str/dict methods of the Jinja interpreter, each against
 * the output of jinja2 3.1 in transformers' environment (the expected strings were produced by it:
 * tojson = json.dumps(ensure_ascii=False), Python str()/repr() of values, Unicode-aware strip and
 * length). */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "jinja_check.h"
#include "tokenizer/jinja.h"

static void test_tojson(void **state) {
    (void)state;
    check("{{ d|tojson }}",
          "{\"d\": {\"z\": 1, \"a\": [1, 2.5, null, true], \"s\": \"q\\\"\\\\\\n\\t\\u00e9\\u4f60\\u0001\", \"e\": {}, \"l\": []}}",
          "{\"z\": 1, \"a\": [1, 2.5, null, true], \"s\": \"q\\\"\\\\\\n\\t\303\251\344\275\240\\u0001\", \"e\": {}, \"l\": []}");
    check("{{ d|tojson(indent=2) }}",
          "{\"d\": {\"a\": [1, {\"b\": null}], \"e\": []}}",
          "{\n  \"a\": [\n    1,\n    {\n      \"b\": null\n    }\n  ],\n  \"e\": []\n}");
    check("{{ d|tojson(sort_keys=true) }}",
          "{\"d\": {\"b\": 1, \"a\": 2}}",
          "{\"a\": 2, \"b\": 1}");
    check("{{ 'x'|tojson }}|{{ 1.0|tojson }}|{{ 1e-07|tojson }}|{{ none|tojson }}|{{ [1, 'a']|tojson }}",
          NULL,
          "\"x\"|1.0|1e-07|null|[1, \"a\"]");
}

static void test_string_filters(void **state) {
    (void)state;
    check("[{{ s|trim }}]|[{{ s|trim('x ') }}]|{{ s|length }}|{{ u|length }}|{{ u|count }}",
          "{\"s\": \" x ab x \", \"u\": \"h\\u00e9\\u4f60\"}",
          "[x ab x]|[ab]|8|3|3");
    check("{{ 1|string }}|{{ 2.0|string }}|{{ true|string }}|{{ none|string }}|{{ ['a', 1]|string }}|{{ {'k': none}|string }}|[{{ nothing|string }}]",
          NULL,
          "1|2.0|True|None|['a', 1]|{'k': None}|[]");
    check("{{ s|replace('a', 'b') }}|{{ s|upper }}|{{ s|lower }}|{{ s|reverse }}|{{ s|first }}|{{ s|last }}",
          "{\"s\": \"aAbc\"}",
          "bAbc|AABC|aabc|cbAa|a|c");
    check("[{{ '\343\200\200 x\302\240'|trim }}]|{{ x|default('d') }}|{{ ''|default('d') }}|{{ ''|default('d', true) }}|{{ 0|default(5, boolean=true) }}",
          NULL,
          "[x]|d||d|5");
    check("{{ '5'|int + 1 }}|{{ '2.5'|float }}|{{ 'x'|int }}|{{ 3.9|int }}|{{ 4|float }}|{{ (-3)|abs }}|{{ 'x'|safe }}",
          NULL,
          "6|2.5|0|3|4.0|3|x");
}

static void test_collection_filters(void **state) {
    (void)state;
    check("{{ d|items|list }}|{{ nothing|items|list }}|{{ d|length }}|{{ l|length }}|{{ nothing|length }}",
          "{\"d\": {\"a\": 1, \"b\": [2]}, \"l\": [1, 2, 3]}",
          "[('a', 1), ('b', [2])]|[]|2|3|0");
    check("{{ l|first }}|{{ l|last }}|{{ l|reverse|list }}|{{ l|join(', ') }}|{{ l|join }}|{{ l|list }}",
          "{\"l\": [3, 1, \"x\"]}",
          "3|x|['x', 1, 3]|3, 1, x|31x|[3, 1, 'x']");
    check("{{ m|map(attribute='role')|join(',') }}|{{ m|selectattr('role', 'equalto', 'user')|list|length }}|{{ m|rejectattr('role', 'eq', 'user')|map(attribute='c')|first }}",
          "{\"m\": [{\"role\": \"user\", \"c\": 1}, {\"role\": \"tool\", \"c\": 2}]}",
          "user,tool|1|2");
    check("{{ l|select('odd')|list }}|{{ l|reject('odd')|list }}|{{ l|map('string')|join('-') }}|{{ m|selectattr('ok')|list|length }}|{{ m|join(',', attribute='n') }}",
          "{\"l\": [1, 2, 3, 4], \"m\": [{\"ok\": true, \"n\": \"a\"}, {\"ok\": false, \"n\": \"b\"}]}",
          "[1, 3]|[2, 4]|1-2-3-4|1|a,b");
}

static void test_tests(void **state) {
    (void)state;
    check("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 's' is string }}{{ 1 is string }}{{ d is mapping }}{{ l is mapping }}",
          "{\"d\": {}, \"l\": []}",
          "FalseTrueTrueTrueFalseTrueFalse");
    check("{{ l is sequence }}{{ s is sequence }}{{ d is sequence }}{{ 1 is sequence }}{{ l is iterable }}{{ x is iterable }}{{ none is iterable }}",
          "{\"d\": {}, \"l\": [], \"s\": \"\"}",
          "TrueTrueTrueFalseTrueTrueFalse");
    check("{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}{{ none is false }}{{ true is boolean }}{{ 1 is boolean }}",
          NULL,
          "TrueFalseTrueFalseFalseTrueFalse");
    check("{{ 1 is number }}{{ 1.5 is number }}{{ 's' is number }}{{ 1 is integer }}{{ 1.0 is integer }}{{ 1.0 is float }}{{ 3 is odd }}{{ 3 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}",
          NULL,
          "TrueTrueFalseTrueFalseTrueTrueFalseTrueFalse");
    check("{{ 1 is eq 1 }}{{ 'a' is equalto 'b' }}{{ 2 is ne 3 }}{{ 2 is lt 3 }}{{ 2 is ge 3 }}{{ 'a' is in 'cat' }}{{ 2 is in [1, 2] }}{{ none is sameas none }}{{ x is not defined }}",
          NULL,
          "TrueFalseTrueTrueFalseTrueTrueTrueTrue");
}

static void test_methods(void **state) {
    (void)state;
    check("{{ s.split() }}|{{ s.split(' ') }}|{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'a b  c'.split(none, 1) }}",
          "{\"s\": \" Hello  World \\n\"}",
          "['Hello', 'World']|['', 'Hello', '', 'World', '\\n']|['a', 'b', '', 'c']|['a', 'b,c']|['a,b', 'c']|['a', 'b  c']");
    check("[{{ s.strip() }}]|[{{ s.lstrip() }}]|[{{ s.rstrip() }}]|[{{ s.strip(' \\nH') }}]|[{{ '<<x>>'.strip('<>') }}]",
          "{\"s\": \" Hello  World \\n\"}",
          "[Hello  World]|[Hello  World \n]|[ Hello  World]|[ello  World]|[x]");
    check("{{ s.startswith('<tool') }}{{ s.endswith('>') }}{{ s.startswith(('x', '<')) }}{{ s.endswith('') }}{{ ''.startswith('a') }}",
          "{\"s\": \"<tool_response>\"}",
          "TrueTrueTrueTrueFalse");
    check("{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'ab'.replace('', '-') }}|{{ 'h\303\251llo'.find('l') }}|{{ 'abcabc'.count('bc') }}|{{ '-'.join(['a', 'b']) }}|{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}",
          NULL,
          "bba|-a-b-|2|2|a-b|ABab");
    check("{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[-1].lstrip('\\n') }}",
          "{\"c\": \"<think>\\nreason\\n</think>\\n\\nanswer\"}",
          "reason|answer");
    check("{{ d.get('a') }}|{{ d.get('z') }}|{{ d.get('z', 0) }}|{{ d.keys()|list }}|{{ d.values()|list }}|{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}",
          "{\"d\": {\"a\": 1, \"b\": 2}}",
          "1|None|0|['a', 'b']|[1, 2]|a1b2");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tojson),             cmocka_unit_test(test_string_filters),
        cmocka_unit_test(test_collection_filters), cmocka_unit_test(test_tests),
        cmocka_unit_test(test_methods),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
