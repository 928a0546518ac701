/* jinja_eval.c: renders a parsed template: expression evaluation, statements, scopes, calls, macros.
 * Scoping follows jinja2: the template's top level is one scope (render variables + top-level set);
 * each for-loop iteration starts a fresh scope over the enclosing one (a set inside a loop does not
 * leak out, hence namespace()); if does not open a scope; a macro call gets a scope of its own over
 * the top level. Globals: raise_exception, namespace, range, strftime_now, dict; render variables
 * shadow them.
 * Invariants: every value lives in the render arena; macro calls nest at most JINJA_MAX_DEPTH deep;
 * errors name the template line ("chat template line N: ..."), except raise_exception whose message
 * is passed through unchanged (Q_EINVAL).
 * Not here: operators and access (jinja_ops.c), filters, tests and methods (jinja_filters.c), text
 * forms (jinja_value.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja.h"

struct jscope {
    jdict *vars;
    jscope *parent;
};

typedef struct rctx {
    jctx cx;
    jbuf *out;
    int flow;   /* 1 break, 2 continue pending */
    int edepth; /* eval + exec_body recursion depth, <= JINJA_MAX_EVAL_DEPTH */
} rctx;

#define OOM() q_fail(Q_ENOMEM, "chat template: out of memory rendering")
#define FAIL(st, ...) q_fail(st, "chat template line %d: " __VA_ARGS__)

static qstatus eval(rctx *r, jscope *sc, const jnode *n, jv *out);
static qstatus exec_body(rctx *r, jscope *sc, const jnode *body);

static jscope *scope_new(jarena *a, jscope *parent) {
    jscope *s = ja_alloc(a, sizeof *s);
    if (!s || !(s->vars = jd_new(a, 0))) return NULL;
    s->parent = parent;
    return s;
}

static const jv *lookup(jscope *sc, const char *name, size_t n) {
    for (; sc; sc = sc->parent) {
        const jv *v = jd_get(sc->vars, name, n);
        if (v) return v;
    }
    return NULL;
}


typedef struct args {
    jv *pos, *kw;
    size_t n_pos, n_kw;
} args;

static qstatus eval_args(rctx *r, jscope *sc, const jnode *n, args *ag) {
    ag->n_pos = n->n_kids, ag->n_kw = n->n_kw;
    ag->pos = ja_alloc(r->cx.a, (n->n_kids + 1) * sizeof(jv));
    ag->kw = ja_alloc(r->cx.a, (n->n_kw + 1) * sizeof(jv));
    if (!ag->pos || !ag->kw) return OOM();
    for (size_t i = 0; i < n->n_kids; i++) Q_TRY(eval(r, sc, n->kids[i], &ag->pos[i]));
    for (size_t i = 0; i < n->n_kw; i++) Q_TRY(eval(r, sc, n->kw[i], &ag->kw[i]));
    return Q_OK;
}

