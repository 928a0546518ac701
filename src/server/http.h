/* http.h: the HTTP transport (libmicrohttpd): listening, routing to the endpoint handlers, body limits,
 * SSE responses, and the signal wait for a graceful stop. Not here: what an endpoint answers
 * (completion.c, endpoints.c). */
#ifndef QUILL_HTTP_H
#define QUILL_HTTP_H

#include "server.h"

typedef struct qhttp qhttp;

/* Blocks SIGINT, SIGTERM (and ignores SIGPIPE) in the calling thread; call before any thread starts so
 * every thread inherits the mask and http_wait_signal alone receives them. */
void http_block_signals(void);
/* Waits for SIGINT or SIGTERM; returns the signal number. */
int http_wait_signal(void);

/* Listens on host:port (host: a numeric IPv4 or IPv6 address) and serves s (borrowed). Owned *out;
 * stop with http_stop. Fails with Q_EIO when the address cannot be bound. */
qstatus http_start(qsrv *s, const char *host, int port, qhttp **out);
/* Stops accepting new connections; running ones continue. */
void http_quiesce(qhttp *h);
/* Closes every connection, joins the threads, frees h. NULL is ignored. */
void http_stop(qhttp *h);

#endif
