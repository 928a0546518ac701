/* jinja_parse.c: tokens -> syntax tree, statements: if/elif/else, for (one or more targets, an
 * `if` filter, else), set (name, ns.attr, a, b = ..., block set), macro (positional parameters with
 * defaults), break/continue (loopcontrols), generation (transformers' extension: renders its body).
 * Invariants: block nesting <= JINJA_MAX_DEPTH; nodes live in the template's arena; every node
 * records its source line. Not here: expressions (jinja_expr.c), evaluation (jinja_eval.c).
 * Unsupported statements (extends, include, import, block, call, filter, raw, with, ...) fail with
 * Q_EUNSUPPORTED naming the line. */
#include "jinja_parser.h"

/* ---- statements ------------------------------------------------------------------------------ */

static qstatus parse_body(parser *p, const char *const *ends, jnode **out);

static qstatus expect_block_end(parser *p) {
    if (peek(p)->kind == JT_BLOCK_END) {
        p->i++;
        return Q_OK;
    }
    return unexpected(p, "'%}'");
}

/* After "{%": the current token is the end name; consumes through "%}". */
static qstatus end_tag(parser *p, const char *name) {
    if (!skip_name(p, name)) return unexpected(p, name);
    return expect_block_end(p);
}

static qstatus parse_target(parser *p, jnode **out) {
    const jtok *t = peek(p);
    if (t->kind != JT_NAME) return unexpected(p, "a name");
    jnode *n = mk(p, JN_NAME, t->line);
    if (!n) return OOM();
    n->s = t->s, n->n = t->n;
    p->i++;
    if (is_op(p, ".")) {
        p->i++;
        if (peek(p)->kind != JT_NAME) return unexpected(p, "an attribute name");
        jnode *m = mk(p, JN_ATTR, t->line);
        if (!m) return OOM();
        m->a = n, m->s = peek(p)->s, m->n = peek(p)->n;
        p->i++;
        n = m;
    }
    *out = n;
    return Q_OK;
}

static qstatus parse_if(parser *p, int line, jnode **out) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    jnode *n = mk(p, JN_IF, line);
    if (!n) return OOM();
    Q_TRY(jinja_parse_expr(p, &n->a));
    Q_TRY(expect_block_end(p));
    Q_TRY(parse_body(p, ends, &n->b));
    int eline = peek(p)->line;
    if (skip_name(p, "elif")) {
        Q_TRY(enter(p));
        Q_TRY(parse_if(p, eline, &n->c));
        p->depth--;
        *out = n;
        return Q_OK; /* the nested if consumed endif */
    }
    if (skip_name(p, "else")) {
        static const char *const e2[] = {"endif", NULL};
        Q_TRY(expect_block_end(p));
        Q_TRY(parse_body(p, e2, &n->c));
    }
    Q_TRY(end_tag(p, "endif"));
    *out = n;
    return Q_OK;
}

static qstatus parse_for(parser *p, int line, jnode **out) {
    static const char *const ends[] = {"else", "endfor", NULL};
    jnode *n = mk(p, JN_FOR, line);
    if (!n) return OOM();
    nvec tg = {0};
    do {
        jnode *t;
        if (peek(p)->kind != JT_NAME) return unexpected(p, "a loop variable");
        if (!(t = mk(p, JN_NAME, line))) return OOM();
        t->s = peek(p)->s, t->n = peek(p)->n;
        p->i++;
        if (nv_push(p, &tg, t, NULL, 0)) return OOM();
    } while (skip_op(p, ","));
    n->kids = tg.v, n->n_kids = tg.n;
    if (!skip_name(p, "in")) return unexpected(p, "'in'");
    Q_TRY(jinja_parse_or(p, &n->a));
    if (skip_name(p, "if")) Q_TRY(jinja_parse_expr(p, &n->d));
    if (is_name(p, "recursive")) return q_fail(Q_EUNSUPPORTED, "chat template line %d: recursive loops not supported", line);
    Q_TRY(expect_block_end(p));
    Q_TRY(parse_body(p, ends, &n->b));
    if (skip_name(p, "else")) {
        static const char *const e2[] = {"endfor", NULL};
        Q_TRY(expect_block_end(p));
        Q_TRY(parse_body(p, e2, &n->c));
    }
    *out = n;
    return end_tag(p, "endfor");
}

