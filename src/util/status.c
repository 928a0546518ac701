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
    char prefix[Q_ERRMSG_BYTES], old[Q_ERRMSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, errmsg, sizeof old);
    snprintf(errmsg, sizeof errmsg, "%s: %s", prefix, old);
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
