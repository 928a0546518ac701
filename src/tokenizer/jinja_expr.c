/* jinja_expr.c: the expression parser, recursive descent with jinja2's precedence (lowest first):
 *   cond (a if c else b) < or < and < not < compare (== != < <= > >= in, not in) < + - < ~
 *   < * / // % < ** < unary -/+ < primary with postfix (.attr, [i], [a:b:c], call) then filters
 *   (|f) and tests (is [not] t, with one argument in parentheses or bare).
 * Literals: strings (adjacent ones concatenate), ints, floats, true/false/none (any case jinja2
 * accepts), lists, tuples, dicts. Call arguments: positional then name=value.
 * Invariants: recursion depth <= JINJA_MAX_DEPTH (Q_EUNSUPPORTED past it); chains (a.b.c, x|f|g,
 * a+b+c) are loops, their evaluation depth is bounded in jinja_eval.c.
 * Not here: statements (jinja_parse.c). star-args calls and dotted filter names: unsupported. */
#include "jinja_parser.h"

static qstatus parse_unary(parser *p, int with_filter, jnode **out);
/* ( args ) with positional and name=value arguments; the '(' is current. */
static qstatus parse_args(parser *p, jnode *call) {
    nvec pos = {0}, kw = {0};
    p->i++;
    while (!is_op(p, ")")) {
        if (pos.n + kw.n && expect_op(p, ",")) return unexpected(p, "',' or ')'");
        if (is_op(p, ")")) break;
        if (is_op(p, "*") || is_op(p, "**"))
            return q_fail(Q_EUNSUPPORTED, "chat template line %d: *args/**kwargs not supported", peek(p)->line);
        jnode *e;
        if (peek(p)->kind == JT_NAME && tok_is(peek2(p), JT_OP, "=")) {
            const jtok *nm = peek(p);
            p->i += 2;
            Q_TRY(jinja_parse_expr(p, &e));
            if (nv_push(p, &kw, e, nm->s, nm->n)) return OOM();
        } else {
            if (kw.n) return q_fail(Q_EINVAL, "chat template line %d: positional argument after keyword", peek(p)->line);
            Q_TRY(jinja_parse_expr(p, &e));
            if (nv_push(p, &pos, e, NULL, 0)) return OOM();
        }
    }
    p->i++;
    call->kids = pos.v, call->n_kids = pos.n;
    call->kw = kw.v, call->kwname = kw.name, call->kwlen = kw.len, call->n_kw = kw.n;
    return Q_OK;
}