static qstatus call_macro(rctx *r, const jnode *call, const jnode *m, const args *ag, jv *out) {
    if (r->cx.depth >= JINJA_MAX_DEPTH) return FAIL(Q_EUNSUPPORTED, "macro calls nested deeper than %d", r->cx.line, JINJA_MAX_DEPTH);
    if (ag->n_pos > m->n_kids) return FAIL(Q_EINVAL, "macro '%.*s' takes no more than %zu arguments", r->cx.line, (int)m->n, m->s, m->n_kids);
    jscope *sc = scope_new(r->cx.a, r->cx.globals);
    if (!sc) return OOM();
    for (size_t k = 0; k < call->n_kw; k++) {
        size_t p = 0;
        while (p < m->n_kids && !(m->kids[p]->n == call->kwlen[k] && !memcmp(m->kids[p]->s, call->kwname[k], call->kwlen[k]))) p++;
        if (p == m->n_kids) return FAIL(Q_EINVAL, "macro '%.*s' has no parameter '%.*s'", r->cx.line, (int)m->n, m->s, (int)call->kwlen[k], call->kwname[k]);
    }
    for (size_t p = 0; p < m->n_kids; p++) {
        jv v = jv_undef();
        int set = 0;
        if (p < ag->n_pos) v = ag->pos[p], set = 1;
        for (size_t k = 0; k < call->n_kw; k++)
            if (m->kids[p]->n == call->kwlen[k] && !memcmp(m->kids[p]->s, call->kwname[k], call->kwlen[k])) v = ag->kw[k], set = 1;
        if (!set && m->kw[p]) Q_TRY(eval(r, sc, m->kw[p], &v));
        if (jd_set(r->cx.a, sc->vars, jv_str(m->kids[p]->s, m->kids[p]->n), v)) return OOM();
    }
    jbuf buf = {0}, *saved = r->out;
    r->out = &buf;
    r->cx.depth++;
    qstatus rc = exec_body(r, sc, m->b);
    r->cx.depth--;
    r->out = saved;
    r->flow = 0;
    if (rc == Q_OK) {
        char *s = buf.oom ? NULL : ja_strdup(r->cx.a, buf.p ? buf.p : "", buf.n);
        if (!s) rc = OOM();
        else *out = jv_str(s, buf.n);
    }
    free(buf.p);
    return rc;
}

static qstatus call_func(rctx *r, const jnode *call, int f, const args *ag, jv *out) {
    if (f == JF_RAISE) {
        jv msg = ag->n_pos ? ag->pos[0] : jv_str("", 0);
        jbuf b = {0};
        jv_to_str(&b, msg);
        q_fail(Q_EINVAL, "%s", b.p ? b.p : "");
        free(b.p);
        return Q_EINVAL;
    }
    if (f == JF_NAMESPACE || f == JF_DICT) {
        jdict *d = jd_new(r->cx.a, 0);
        if (!d) return OOM();
        if (ag->n_pos > 1 || (ag->n_pos == 1 && ag->pos[0].k != JV_DICT))
            return FAIL(Q_EUNSUPPORTED, "namespace()/dict() takes keyword arguments or one dict", r->cx.line);
        if (ag->n_pos == 1)
            for (size_t i = 0; i < ag->pos[0].u.d->n; i++)
                if (jd_set(r->cx.a, d, ag->pos[0].u.d->key[i], ag->pos[0].u.d->val[i])) return OOM();
        for (size_t i = 0; i < ag->n_kw; i++)
            if (jd_set(r->cx.a, d, jv_str(call->kwname[i], call->kwlen[i]), ag->kw[i])) return OOM();
        out->k = f == JF_DICT ? JV_DICT : JV_NS, out->u.d = d;
        return Q_OK;
    }
    if (f == JF_RANGE) {
        int64_t v[3] = {0, 0, 1};
        if (ag->n_pos < 1 || ag->n_pos > 3 || ag->n_kw) return FAIL(Q_EINVAL, "range() takes 1 to 3 integers", r->cx.line);
        for (size_t i = 0; i < ag->n_pos; i++) {
            if (ag->pos[i].k != JV_INT) return FAIL(Q_EINVAL, "range() takes integers", r->cx.line);
            v[ag->n_pos == 1 ? 1 : i] = ag->pos[i].u.i;
        }
        if (v[2] == 0) return FAIL(Q_EINVAL, "range() step must not be zero", r->cx.line);
        jlist *l = jl_new(r->cx.a, 0);
        if (!l) return OOM();
        for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
            if (l->n >= 100000) return FAIL(Q_EFULL, "range() longer than 100000", r->cx.line);
            if (jl_push(r->cx.a, l, jv_int(i))) return OOM();
        }
        out->k = JV_LIST, out->u.l = l;
        return Q_OK;
    }
    /* strftime_now(format): local time now, as transformers' datetime.now().strftime */
    if (ag->n_pos != 1 || ag->pos[0].k != JV_STR) return FAIL(Q_EINVAL, "strftime_now() takes one format string", r->cx.line);
    char fmt[256], buf[512];
    if (ag->pos[0].u.s.n >= sizeof fmt) return FAIL(Q_EUNSUPPORTED, "strftime_now() format too long", r->cx.line);
    memcpy(fmt, ag->pos[0].u.s.p, ag->pos[0].u.s.n);
    fmt[ag->pos[0].u.s.n] = 0;
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    size_t k = strftime(buf, sizeof buf, fmt, &tm);
    char *s = ja_strdup(r->cx.a, buf, k);
    if (!s) return OOM();
    *out = jv_str(s, k);
    return Q_OK;
}

