/* status.h: errors are values. Every function that can fail returns a qstatus and, on failure,
 * leaves a message in a thread-local buffer (q_lasterr) naming what was bad: the file, the tensor,
 * the JSON field. Callers propagate with Q_TRY. Nothing here aborts. */
#ifndef QUILL_STATUS_H
#define QUILL_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qstatus {
    Q_OK = 0,
    Q_EINVAL,      /* bad argument or request */
    Q_ENOMEM,      /* an allocation failed */
    Q_EIO,         /* a file could not be opened or read */
    Q_EFORMAT,     /* a file's contents are malformed */
    Q_ECUDA,       /* a CUDA call failed */
    Q_EFULL,       /* a fixed capacity is exhausted */
    Q_EUNSUPPORTED /* valid input this build cannot handle */
} qstatus;

/* Sets the thread's last error message and returns st, so `return q_fail(Q_EFORMAT, "...")` reads
 * naturally. The message is truncated to 1 KiB. */
qstatus q_fail(qstatus st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends "prefix: " to the thread's last error message (context added on the way up). Returns st. */
qstatus q_wrap(qstatus st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The thread's last error message; "" if none. Valid until the next q_fail on this thread. */
const char *q_lasterr(void);
void q_clearerr(void);
const char *q_status_name(qstatus st);

#define Q_TRY(expr)                          \
    do {                                     \
        qstatus q_try_st_ = (expr);          \
        if (q_try_st_ != Q_OK) return q_try_st_; \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif
