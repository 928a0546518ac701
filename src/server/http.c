/* http.c: libmicrohttpd transport (see http.h).
 *
 * Threads: MHD's internal polling thread accepts; each connection gets its own thread
 * (MHD_USE_THREAD_PER_CONNECTION), so a handler or a stream's read callback may block on the engine
 * without holding up any other client. A body is read in full before routing; past
 * SERVER_MAX_BODY_BYTES the rest is read and dropped and the answer is 413, so the client sees a
 * status instead of a reset connection. Unknown paths are 404, a known path with the wrong method 405.
 * Invariant: every request passes through `answer` exactly once, which counts it in the metrics. */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../util/log.h"
#include "openai_response.h"

struct qhttp {
    struct MHD_Daemon *d;
    qsrv *s;
};

/* Per-request state kept between MHD's calls of the access handler. */
typedef struct conn_state {
    sbuf body;
    int too_big;
} conn_state;

typedef void (*handler_fn)(qsrv *, const hreq *, hreply *);

typedef struct route {
    const char *method, *path;
    handler_fn fn;
} route;

static void h_chat(qsrv *s, const hreq *rq, hreply *out) { completion_handle(s, rq, 1, out); }
static void h_completions(qsrv *s, const hreq *rq, hreply *out) { completion_handle(s, rq, 0, out); }

static const route ROUTES[] = {
    {"POST", "/v1/chat/completions", h_chat},
    {"POST", "/v1/completions", h_completions},
    {"GET", "/v1/models", endpoint_models},
    {"POST", "/tokenize", endpoint_tokenize},
    {"POST", "/detokenize", endpoint_detokenize},
    {"GET", "/health", endpoint_health},
    {"GET", "/metrics", endpoint_metrics},
    {"GET", "/memory", endpoint_memory},
};

void http_block_signals(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN); /* a write to a closed socket is an error value, not a signal */
}

int http_wait_signal(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int sig = 0;
    while (sigwait(&set, &sig) != 0) {
    }
    return sig;
}

int http_client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return 1;
    if (p.revents & POLLIN) {
        char c;
        ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0) return 1; /* orderly shutdown by the client */
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 1;
    }
    return 0;
}