static qstatus eval_call(rctx *r, jscope *sc, const jnode *n, jv *out) {
    jv fn;
    args ag;
    Q_TRY(eval(r, sc, n->a, &fn));
    Q_TRY(eval_args(r, sc, n, &ag));
    r->cx.line = n->line;
    switch (fn.k) {
    case JV_MACRO: return call_macro(r, n, fn.u.macro, &ag, out);
    case JV_FUNC: return call_func(r, n, fn.u.func, &ag, out);
    case JV_METHOD: return jinja_method_call(&r->cx, fn.u.m, ag.pos, ag.n_pos, n->kwname, n->kwlen, ag.kw, ag.n_kw, out);
    case JV_UNDEF:
        if (n->a->kind == JN_NAME)
            return FAIL(Q_EUNSUPPORTED, "unknown function '%.*s'", r->cx.line, (int)n->a->n, n->a->s);
        if (n->a->kind == JN_ATTR)
            return FAIL(Q_EUNSUPPORTED, "unknown method '%.*s'", r->cx.line, (int)n->a->n, n->a->s);
        return jinja_op_undefined(&r->cx, n->a, "call");
    default: return FAIL(Q_EINVAL, "'%s' object is not callable", r->cx.line, jv_kind_name(fn));
    }
}

static qstatus eval_node(rctx *r, jscope *sc, const jnode *n, jv *out);

/* Every recursion of the evaluator goes through eval or exec_body, which bound its depth: a chain
 * like x|trim|trim|... or a+a+a+... parses without recursion but evaluates recursively. */
static qstatus eval(rctx *r, jscope *sc, const jnode *n, jv *out) {
    if (r->edepth >= JINJA_MAX_EVAL_DEPTH)
        return FAIL(Q_EUNSUPPORTED, "expression nested deeper than %d", n->line, JINJA_MAX_EVAL_DEPTH);
    r->edepth++;
    qstatus rc = eval_node(r, sc, n, out);
    r->edepth--;
    return rc;
}

