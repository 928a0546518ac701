/* jinja_parser.h: the parser state and token helpers shared by jinja_expr.c (expressions) and
 * jinja_parse.c (statements). Private to those two files. */
#ifndef QUILL_JINJA_PARSER_H
#define QUILL_JINJA_PARSER_H

#include <stdio.h>
#include <string.h>

#include "jinja.h"

typedef struct parser {
    jarena *a;
    const jtok *t;
    size_t n, i;
    int depth;
} parser;

#define OOM() q_fail(Q_ENOMEM, "chat template: out of memory parsing")

static inline const jtok *peek(parser *p) { return &p->t[p->i]; }
static inline const jtok *peek2(parser *p) { return p->i + 1 < p->n ? &p->t[p->i + 1] : &p->t[p->n - 1]; }
static inline int tok_is(const jtok *t, jtok_kind k, const char *s) {
    return t->kind == k && (!s || (t->n == strlen(s) && memcmp(t->s, s, t->n) == 0));
}
static inline int is_op(parser *p, const char *s) { return tok_is(peek(p), JT_OP, s); }
static inline int is_name(parser *p, const char *s) { return tok_is(peek(p), JT_NAME, s); }
static inline int skip_op(parser *p, const char *s) {
    if (!is_op(p, s)) return 0;
    p->i++;
    return 1;
}
static inline int skip_name(parser *p, const char *s) {
    if (!is_name(p, s)) return 0;
    p->i++;
    return 1;
}

static inline qstatus unexpected(parser *p, const char *what) {
    const jtok *t = peek(p);
    if (t->kind == JT_EOF) return q_fail(Q_EINVAL, "chat template line %d: unexpected end of template, expected %s", t->line, what);
    if (t->kind == JT_NAME || t->kind == JT_OP)
        return q_fail(Q_EINVAL, "chat template line %d: unexpected '%.*s', expected %s", t->line, (int)t->n, t->s, what);
    return q_fail(Q_EINVAL, "chat template line %d: unexpected token, expected %s", t->line, what);
}

static inline qstatus expect_op(parser *p, const char *s) {
    if (skip_op(p, s)) return Q_OK;
    char what[16];
    snprintf(what, sizeof what, "'%s'", s);
    return unexpected(p, what);
}

static inline jnode *mk(parser *p, jnode_kind k, int line) {
    jnode *n = ja_alloc(p->a, sizeof *n);
    if (n) n->kind = k, n->line = line;
    return n;
}

/* Growable node arrays built in the arena (copied on growth; small). */
typedef struct nvec {
    jnode **v;
    size_t n, cap;
    const char **name;
    size_t *len;
} nvec;
static inline int nv_push(parser *p, nvec *v, jnode *x, const char *name, size_t len) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        jnode **nv = ja_alloc(p->a, cap * sizeof *nv);
        const char **nn = ja_alloc(p->a, cap * sizeof *nn);
        size_t *nl = ja_alloc(p->a, cap * sizeof *nl);
        if (!nv || !nn || !nl) return -1;
        if (v->n) {
            memcpy(nv, v->v, v->n * sizeof *nv);
            memcpy(nn, v->name, v->n * sizeof *nn);
            memcpy(nl, v->len, v->n * sizeof *nl);
        }
        v->v = nv, v->name = nn, v->len = nl, v->cap = cap;
    }
    v->v[v->n] = x, v->name[v->n] = name, v->len[v->n] = len;
    v->n++;
    return 0;
}


static inline qstatus enter(parser *p) {
    if (++p->depth > JINJA_MAX_DEPTH)
        return q_fail(Q_EUNSUPPORTED, "chat template line %d: nesting deeper than %d", peek(p)->line, JINJA_MAX_DEPTH);
    return Q_OK;
}

/* Expressions (jinja_expr.c): a full expression (with `a if c else b`), and one without the
 * conditional (a for-loop's iterable, whose `if` is the loop filter). */
qstatus jinja_parse_expr(parser *p, jnode **out);
qstatus jinja_parse_or(parser *p, jnode **out);

#endif