static qstatus parse_primary(parser *p, jnode **out) {
    const jtok *t = peek(p);
    jnode *n = NULL;
    if (t->kind == JT_NAME) {
        n = mk(p, JN_LIT, t->line);
        if (!n) return OOM();
        if (tok_is(t, JT_NAME, "true") || tok_is(t, JT_NAME, "True")) n->lit = jv_bool(1);
        else if (tok_is(t, JT_NAME, "false") || tok_is(t, JT_NAME, "False")) n->lit = jv_bool(0);
        else if (tok_is(t, JT_NAME, "none") || tok_is(t, JT_NAME, "None")) n->lit = jv_none();
        else n->kind = JN_NAME, n->s = t->s, n->n = t->n;
        p->i++;
    } else if (t->kind == JT_STRING) {
        /* adjacent literals concatenate */
        size_t len = 0, j = p->i;
        while (p->t[j].kind == JT_STRING) len += p->t[j++].n;
        char *s = ja_alloc(p->a, len + 1);
        n = mk(p, JN_LIT, t->line);
        if (!s || !n) return OOM();
        len = 0;
        while (peek(p)->kind == JT_STRING) {
            memcpy(s + len, peek(p)->s, peek(p)->n);
            len += peek(p)->n;
            p->i++;
        }
        n->lit = jv_str(s, len);
    } else if (t->kind == JT_INT || t->kind == JT_FLOAT) {
        n = mk(p, JN_LIT, t->line);
        if (!n) return OOM();
        n->lit = t->kind == JT_INT ? jv_int(t->i) : jv_float(t->f);
        p->i++;
    } else if (is_op(p, "(")) {
        p->i++;
        nvec v = {0};
        int tuple = 0;
        while (!is_op(p, ")")) {
            jnode *e;
            Q_TRY(jinja_parse_expr(p, &e));
            if (nv_push(p, &v, e, NULL, 0)) return OOM();
            if (!skip_op(p, ",")) break;
            tuple = 1;
        }
        Q_TRY(expect_op(p, ")"));
        if (v.n == 1 && !tuple) n = v.v[0];
        else {
            n = mk(p, JN_LIST, t->line);
            if (!n) return OOM();
            n->kids = v.v, n->n_kids = v.n, n->neg = 1; /* neg marks a tuple literal */
        }
    } else if (is_op(p, "[")) {
        p->i++;
        nvec v = {0};
        while (!is_op(p, "]")) {
            jnode *e;
            Q_TRY(jinja_parse_expr(p, &e));
            if (nv_push(p, &v, e, NULL, 0)) return OOM();
            if (!skip_op(p, ",")) break;
        }
        Q_TRY(expect_op(p, "]"));
        n = mk(p, JN_LIST, t->line);
        if (!n) return OOM();
        n->kids = v.v, n->n_kids = v.n;
    } else if (is_op(p, "{")) {
        p->i++;
        nvec k = {0}, v = {0};
        while (!is_op(p, "}")) {
            jnode *ke, *ve;
            Q_TRY(jinja_parse_expr(p, &ke));
            Q_TRY(expect_op(p, ":"));
            Q_TRY(jinja_parse_expr(p, &ve));
            if (nv_push(p, &k, ke, NULL, 0) || nv_push(p, &v, ve, NULL, 0)) return OOM();
            if (!skip_op(p, ",")) break;
        }
        Q_TRY(expect_op(p, "}"));
        n = mk(p, JN_DICT, t->line);
        if (!n) return OOM();
        n->kids = k.v, n->n_kids = k.n, n->kw = v.v, n->n_kw = v.n;
    } else {
        return unexpected(p, "an expression");
    }
    *out = n;
    return Q_OK;
}

/* [ ... ] after an expression: an index or a slice a:b:c (each part optional). */
static qstatus parse_subscript(parser *p, jnode *obj, jnode **out) {
    int line = peek(p)->line;
    p->i++;
    jnode *parts[3] = {NULL, NULL, NULL};
    int k = 0, slice = 0;
    for (;;) {
        if (!is_op(p, ":") && !is_op(p, "]")) Q_TRY(jinja_parse_expr(p, &parts[k]));
        if (is_op(p, ":") && k < 2) {
            p->i++;
            slice = 1;
            k++;
            continue;
        }
        break;
    }
    Q_TRY(expect_op(p, "]"));
    jnode *n = mk(p, slice ? JN_SLICE : JN_ITEM, line);
    if (!n) return OOM();
    n->a = obj;
    if (slice) {
        jnode **kids = ja_alloc(p->a, 3 * sizeof *kids);
        if (!kids) return OOM();
        memcpy(kids, parts, sizeof parts);
        n->kids = kids, n->n_kids = 3;
    } else {
        if (!parts[0]) return unexpected(p, "an index");
        n->b = parts[0];
    }
    *out = n;
    return Q_OK;
}

/* callee(args...): a JN_CALL node over n. */
static qstatus parse_call(parser *p, jnode *n, int line, jnode **out) {
    jnode *m = mk(p, JN_CALL, line);
    if (!m) return OOM();
    m->a = n;
    Q_TRY(parse_args(p, m));
    *out = m;
    return Q_OK;
}