static qstatus eval_node(rctx *r, jscope *sc, const jnode *n, jv *out) {
    jv a, b;
    r->cx.line = n->line;
    switch (n->kind) {
    case JN_LIT: *out = n->lit; return Q_OK;
    case JN_NAME: {
        const jv *v = lookup(sc, n->s, n->n);
        *out = v ? *v : jv_undef();
        return Q_OK;
    }
    case JN_ATTR: Q_TRY(eval(r, sc, n->a, &a)); r->cx.line = n->line; return jinja_op_attr(&r->cx, n, a, n->s, n->n, out);
    case JN_ITEM:
        Q_TRY(eval(r, sc, n->a, &a));
        Q_TRY(eval(r, sc, n->b, &b));
        r->cx.line = n->line;
        return jinja_op_item(&r->cx, n, a, b, out);
    case JN_SLICE: {
        jv p[3] = {jv_undef(), jv_undef(), jv_undef()};
        Q_TRY(eval(r, sc, n->a, &a));
        for (int k = 0; k < 3; k++)
            if (n->kids[k]) Q_TRY(eval(r, sc, n->kids[k], &p[k]));
        r->cx.line = n->line;
        return jinja_op_slice(&r->cx, n, a, p, out);
    }
    case JN_CALL: return eval_call(r, sc, n, out);
    case JN_FILTER: {
        args ag;
        Q_TRY(eval(r, sc, n->a, &a));
        Q_TRY(eval_args(r, sc, n, &ag));
        r->cx.line = n->line;
        return jinja_filter(&r->cx, n->s, n->n, a, ag.pos, ag.n_pos, n->kwname, n->kwlen, ag.kw, ag.n_kw, out);
    }
    case JN_TEST: {
        args ag;
        int t;
        Q_TRY(eval(r, sc, n->a, &a));
        Q_TRY(eval_args(r, sc, n, &ag));
        r->cx.line = n->line;
        Q_TRY(jinja_test(&r->cx, n->s, n->n, a, ag.pos, ag.n_pos, &t));
        *out = jv_bool(n->neg ? !t : t);
        return Q_OK;
    }
    case JN_NOT: Q_TRY(eval(r, sc, n->a, &a)); *out = jv_bool(!jv_truthy(a)); return Q_OK;
    case JN_NEG: case JN_POS:
        Q_TRY(eval(r, sc, n->a, &a));
        r->cx.line = n->line;
        if (a.k == JV_FLOAT) *out = jv_float(n->kind == JN_NEG ? -a.u.f : a.u.f);
        else if ((a.k == JV_INT || a.k == JV_BOOL) && !(a.k == JV_INT && a.u.i == INT64_MIN)) {
            int64_t i = a.k == JV_INT ? a.u.i : a.u.b;
            *out = jv_int(n->kind == JN_NEG ? -i : i);
        }
        else return FAIL(Q_EINVAL, "bad operand type for unary -/+: '%s'", r->cx.line, jv_kind_name(a));
        return Q_OK;
    case JN_BINOP:
        Q_TRY(eval(r, sc, n->a, &a));
        Q_TRY(eval(r, sc, n->b, &b));
        r->cx.line = n->line;
        return jinja_op_binop(&r->cx, n, a, b, out);
    case JN_CMP: {
        Q_TRY(eval(r, sc, n->a, &a));
        int t = 1;
        for (size_t k = 0; k < n->n_kids && t; k++) {
            Q_TRY(eval(r, sc, n->kids[k], &b));
            r->cx.line = n->line;
            Q_TRY(jinja_op_compare(&r->cx, n->kwname[k], a, b, &t));
            a = b;
        }
        *out = jv_bool(t);
        return Q_OK;
    }
    case JN_AND: case JN_OR:
        Q_TRY(eval(r, sc, n->a, &a));
        if (jv_truthy(a) == (n->kind == JN_OR)) { *out = a; return Q_OK; }
        return eval(r, sc, n->b, out);
    case JN_COND:
        Q_TRY(eval(r, sc, n->b, &a));
        if (jv_truthy(a)) return eval(r, sc, n->a, out);
        if (n->c) return eval(r, sc, n->c, out);
        *out = jv_undef();
        return Q_OK;
    case JN_LIST: {
        jlist *l = jl_new(r->cx.a, n->n_kids);
        if (!l) return OOM();
        for (size_t k = 0; k < n->n_kids; k++) Q_TRY(eval(r, sc, n->kids[k], &l->v[l->n++]));
        l->form = n->neg ? JL_TUPLE : JL_LIST;
        out->k = JV_LIST, out->u.l = l;
        return Q_OK;
    }
    case JN_DICT: {
        jdict *d = jd_new(r->cx.a, 0);
        if (!d) return OOM();
        for (size_t k = 0; k < n->n_kids; k++) {
            Q_TRY(eval(r, sc, n->kids[k], &a));
            Q_TRY(eval(r, sc, n->kw[k], &b));
            if (jd_set(r->cx.a, d, a, b)) return OOM();
        }
        out->k = JV_DICT, out->u.d = d;
        return Q_OK;
    }
    default: return FAIL(Q_EINVAL, "statement used as an expression", n->line);
    }
}

/* ---- statements ------------------------------------------------------------------------------ */