void server_error_reply(hreply *out, int status, const char *param, const char *fmt, ...) {
    oai_error e = {.http = status};
    snprintf(e.param, sizeof e.param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    sbuf_clear(&out->body);
    out->status = status;
    out->ctype = "application/json";
    if (oai_error_body(&out->body, &e)) {
        sbuf_clear(&out->body);
        sbuf_adds(&out->body, "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}");
    }
}

typedef struct stream_ctx {
    hreply r;
} stream_ctx;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ctx *c = cls;
    ssize_t n = c->r.read_cb(c->r.cls, buf, max);
    if (n == HTTP_STREAM_END) return MHD_CONTENT_READER_END_OF_STREAM;
    if (n < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
    return n;
}

static void stream_free(void *cls) {
    stream_ctx *c = cls;
    if (c->r.free_cb) c->r.free_cb(c->r.cls);
    free(c);
}

/* Queues out (taking its body or stream) on conn. */
static enum MHD_Result answer(qhttp *h, struct MHD_Connection *conn, hreply *out) {
    struct MHD_Response *resp = NULL;
    metrics_request(h->s->metrics, out->status);
    if (out->read_cb) {
        stream_ctx *c = malloc(sizeof *c);
        if (c) {
            c->r = *out;
            resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, c, stream_free);
            if (!resp) free(c);
        }
        if (!resp && out->free_cb) out->free_cb(out->cls);
        if (resp) {
            MHD_add_response_header(resp, "Cache-Control", "no-cache");
            MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        }
    } else {
        size_t n = out->body.n;
        char *p = out->body.p;
        out->body.p = NULL;
        resp = MHD_create_response_from_buffer(n, p ? p : (char *)"", p ? MHD_RESPMEM_MUST_FREE
                                                                          : MHD_RESPMEM_PERSISTENT);
        if (!resp) free(p);
    }
    sbuf_free(&out->body);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", out->ctype ? out->ctype : "application/json");
    if (out->retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", out->retry_after);
        MHD_add_response_header(resp, "Retry-After", ra);
    }
    enum MHD_Result rc = MHD_queue_response(conn, (unsigned)out->status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static void route_request(qhttp *h, const hreq *rq, hreply *out) {
    char path[256];
    size_t n = strcspn(rq->url, "?");
    if (n >= sizeof path) n = sizeof path - 1;
    memcpy(path, rq->url, n);
    path[n] = 0;
    int path_known = 0;
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
        if (strcmp(path, ROUTES[i].path)) continue;
        path_known = 1;
        if (!strcmp(rq->method, ROUTES[i].method)) {
            ROUTES[i].fn(h->s, rq, out);
            return;
        }
    }
    if (path_known)
        server_error_reply(out, 405, "", "method %s is not allowed on %s", rq->method, path);
    else
        server_error_reply(out, 404, "", "no route %s %s", rq->method, path);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    qhttp *h = cls;
    conn_state *cs = *con_cls;
    if (!cs) { /* first call: headers only */
        cs = calloc(1, sizeof *cs);
        if (!cs) return MHD_NO;
        *con_cls = cs;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cs->too_big && cs->body.n + *upload_size > SERVER_MAX_BODY_BYTES) {
            cs->too_big = 1;
            sbuf_free(&cs->body);
        }
        if (!cs->too_big && sbuf_add(&cs->body, upload, *upload_size)) cs->too_big = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    hreply out = {.status = 200, .ctype = "application/json"};
    if (cs->too_big) {
        server_error_reply(&out, 413, "", "the request body is larger than %u bytes", SERVER_MAX_BODY_BYTES);
    } else {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        hreq rq = {.method = method, .url = url, .body = cs->body.p ? cs->body.p : "", .body_n = cs->body.n,
                   .fd = ci ? ci->connect_fd : -1};
        route_request(h, &rq, &out);
    }
    return answer(h, conn, &out);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode t) {
    (void)cls;
    (void)conn;
    (void)t;
    conn_state *cs = *con_cls;
    if (!cs) return;
    sbuf_free(&cs->body);
    free(cs);
    *con_cls = NULL;
}

/* MHD's own messages (a client that went away mid-stream, a malformed request line) are routine for a
 * server: debug level. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n') msg[--n] = 0;
    q_debug("libmicrohttpd: %s", msg);
}

static void on_mhd_panic(void *cls, const char *file, unsigned line, const char *reason) {
    (void)cls;
    q_error("libmicrohttpd: %s:%u: %s", file ? file : "?", line, reason ? reason : "");
    abort(); /* MHD's own invariant broke: nothing safe is left to do */
}

qstatus http_start(qsrv *s, const char *host, int port, qhttp **out) {
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;
    if (!strcmp(host, "localhost")) host = "127.0.0.1";
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        flags |= MHD_USE_IPv6;
    } else {
        return q_fail(Q_EINVAL, "--host: '%s' is not a numeric IPv4 or IPv6 address", host);
    }
    qhttp *h = calloc(1, sizeof *h);
    if (!h) return q_fail(Q_ENOMEM, "http: out of memory");
    h->s = s;
    MHD_set_panic_func(on_mhd_panic, NULL);
    h->d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR,
                            (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)1024, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL, MHD_OPTION_END);
    if (!h->d) {
        free(h);
        return q_fail(Q_EIO, "http: cannot listen on %s:%d (address in use, or not allowed)", host, port);
    }
    *out = h;
    return Q_OK;
}

void http_quiesce(qhttp *h) {
    if (!h) return;
    MHD_socket fd = MHD_quiesce_daemon(h->d);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void http_stop(qhttp *h) {
    if (!h) return;
    MHD_stop_daemon(h->d);
    free(h);
}