static qstatus parse_postfix(parser *p, jnode *n, jnode **out) {
    for (;;) {
        int line = peek(p)->line;
        if (is_op(p, ".")) {
            p->i++;
            const jtok *t = peek(p);
            jnode *m = mk(p, t->kind == JT_INT ? JN_ITEM : JN_ATTR, line);
            if (!m) return OOM();
            m->a = n;
            if (t->kind == JT_NAME) m->s = t->s, m->n = t->n;
            else if (t->kind == JT_INT) {
                if (!(m->b = mk(p, JN_LIT, line))) return OOM();
                m->b->lit = jv_int(t->i);
            } else return unexpected(p, "an attribute name");
            p->i++;
            n = m;
        } else if (is_op(p, "[")) {
            Q_TRY(parse_subscript(p, n, &n));
        } else if (is_op(p, "(")) {
            Q_TRY(parse_call(p, n, line, &n));
        } else {
            break;
        }
    }
    *out = n;
    return Q_OK;
}

static qstatus parse_filter_expr(parser *p, jnode *n, jnode **out) {
    for (;;) {
        int line = peek(p)->line;
        if (is_op(p, "|")) {
            p->i++;
            if (peek(p)->kind != JT_NAME) return unexpected(p, "a filter name");
            jnode *m = mk(p, JN_FILTER, line);
            if (!m) return OOM();
            m->a = n, m->s = peek(p)->s, m->n = peek(p)->n;
            p->i++;
            if (is_op(p, ".")) return q_fail(Q_EUNSUPPORTED, "chat template line %d: dotted filter names not supported", line);
            if (is_op(p, "(")) Q_TRY(parse_args(p, m));
            n = m;
        } else if (is_name(p, "is")) {
            p->i++;
            jnode *m = mk(p, JN_TEST, line);
            if (!m) return OOM();
            m->a = n;
            if (skip_name(p, "not")) m->neg = 1;
            if (peek(p)->kind != JT_NAME) return unexpected(p, "a test name");
            m->s = peek(p)->s, m->n = peek(p)->n;
            p->i++;
            if (is_op(p, "(")) {
                Q_TRY(parse_args(p, m));
            } else {
                /* jinja2: one bare argument unless the next token is else/or/and */
                const jtok *t = peek(p);
                int arg = t->kind == JT_STRING || t->kind == JT_INT || t->kind == JT_FLOAT || is_op(p, "[") ||
                          is_op(p, "{") ||
                          (t->kind == JT_NAME && !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and"));
                if (is_name(p, "is")) return q_fail(Q_EINVAL, "chat template line %d: cannot chain tests with 'is'", line);
                if (arg) {
                    jnode *e, **kids = ja_alloc(p->a, sizeof *kids);
                    if (!kids) return OOM();
                    Q_TRY(enter(p));
                    Q_TRY(parse_primary(p, &e));
                    Q_TRY(parse_postfix(p, e, &e));
                    p->depth--;
                    kids[0] = e;
                    m->kids = kids, m->n_kids = 1;
                }
            }
            n = m;
        } else if (is_op(p, "(")) {
            Q_TRY(parse_call(p, n, line, &n));
        } else {
            break;
        }
    }
    *out = n;
    return Q_OK;
}

static qstatus parse_unary(parser *p, int with_filter, jnode **out) {
    Q_TRY(enter(p));
    jnode *n;
    int line = peek(p)->line;
    if (is_op(p, "-") || is_op(p, "+")) {
        int neg = is_op(p, "-");
        p->i++;
        jnode *x = NULL;
        Q_TRY(parse_unary(p, 0, &x));
        if (!(n = mk(p, neg ? JN_NEG : JN_POS, line))) return OOM();
        n->a = x;
    } else {
        Q_TRY(parse_primary(p, &n));
    }
    Q_TRY(parse_postfix(p, n, &n));
    if (with_filter) Q_TRY(parse_filter_expr(p, n, &n));
    p->depth--;
    *out = n;
    return Q_OK;
}

/* Binary levels, from tightest: ** ; * / // % ; ~ ; + - */
static qstatus parse_binary(parser *p, int level, jnode **out) {
    static const char *const ops[4][4] = {{"**"}, {"*", "/", "//", "%"}, {"~"}, {"+", "-"}};
    jnode *l;
    if (level == 0) Q_TRY(parse_unary(p, 1, &l));
    else Q_TRY(parse_binary(p, level - 1, &l));
    for (;;) {
        const char *op = NULL;
        for (int k = 0; k < 4 && ops[level][k]; k++)
            if (is_op(p, ops[level][k])) op = ops[level][k];
        if (!op) break;
        int line = peek(p)->line;
        p->i++;
        jnode *r, *n = mk(p, JN_BINOP, line);
        if (!n) return OOM();
        if (level == 0) Q_TRY(parse_unary(p, 1, &r));
        else Q_TRY(parse_binary(p, level - 1, &r));
        n->a = l, n->b = r, n->s = op, n->n = strlen(op);
        l = n;
    }
    *out = l;
    return Q_OK;
}

static qstatus parse_compare(parser *p, jnode **out) {
    jnode *l;
    Q_TRY(parse_binary(p, 3, &l));
    nvec rhs = {0};
    int line = peek(p)->line;
    for (;;) {
        static const char *const cmp[] = {"==", "!=", "<", "<=", ">", ">="};
        const char *op = NULL;
        for (size_t k = 0; k < 6; k++)
            if (is_op(p, cmp[k])) op = cmp[k];
        if (op) p->i++;
        else if (is_name(p, "in")) op = "in", p->i++;
        else if (is_name(p, "not") && tok_is(peek2(p), JT_NAME, "in")) op = "not in", p->i += 2;
        else break;
        jnode *r;
        Q_TRY(parse_binary(p, 3, &r));
        if (nv_push(p, &rhs, r, op, strlen(op))) return OOM();
    }
    if (!rhs.n) {
        *out = l;
        return Q_OK;
    }
    jnode *n = mk(p, JN_CMP, line);
    if (!n) return OOM();
    n->a = l, n->kids = rhs.v, n->n_kids = rhs.n, n->kwname = rhs.name, n->kwlen = rhs.len;
    *out = n;
    return Q_OK;
}

static qstatus parse_not(parser *p, jnode **out) {
    if (is_name(p, "not")) {
        int line = peek(p)->line;
        p->i++;
        Q_TRY(enter(p));
        jnode *x, *n = mk(p, JN_NOT, line);
        if (!n) return OOM();
        Q_TRY(parse_not(p, &x));
        p->depth--;
        n->a = x;
        *out = n;
        return Q_OK;
    }
    return parse_compare(p, out);
}

static qstatus parse_logic(parser *p, int is_or, jnode **out) {
    jnode *l = NULL;
    if (is_or) Q_TRY(parse_logic(p, 0, &l));
    else Q_TRY(parse_not(p, &l));
    while (is_name(p, is_or ? "or" : "and")) {
        int line = peek(p)->line;
        p->i++;
        jnode *r = NULL, *n = mk(p, is_or ? JN_OR : JN_AND, line);
        if (!n) return OOM();
        if (is_or) Q_TRY(parse_logic(p, 0, &r));
        else Q_TRY(parse_not(p, &r));
        n->a = l, n->b = r;
        l = n;
    }
    *out = l;
    return Q_OK;
}

qstatus jinja_parse_or(parser *p, jnode **out) { return parse_logic(p, 1, out); }

qstatus jinja_parse_expr(parser *p, jnode **out) {
    Q_TRY(enter(p));
    jnode *x = NULL;
    Q_TRY(jinja_parse_or(p, &x));
    while (is_name(p, "if")) {
        int line = peek(p)->line;
        p->i++;
        jnode *n = mk(p, JN_COND, line);
        if (!n) return OOM();
        n->a = x;
        Q_TRY(jinja_parse_or(p, &n->b));
        if (skip_name(p, "else")) Q_TRY(jinja_parse_expr(p, &n->c));
        x = n;
    }
    p->depth--;
    *out = x;
    return Q_OK;
}
