/* status.c: the thread-local last-error message behind q_fail / q_lasterr. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define Q_ERRMSG_BYTES 1024
static _Thread_local char errmsg[Q_ERRMSG_BYTES];

qstatus q_fail(qstatus st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    va_end(ap);
    return st;
}

qstatus q_wrap(qstatus st, const char *fmt, ...) {
    char old[Q_ERRMSG_BYTES];
    memcpy(old, errmsg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    va_end(ap);
    if (k < 0) k = 0;
    size_t used = (size_t)k < sizeof errmsg ? (size_t)k : sizeof errmsg - 1;
    size_t room = sizeof errmsg - used; /* including the NUL */
    if (room > 2) {
        memcpy(errmsg + used, ": ", 2);
        size_t n = strlen(old);
        if (n > room - 3) n = room - 3; /* truncate the old message */
        memcpy(errmsg + used + 2, old, n);
        errmsg[used + 2 + n] = 0;
    }
    return st;
}

const char *q_lasterr(void) { return errmsg; }
void q_clearerr(void) { errmsg[0] = 0; }

const char *q_status_name(qstatus st) {
    switch (st) {
    case Q_OK: return "ok";
    case Q_EINVAL: return "invalid argument";
    case Q_ENOMEM: return "out of memory";
    case Q_EIO: return "I/O error";
    case Q_EFORMAT: return "malformed input";
    case Q_ECUDA: return "CUDA error";
    case Q_EFULL: return "capacity exhausted";
    case Q_EUNSUPPORTED: return "unsupported";
    }
    return "unknown error";
}