static qstatus parse_stmt(parser *p, jnode **out) {
    int line = peek(p)->line;
    p->i++; /* {% */
    const jtok *t = peek(p);
    if (t->kind != JT_NAME) return unexpected(p, "a statement");
    *out = NULL;
    if (skip_name(p, "if")) return parse_if(p, line, out);
    if (skip_name(p, "for")) return parse_for(p, line, out);
    if (skip_name(p, "set")) {
        nvec tg = {0};
        do {
            jnode *x = NULL;
            Q_TRY(parse_target(p, &x));
            if (nv_push(p, &tg, x, NULL, 0)) return OOM();
        } while (skip_op(p, ","));
        jnode *n = mk(p, JN_SET, line);
        if (!n) return OOM();
        n->kids = tg.v, n->n_kids = tg.n;
        if (skip_op(p, "=")) {
            jnode *e;
            Q_TRY(jinja_parse_expr(p, &e));
            if (is_op(p, ",")) {
                nvec items = {0};
                if (nv_push(p, &items, e, NULL, 0)) return OOM();
                while (skip_op(p, ",")) {
                    Q_TRY(jinja_parse_expr(p, &e));
                    if (nv_push(p, &items, e, NULL, 0)) return OOM();
                }
                if (!(e = mk(p, JN_LIST, line))) return OOM();
                e->kids = items.v, e->n_kids = items.n, e->neg = 1;
            }
            n->a = e;
            *out = n;
            return expect_block_end(p);
        }
        static const char *const ends[] = {"endset", NULL};
        if (tg.n != 1) return unexpected(p, "'='");
        n->kind = JN_SETBLOCK;
        if (is_op(p, "|")) return q_fail(Q_EUNSUPPORTED, "chat template line %d: filtered block set not supported", line);
        Q_TRY(expect_block_end(p));
        Q_TRY(parse_body(p, ends, &n->b));
        *out = n;
        return end_tag(p, "endset");
    }
    if (skip_name(p, "macro")) {
        static const char *const ends[] = {"endmacro", NULL};
        jnode *n = mk(p, JN_MACRO, line);
        if (!n) return OOM();
        if (peek(p)->kind != JT_NAME) return unexpected(p, "a macro name");
        n->s = peek(p)->s, n->n = peek(p)->n;
        p->i++;
        Q_TRY(expect_op(p, "("));
        nvec prm = {0}, def = {0};
        while (!is_op(p, ")")) {
            if (peek(p)->kind != JT_NAME) return unexpected(p, "a parameter name");
            jnode *x = mk(p, JN_NAME, line), *d = NULL;
            if (!x) return OOM();
            x->s = peek(p)->s, x->n = peek(p)->n;
            p->i++;
            if (skip_op(p, "=")) Q_TRY(jinja_parse_expr(p, &d));
            if (nv_push(p, &prm, x, NULL, 0) || nv_push(p, &def, d, NULL, 0)) return OOM();
            if (!skip_op(p, ",")) break;
        }
        Q_TRY(expect_op(p, ")"));
        Q_TRY(expect_block_end(p));
        n->kids = prm.v, n->n_kids = prm.n, n->kw = def.v, n->n_kw = def.n;
        Q_TRY(parse_body(p, ends, &n->b));
        *out = n;
        return end_tag(p, "endmacro");
    }
    if (skip_name(p, "break") || skip_name(p, "continue")) {
        jnode *n = mk(p, tok_is(t, JT_NAME, "break") ? JN_BREAK : JN_CONTINUE, line);
        if (!n) return OOM();
        *out = n;
        return expect_block_end(p);
    }
    if (skip_name(p, "generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        Q_TRY(expect_block_end(p));
        Q_TRY(parse_body(p, ends, out));
        return end_tag(p, "endgeneration");
    }
    return q_fail(Q_EUNSUPPORTED, "chat template line %d: statement '%.*s' not supported", line, (int)t->n, t->s);
}

/* Statements until "{% <one of ends>" (left current, after the "{%") or EOF (ends == NULL). */
static qstatus parse_body(parser *p, const char *const *ends, jnode **out) {
    Q_TRY(enter(p));
    nvec v = {0};
    jnode *body = mk(p, JN_BODY, peek(p)->line);
    if (!body) return OOM();
    for (;;) {
        const jtok *t = peek(p);
        if (t->kind == JT_EOF) {
            if (ends) return unexpected(p, ends[0]);
            break;
        }
        jnode *n = NULL;
        if (t->kind == JT_DATA) {
            if (!(n = mk(p, JN_DATA, t->line))) return OOM();
            n->s = t->s, n->n = t->n;
            p->i++;
        } else if (t->kind == JT_VAR_BEGIN) {
            if (!(n = mk(p, JN_OUTPUT, t->line))) return OOM();
            p->i++;
            Q_TRY(jinja_parse_expr(p, &n->a));
            if (peek(p)->kind != JT_VAR_END) return unexpected(p, "'}}'");
            p->i++;
        } else if (t->kind == JT_BLOCK_BEGIN) {
            const jtok *nm = peek2(p);
            int is_end = 0;
            for (size_t k = 0; ends && ends[k]; k++)
                if (tok_is(nm, JT_NAME, ends[k])) is_end = 1;
            if (is_end) {
                p->i++;
                break;
            }
            if (nm->kind == JT_NAME && (tok_is(nm, JT_NAME, "endif") || tok_is(nm, JT_NAME, "endfor") ||
                                        tok_is(nm, JT_NAME, "else") || tok_is(nm, JT_NAME, "elif") ||
                                        tok_is(nm, JT_NAME, "endmacro") || tok_is(nm, JT_NAME, "endset")))
                return q_fail(Q_EINVAL, "chat template line %d: unexpected '%.*s'", nm->line, (int)nm->n, nm->s);
            Q_TRY(parse_stmt(p, &n));
        } else {
            return unexpected(p, "a statement");
        }
        if (n && nv_push(p, &v, n, NULL, 0)) return OOM();
    }
    body->kids = v.v, body->n_kids = v.n;
    p->depth--;
    *out = body;
    return Q_OK;
}

qstatus jinja_parse(jarena *a, const jtok *toks, size_t n_toks, jnode **root) {
    parser p = {.a = a, .t = toks, .n = n_toks};
    return parse_body(&p, NULL, root);
}

/* Does a for-loop iterate over `name` itself (x in name, x in a.name, x in a['name'])? */
static int loops_over(const jnode *n, const char *name, size_t len) {
    if (!n) return 0;
    if (n->kind == JN_FOR) {
        const jnode *it = n->a;
        while (it->kind == JN_FILTER) it = it->a;
        if ((it->kind == JN_NAME || it->kind == JN_ATTR) && it->n == len && !memcmp(it->s, name, len)) return 1;
        if (it->kind == JN_ITEM && it->b->kind == JN_LIT && it->b->lit.k == JV_STR && it->b->lit.u.s.n == len &&
            !memcmp(it->b->lit.u.s.p, name, len))
            return 1;
    }
    if (n->kind != JN_BODY && n->kind != JN_IF && n->kind != JN_FOR && n->kind != JN_MACRO && n->kind != JN_SETBLOCK)
        return 0;
    for (size_t i = 0; n->kind == JN_BODY && i < n->n_kids; i++)
        if (loops_over(n->kids[i], name, len)) return 1;
    return loops_over(n->b, name, len) || loops_over(n->c, name, len);
}

int jinja_loops_over(const jinja_tmpl *t, const char *name) { return loops_over(t->root, name, strlen(name)); }
