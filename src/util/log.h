/* log.h: one line per event on stderr, with a level. QUILL_LOG=debug|info|warn|error sets the floor. */
#ifndef QUILL_LOG_H
#define QUILL_LOG_H

typedef enum { Q_LOG_DEBUG, Q_LOG_INFO, Q_LOG_WARN, Q_LOG_ERROR } q_log_level;

void q_log(q_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define q_debug(...) q_log(Q_LOG_DEBUG, __VA_ARGS__)
#define q_info(...) q_log(Q_LOG_INFO, __VA_ARGS__)
#define q_warn(...) q_log(Q_LOG_WARN, __VA_ARGS__)
#define q_error(...) q_log(Q_LOG_ERROR, __VA_ARGS__)

#endif
