/* test_stop_strings.c: stop strings split across feeds, hold-back, earliest match; the reasoning split
 * with "</think>" split across feeds. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "server/reasoning.h"
#include "server/stop_strings.h"

/* Feeds the pieces; returns the emitted text (static buffer) and whether a stop matched. */
static const char *run(const char *const *stops, int n_stops, const char *const *pieces, int n, int *matched) {
    static char res[256];
    qstop s;
    sbuf out = {0};
    stop_init(&s, stops, n_stops);
    *matched = 0;
    for (int i = 0; i < n && !*matched; i++) {
        int m = stop_feed(&s, pieces[i], strlen(pieces[i]), &out);
        assert_true(m >= 0);
        *matched = m;
    }
    if (!*matched) assert_int_equal(stop_flush(&s, &out), 0);
    snprintf(res, sizeof res, "%s", out.p ? out.p : "");
    sbuf_free(&out);
    stop_fini(&s);
    return res;
}

static void test_split_stop(void **st) {
    (void)st;
    const char *stops[] = {"END"};
    const char *p1[] = {"xE", "N", "D!", "more"};
    int m;
    assert_string_equal(run(stops, 1, p1, 4, &m), "x");
    assert_int_equal(m, 1);
    const char *p2[] = {"aE", "Nb", "E"};
    assert_string_equal(run(stops, 1, p2, 3, &m), "aENbE"); /* held "E" flushed at the end */
    assert_int_equal(m, 0);
    const char *p3[] = {"hello"};
    assert_string_equal(run(NULL, 0, p3, 1, &m), "hello");
    const char *p4[] = {"ENEND"};
    assert_string_equal(run(stops, 1, p4, 1, &m), "EN");
    assert_int_equal(m, 1);
}

static void test_holdback(void **st) {
    (void)st;
    const char *stops[] = {"</stop>"};
    qstop s;
    sbuf out = {0};
    stop_init(&s, stops, 1);
    assert_int_equal(stop_feed(&s, "abc</st", 7, &out), 0);
    assert_string_equal(out.p, "abc"); /* "</st" could start the stop string */
    assert_int_equal(stop_feed(&s, "x", 1, &out), 0);
    assert_string_equal(out.p, "abc</stx");
    stop_fini(&s);
    sbuf_free(&out);
}

static void test_earliest(void **st) {
    (void)st;
    const char *stops[] = {"B", "AB"};
    const char *p[] = {"xA", "B"};
    int m;
    assert_string_equal(run(stops, 2, p, 2, &m), "x");
    assert_int_equal(m, 1);
    assert_int_equal(stop_partial_suffix("abc", 3, stops, 2), 0);
    assert_int_equal(stop_partial_suffix("xxA", 3, stops, 2), 1);
}

static void split(int opened, const char *const *pieces, int n, const char *reasoning, const char *content) {
    qreason r;
    sbuf rs = {0}, ct = {0};
    reason_init(&r, opened);
    for (int i = 0; i < n; i++) assert_int_equal(reason_feed(&r, pieces[i], strlen(pieces[i]), &rs, &ct), 0);
    assert_int_equal(reason_flush(&r, &rs), 0);
    assert_string_equal(rs.p ? rs.p : "", reasoning);
    assert_string_equal(ct.p ? ct.p : "", content);
    reason_fini(&r);
    sbuf_free(&rs);
    sbuf_free(&ct);
}

static void test_reasoning(void **st) {
    (void)st;
    const char *a[] = {"Let me", " see.</th", "ink>\n\n", "Hi"};
    split(1, a, 4, "Let me see.", "Hi");
    split(0, a, 4, "", "Let me see.</think>\n\nHi");
    const char *b[] = {"thinking </t", "oo"};
    split(1, b, 2, "thinking </too", ""); /* never closed: all reasoning */
    const char *c[] = {"x</think>", "\n", "\nA\nB"};
    split(1, c, 3, "x", "A\nB");
    assert_int_equal(reason_prompt_opened("assistant\n<think>\n", 18), 1);
    assert_int_equal(reason_prompt_opened("<think>\n\n</think>\n\n", 19), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_stop),
        cmocka_unit_test(test_holdback),
        cmocka_unit_test(test_earliest),
        cmocka_unit_test(test_reasoning),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