static qstatus assign(rctx *r, jscope *sc, const jnode *target, jv v) {
    if (target->kind == JN_NAME)
        return jd_set(r->cx.a, sc->vars, jv_str(target->s, target->n), v) ? OOM() : Q_OK;
    jv ns;
    Q_TRY(eval(r, sc, target->a, &ns));
    if (ns.k != JV_NS) return FAIL(Q_EINVAL, "can only set attributes of a namespace, not of a %s", target->line, jv_kind_name(ns));
    return jd_set(r->cx.a, ns.u.d, jv_str(target->s, target->n), v) ? OOM() : Q_OK;
}

static qstatus assign_targets(rctx *r, jscope *sc, jnode *const *targets, size_t n, jv v, int line) {
    if (n == 1) return assign(r, sc, targets[0], v);
    jlist *items;
    r->cx.line = line;
    Q_TRY(jinja_iterate(&r->cx, v, &items));
    if (items->n != n) return FAIL(Q_EINVAL, "cannot unpack %zu values into %zu names", line, items->n, n);
    for (size_t i = 0; i < n; i++) Q_TRY(assign(r, sc, targets[i], items->v[i]));
    return Q_OK;
}

static qstatus exec_for(rctx *r, jscope *sc, const jnode *n) {
    jv it;
    jlist *items;
    Q_TRY(eval(r, sc, n->a, &it));
    r->cx.line = n->line;
    Q_TRY(jinja_iterate(&r->cx, it, &items));
    if (n->d) { /* the loop's if-filter sees the targets, not `loop` */
        jlist *kept = jl_new(r->cx.a, 0);
        if (!kept) return OOM();
        for (size_t i = 0; i < items->n; i++) {
            jscope *f = scope_new(r->cx.a, sc);
            jv c;
            if (!f) return OOM();
            Q_TRY(assign_targets(r, f, n->kids, n->n_kids, items->v[i], n->line));
            Q_TRY(eval(r, f, n->d, &c));
            if (jv_truthy(c) && jl_push(r->cx.a, kept, items->v[i])) return OOM();
        }
        items = kept;
    }
    jloop *lp = ja_alloc(r->cx.a, sizeof *lp);
    if (!lp) return OOM();
    lp->items = items;
    for (size_t i = 0; i < items->n; i++) {
        jscope *f = scope_new(r->cx.a, sc);
        if (!f) return OOM();
        lp->index0 = i;
        jv lv = {.k = JV_LOOP, .u.loop = lp};
        if (jd_set(r->cx.a, f->vars, jv_str("loop", 4), lv)) return OOM();
        Q_TRY(assign_targets(r, f, n->kids, n->n_kids, items->v[i], n->line));
        Q_TRY(exec_body(r, f, n->b));
        if (r->flow == 1) { r->flow = 0; break; }
        r->flow = 0;
    }
    if (!items->n && n->c) return exec_body(r, sc, n->c);
    return Q_OK;
}

static qstatus exec_stmt(rctx *r, jscope *sc, const jnode *n) {
    jv v;
    r->cx.line = n->line;
    switch (n->kind) {
    case JN_DATA: jb_put(r->out, n->s, n->n); return Q_OK;
    case JN_OUTPUT:
        Q_TRY(eval(r, sc, n->a, &v));
        if (jv_to_str(r->out, v)) return FAIL(Q_EUNSUPPORTED, "cannot print a %s", n->line, jv_kind_name(v));
        return Q_OK;
    case JN_IF:
        Q_TRY(eval(r, sc, n->a, &v));
        if (jv_truthy(v)) return exec_body(r, sc, n->b);
        if (!n->c) return Q_OK;
        return n->c->kind == JN_IF ? exec_stmt(r, sc, n->c) : exec_body(r, sc, n->c);
    case JN_FOR: return exec_for(r, sc, n);
    case JN_SET:
        Q_TRY(eval(r, sc, n->a, &v));
        return assign_targets(r, sc, n->kids, n->n_kids, v, n->line);
    case JN_SETBLOCK: {
        jbuf buf = {0}, *saved = r->out;
        r->out = &buf;
        qstatus rc = exec_body(r, sc, n->b);
        r->out = saved;
        char *s = (rc || buf.oom) ? NULL : ja_strdup(r->cx.a, buf.p ? buf.p : "", buf.n);
        size_t sn = buf.n;
        free(buf.p);
        if (rc) return rc;
        if (!s) return OOM();
        return assign(r, sc, n->kids[0], jv_str(s, sn));
    }
    case JN_MACRO: {
        jv m = {.k = JV_MACRO, .u.macro = n};
        return jd_set(r->cx.a, sc->vars, jv_str(n->s, n->n), m) ? OOM() : Q_OK;
    }
    case JN_BREAK: r->flow = 1; return Q_OK;
    case JN_CONTINUE: r->flow = 2; return Q_OK;
    case JN_BODY: return exec_body(r, sc, n);
    default: return FAIL(Q_EINVAL, "expression used as a statement", n->line);
    }
}

