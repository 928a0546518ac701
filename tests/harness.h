/* harness.h: what every cmocka test includes. QUILL_SHARED_DIR (../shared) and QUILL_FIXTURES
 * (tests/fixtures) come from CMake. */
#ifndef QUILL_TEST_HARNESS_H
#define QUILL_TEST_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "util/status.h"

/* Fails the test with the last error message when st != Q_OK. */
#define assert_ok(expr)                                                                   \
    do {                                                                                  \
        qstatus st_ = (expr);                                                             \
        if (st_ != Q_OK) fail_msg("%s -> %s: %s", #expr, q_status_name(st_), q_lasterr()); \
    } while (0)

#endif
