/* log.c: stderr logging with a level floor read once from QUILL_LOG. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int floor_level = -1;

static int read_floor(void) {
    const char *s = getenv("QUILL_LOG");
    if (!s) return Q_LOG_INFO;
    if (!strcmp(s, "debug")) return Q_LOG_DEBUG;
    if (!strcmp(s, "warn")) return Q_LOG_WARN;
    if (!strcmp(s, "error")) return Q_LOG_ERROR;
    return Q_LOG_INFO;
}

void q_log(q_log_level level, const char *fmt, ...) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (floor_level < 0) floor_level = read_floor();
    if ((int)level < floor_level) return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "quill %s: %s\n", names[level], line);
}