static qstatus exec_body(rctx *r, jscope *sc, const jnode *body) {
    qstatus rc = Q_OK;
    if (r->edepth >= JINJA_MAX_EVAL_DEPTH)
        return FAIL(Q_EUNSUPPORTED, "blocks and macro calls nested deeper than %d", body->line, JINJA_MAX_EVAL_DEPTH);
    r->edepth++;
    for (size_t i = 0; i < body->n_kids && !r->flow && rc == Q_OK; i++) {
        rc = exec_stmt(r, sc, body->kids[i]);
        if (rc == Q_OK && r->out->oom) rc = OOM();
    }
    r->edepth--;
    return rc;
}

qstatus jinja_compile(const char *src, size_t n, jinja_tmpl **out) {
    jinja_tmpl *t = calloc(1, sizeof *t);
    jtok *toks;
    size_t nt;
    if (!t) return OOM();
    qstatus rc = jinja_lex(&t->arena, src, n, &toks, &nt);
    if (rc == Q_OK) rc = jinja_parse(&t->arena, toks, nt, &t->root);
    if (rc) {
        jinja_free(t);
        return rc;
    }
    *out = t;
    return Q_OK;
}

void jinja_free(jinja_tmpl *t) {
    if (!t) return;
    ja_free_all(&t->arena);
    free(t);
}

qstatus jinja_render(const jinja_tmpl *t, const json_t *vars, char **out, size_t *n_out) {
    static const struct { const char *name; int f; } funcs[] = {
        {"raise_exception", JF_RAISE}, {"namespace", JF_NAMESPACE}, {"range", JF_RANGE},
        {"strftime_now", JF_STRFTIME}, {"dict", JF_DICT}};
    jarena a = {0};
    jbuf buf = {0};
    rctx r = {.cx = {.a = &a}, .out = &buf};
    qstatus rc = Q_OK;
    jscope *g = scope_new(&a, NULL);
    if (!g) { rc = OOM(); goto out; }
    r.cx.globals = g;
    for (size_t i = 0; i < sizeof funcs / sizeof *funcs; i++) {
        jv f = {.k = JV_FUNC, .u.func = funcs[i].f};
        if (jd_set(&a, g->vars, jv_str(funcs[i].name, strlen(funcs[i].name)), f)) { rc = OOM(); goto out; }
    }
    if (vars) {
        if (!json_is_object(vars)) { rc = q_fail(Q_EINVAL, "template variables must be a JSON object"); goto out; }
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)vars, key, val) {
            jv v;
            rc = jv_from_json(&a, val, &v, 0);
            if (rc) goto out;
            if (jd_set(&a, g->vars, jv_str(key, strlen(key)), v)) { rc = OOM(); goto out; }
        }
    }
    rc = exec_body(&r, g, t->root);
    if (rc == Q_OK && buf.oom) rc = OOM();
    if (rc == Q_OK && !buf.p) {
        buf.p = malloc(1);
        if (!buf.p) rc = OOM();
        else buf.p[0] = 0;
    }
out:
    ja_free_all(&a);
    if (rc) {
        free(buf.p);
        return rc;
    }
    *out = buf.p;
    *n_out = buf.n;
    return Q_OK;
}
