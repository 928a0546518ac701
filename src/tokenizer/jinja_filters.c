/* jinja_filters.c: the filters and tests a chat template may call, with the semantics of jinja2 3.1
 * as transformers runs it (tojson is transformers' own: json.dumps(ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False)), and Python iteration of values.
 * Filters: tojson trim length count string items safe list first last join upper lower default d
 *   replace int float abs reverse map select reject selectattr rejectattr.
 * Tests: defined undefined none string number integer float boolean true false mapping sequence
 *   iterable callable odd even divisibleby eq equalto == ne != lt < le <= gt > ge >= in sameas.
 * Invariants: results live in the render arena; map/select/reject/selectattr/rejectattr/reverse/
 * items return generators (JL_GEN: iterable, not printable), as jinja2's do; a filter or test jinja2
 * has but we do not fails with Q_EUNSUPPORTED naming the line (never a silently different result).
 * Not here: str/dict methods and string operations (jinja_methods.c), operators (jinja_ops.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

#define OOM() q_fail(Q_ENOMEM, "chat template: out of memory rendering")
#define FAIL(st, ...) q_fail(st, "chat template line %d: " __VA_ARGS__)
#define IS(s, n, lit) ((n) == sizeof(lit) - 1 && memcmp((s), (lit), (n)) == 0)

qstatus jinja_str_from_buf(jctx *cx, jbuf *b, jv *out) {
    char *s = b->oom ? NULL : ja_strdup(cx->a, b->p ? b->p : "", b->n);
    size_t n = b->n;
    free(b->p);
    if (!s) return OOM();
    *out = jv_str(s, n);
    return Q_OK;
}

qstatus jinja_need_str(jctx *cx, jv v, const char *what) {
    if (v.k == JV_STR) return Q_OK;
    return FAIL(Q_EINVAL, "%s expects a string, got %s", cx->line, what, jv_kind_name(v));
}
qstatus jinja_iterate(jctx *cx, jv v, jlist **out) {
    jlist *l;
    switch (v.k) {
    case JV_LIST: *out = v.u.l; return Q_OK;
    case JV_UNDEF: return (*out = jl_new(cx->a, 0)) ? Q_OK : OOM();
    case JV_DICT:
        if (!(l = jl_new(cx->a, v.u.d->n))) return OOM();
        for (size_t i = 0; i < v.u.d->n; i++) l->v[l->n++] = v.u.d->key[i];
        *out = l;
        return Q_OK;
    case JV_STR:
        if (!(l = jl_new(cx->a, 0))) return OOM();
        for (size_t i = 0; i < v.u.s.n;) {
            uint32_t cp;
            size_t k = ju_decode(v.u.s.p + i, v.u.s.n - i, &cp);
            if (jl_push(cx->a, l, jv_str(v.u.s.p + i, k))) return OOM();
            i += k;
        }
        *out = l;
        return Q_OK;
    default: return FAIL(Q_EINVAL, "'%s' object is not iterable", cx->line, jv_kind_name(v));
    }
}

/* ---- tests ----------------------------------------------------------------------------------- */

qstatus jinja_test(jctx *cx, const char *name, size_t n, jv v, const jv *args, size_t n_args, int *out) {
    const jv *a0 = n_args ? &args[0] : NULL;
#define T(lit) IS(name, n, lit)
    if (T("defined")) *out = v.k != JV_UNDEF;
    else if (T("undefined")) *out = v.k == JV_UNDEF;
    else if (T("none")) *out = v.k == JV_NONE;
    else if (T("string")) *out = v.k == JV_STR;
    else if (T("number")) *out = v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL;
    else if (T("integer")) *out = v.k == JV_INT;
    else if (T("float")) *out = v.k == JV_FLOAT;
    else if (T("boolean")) *out = v.k == JV_BOOL;
    else if (T("true")) *out = v.k == JV_BOOL && v.u.b;
    else if (T("false")) *out = v.k == JV_BOOL && !v.u.b;
    else if (T("mapping")) *out = v.k == JV_DICT;
    else if (T("sequence")) *out = v.k == JV_STR || v.k == JV_DICT || v.k == JV_UNDEF || (v.k == JV_LIST && v.u.l->form <= JL_TUPLE);
    else if (T("iterable")) *out = v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT || v.k == JV_UNDEF;
    else if (T("callable")) *out = v.k == JV_MACRO || v.k == JV_FUNC || v.k == JV_METHOD;
    else if (T("odd") || T("even") || T("divisibleby")) {
        if (v.k != JV_INT) return FAIL(Q_EINVAL, "test '%.*s' needs an integer", cx->line, (int)n, name);
        int64_t d = T("divisibleby") ? jinja_int_arg(a0, 0) : 2;
        if (d == 0) return FAIL(Q_EINVAL, "divisibleby 0", cx->line);
        int64_t m = v.u.i % d;
        *out = T("odd") ? m != 0 : m == 0;
    } else if (T("eq") || T("equalto") || T("==") || T("ne") || T("!=") || T("sameas")) {
        if (!a0) return FAIL(Q_EINVAL, "test '%.*s' needs an argument", cx->line, (int)n, name);
        if (T("sameas") && (v.k > JV_BOOL || a0->k > JV_BOOL))
            return FAIL(Q_EUNSUPPORTED, "'sameas' only for none/true/false", cx->line);
        *out = (T("sameas") && v.k != a0->k) ? 0 : jv_equal(v, *a0);
        if (T("ne") || T("!=")) *out = !*out;
    } else if (T("lt") || T("<") || T("le") || T("<=") || T("gt") || T(">") || T("ge") || T(">=")) {
        if (!a0) return FAIL(Q_EINVAL, "test '%.*s' needs an argument", cx->line, (int)n, name);
        int num = (v.k == JV_INT || v.k == JV_FLOAT) && (a0->k == JV_INT || a0->k == JV_FLOAT);
        if (!num) return FAIL(Q_EUNSUPPORTED, "test '%.*s' only for numbers", cx->line, (int)n, name);
        double x = v.k == JV_INT ? (double)v.u.i : v.u.f, y = a0->k == JV_INT ? (double)a0->u.i : a0->u.f;
        *out = name[0] == 'l' || name[0] == '<' ? (n == 2 && name[1] != 't' ? x <= y : x < y) : (n == 2 && name[1] != 't' ? x >= y : x > y);
    } else if (T("in")) {
        if (!a0) return FAIL(Q_EINVAL, "test 'in' needs an argument", cx->line);
        jlist *l;
        if (a0->k == JV_STR) {
            if (v.k != JV_STR) return FAIL(Q_EINVAL, "'in <string>' needs a string", cx->line);
            *out = jinja_str_find(a0->u.s.p, a0->u.s.n, v.u.s.p, v.u.s.n) != NULL;
            return Q_OK;
        }
        if (a0->k == JV_DICT) { *out = jd_getv(a0->u.d, v) != NULL; return Q_OK; }
        Q_TRY(jinja_iterate(cx, *a0, &l));
        *out = 0;
        for (size_t i = 0; i < l->n && !*out; i++) *out = jv_equal(l->v[i], v);
    } else return FAIL(Q_EUNSUPPORTED, "unknown test '%.*s'", cx->line, (int)n, name);
#undef T
    return Q_OK;
}

/* ---- filters --------------------------------------------------------------------------------- */

static jv attr_of(jv item, jv attr) {
    /* jinja2 make_attrgetter: dotted path of keys (integers index lists) */
    if (attr.k != JV_STR) return jv_undef();
    const char *p = attr.u.s.p, *end = p + attr.u.s.n;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t len = dot ? (size_t)(dot - p) : (size_t)(end - p);
        if (item.k == JV_DICT || item.k == JV_NS) {
            const jv *v = jd_get(item.u.d, p, len);
            item = v ? *v : jv_undef();
        } else return jv_undef();
        if (!dot) break;
        p = dot + 1;
    }
    return item;
}

static const jv *kwarg(const char **kwname, const size_t *kwlen, const jv *kw, size_t n_kw, const char *name) {
    for (size_t k = 0; k < n_kw; k++)
        if (kwlen[k] == strlen(name) && memcmp(kwname[k], name, kwlen[k]) == 0) return &kw[k];
    return NULL;
}

static qstatus select_filter(jctx *cx, const char *name, size_t n, jv in, const jv *args, size_t n_args, jv *out) {
    int attr = name[n - 4] == 'a' && n > 6; /* selectattr / rejectattr */
    int reject = name[0] == 'r';
    jlist *l, *res = jl_new(cx->a, 0);
    if (!res) return OOM();
    Q_TRY(jinja_iterate(cx, in, &l));
    if (attr && n_args < 1) return FAIL(Q_EINVAL, "%.*s needs an attribute", cx->line, (int)n, name);
    size_t ti = attr ? 1 : 0;
    for (size_t i = 0; i < l->n; i++) {
        jv x = attr ? attr_of(l->v[i], args[0]) : l->v[i];
        int t;
        if (n_args > ti) {
            if (args[ti].k != JV_STR) return FAIL(Q_EINVAL, "%.*s: test name must be a string", cx->line, (int)n, name);
            Q_TRY(jinja_test(cx, args[ti].u.s.p, args[ti].u.s.n, x, args + ti + 1, n_args - ti - 1, &t));
        } else t = jv_truthy(x);
        if (t != reject && jl_push(cx->a, res, l->v[i])) return OOM();
    }
    res->form = JL_GEN;
    out->k = JV_LIST, out->u.l = res;
    return Q_OK;
}

qstatus jinja_filter(jctx *cx, const char *name, size_t n, jv in, const jv *args, size_t n_args,
                     const char **kwname, const size_t *kwlen, const jv *kw, size_t n_kw, jv *out) {
    const jv *a0 = n_args ? &args[0] : NULL;
    jbuf b = {0};
    jlist *l;
#define F(lit) IS(name, n, lit)
    if (F("safe")) { *out = in; return Q_OK; }
    if (F("tojson")) {
        const jv *ind = kwarg(kwname, kwlen, kw, n_kw, "indent"), *sk = kwarg(kwname, kwlen, kw, n_kw, "sort_keys");
        const jv *ea = kwarg(kwname, kwlen, kw, n_kw, "ensure_ascii");
        if (!ind && a0) ind = a0;
        if (n_args > 1 || kwarg(kwname, kwlen, kw, n_kw, "separators") || (ea && jv_truthy(*ea)) ||
            (ind && ind->k != JV_INT && ind->k != JV_NONE))
            return FAIL(Q_EUNSUPPORTED, "tojson: only indent (int) and sort_keys supported", cx->line);
        qstatus rc = jv_to_json(&b, in, ind && ind->k == JV_INT ? (int)jinja_int_arg(ind, -1) : -1, sk ? jv_truthy(*sk) : 0);
        if (rc) { free(b.p); return q_wrap(rc, "chat template line %d", cx->line); }
        return jinja_str_from_buf(cx, &b, out);
    }
    if (F("string")) return jv_as_str(cx->a, in, out) ? FAIL(Q_EUNSUPPORTED, "cannot convert a %s to a string", cx->line, jv_kind_name(in)) : Q_OK;
    if (F("trim")) {
        jv s;
        if (a0 && a0->k != JV_STR && a0->k != JV_NONE) return FAIL(Q_EINVAL, "trim chars must be a string", cx->line);
        Q_TRY(jv_as_str(cx->a, in, &s));
        *out = jinja_str_strip(s, (a0 && a0->k == JV_STR) ? a0 : NULL, 1, 1);
        return Q_OK;
    }
    if (F("length") || F("count")) {
        switch (in.k) {
        case JV_UNDEF: *out = jv_int(0); return Q_OK;
        case JV_STR: *out = jv_int((int64_t)ju_count(in.u.s.p, in.u.s.n)); return Q_OK;
        case JV_LIST:
            if (in.u.l->form == JL_GEN) return FAIL(Q_EINVAL, "object of type 'generator' has no len()", cx->line);
            *out = jv_int((int64_t)in.u.l->n);
            return Q_OK;
        case JV_DICT: *out = jv_int((int64_t)in.u.d->n); return Q_OK;
        default: return FAIL(Q_EINVAL, "object of type '%s' has no len()", cx->line, jv_kind_name(in));
        }
    }
    if (F("items")) {
        if (in.k == JV_UNDEF) return (out->k = JV_LIST, out->u.l = jl_new(cx->a, 0)) ? Q_OK : OOM();
        if (in.k != JV_DICT) return FAIL(Q_EINVAL, "items: can only get item pairs from a mapping, not a %s", cx->line, jv_kind_name(in));
        jmethod m = {.self = in, .name = "items"};
        Q_TRY(jinja_method_call(cx, &m, NULL, 0, NULL, NULL, NULL, 0, out));
        out->u.l->form = JL_GEN;
        return Q_OK;
    }
    if (F("list")) {
        Q_TRY(jinja_iterate(cx, in, &l));
        jlist *c = jl_new(cx->a, l->n);
        if (!c) return OOM();
        for (size_t i = 0; i < l->n; i++) c->v[c->n++] = l->v[i];
        out->k = JV_LIST, out->u.l = c;
        return Q_OK;
    }
    if (F("first") || F("last") || F("reverse")) {
        Q_TRY(jinja_iterate(cx, in, &l));
        if (F("reverse")) {
            jlist *r = jl_new(cx->a, l->n);
            if (!r) return OOM();
            for (size_t i = l->n; i-- > 0;) r->v[r->n++] = l->v[i];
            r->form = JL_GEN;
            if (in.k != JV_STR) { out->k = JV_LIST, out->u.l = r; return Q_OK; }
            return jinja_str_join(cx, r, jv_str("", 0), 0, out);
        }
        if (F("last") && in.k == JV_LIST && in.u.l->form == JL_GEN) return FAIL(Q_EINVAL, "last: a generator is not reversible", cx->line);
        *out = !l->n ? jv_undef() : F("first") ? l->v[0] : l->v[l->n - 1];
        return Q_OK;
    }
    if (F("join")) {
        const jv *attr = kwarg(kwname, kwlen, kw, n_kw, "attribute");
        jv sep = a0 ? *a0 : jv_str("", 0);
        Q_TRY(jinja_need_str(cx, sep, "join separator"));
        Q_TRY(jinja_iterate(cx, in, &l));
        if (attr) {
            jlist *m = jl_new(cx->a, l->n);
            if (!m) return OOM();
            for (size_t i = 0; i < l->n; i++) m->v[m->n++] = attr_of(l->v[i], *attr);
            l = m;
        }
        return jinja_str_join(cx, l, sep, 0, out);
    }
    if (F("upper") || F("lower")) {
        jv s;
        Q_TRY(jv_as_str(cx->a, in, &s));
        return jinja_str_case(cx, s, F("upper"), out);
    }
    if (F("default") || F("d")) {
        const jv *bo = n_args > 1 ? &args[1] : kwarg(kwname, kwlen, kw, n_kw, "boolean");
        int use = in.k == JV_UNDEF || (bo && jv_truthy(*bo) && !jv_truthy(in));
        *out = use ? (a0 ? *a0 : jv_str("", 0)) : in;
        return Q_OK;
    }
    if (F("replace")) {
        jv s;
        if (n_args < 2) return FAIL(Q_EINVAL, "replace needs 2 arguments", cx->line);
        Q_TRY(jv_as_str(cx->a, in, &s));
        return jinja_str_replace(cx, s, args[0], args[1], jinja_int_arg(n_args > 2 ? &args[2] : NULL, -1), out);
    }
    if (F("int") || F("float") || F("abs")) {
        if (F("abs")) {
            if (in.k == JV_INT && in.u.i != INT64_MIN) *out = jv_int(in.u.i < 0 ? -in.u.i : in.u.i);
            else if (in.k == JV_FLOAT) *out = jv_float(in.u.f < 0 ? -in.u.f : in.u.f);
            else return FAIL(Q_EINVAL, "abs of a %s", cx->line, jv_kind_name(in));
            return Q_OK;
        }
        int want_int = F("int");
        double f = 0;
        int ok = 1;
        if (in.k == JV_INT || in.k == JV_BOOL) f = (double)(in.k == JV_INT ? in.u.i : in.u.b);
        else if (in.k == JV_FLOAT) f = in.u.f;
        else if (in.k == JV_STR) ok = jinja_parse_number(jinja_str_strip(in, NULL, 1, 1), &f);
        else ok = 0;
        if (want_int && ok && !isfinite(f)) ok = 0; /* int(nan/inf) fails: the default */
        if (!ok) *out = a0 ? *a0 : (want_int ? jv_int(0) : jv_float(0.0));
        else if (want_int && in.k == JV_INT) *out = in;
        else if (want_int && !(f > -9.2e18 && f < 9.2e18))
            return FAIL(Q_EUNSUPPORTED, "int: value out of range", cx->line);
        else *out = want_int ? jv_int((int64_t)f) : jv_float(f);
        return Q_OK;
    }
    if (F("map")) {
        const jv *attr = kwarg(kwname, kwlen, kw, n_kw, "attribute");
        Q_TRY(jinja_iterate(cx, in, &l));
        jlist *m = jl_new(cx->a, l->n);
        if (!m) return OOM();
        if (!attr && (!a0 || a0->k != JV_STR)) return FAIL(Q_EUNSUPPORTED, "map needs attribute= or a filter name", cx->line);
        for (size_t i = 0; i < l->n; i++) {
            if (attr) m->v[m->n++] = attr_of(l->v[i], *attr);
            else Q_TRY(jinja_filter(cx, a0->u.s.p, a0->u.s.n, l->v[i], args + 1, n_args - 1, NULL, NULL, NULL, 0, &m->v[m->n++]));
        }
        m->form = JL_GEN;
        out->k = JV_LIST, out->u.l = m;
        return Q_OK;
    }
    if (F("select") || F("reject") || F("selectattr") || F("rejectattr"))
        return select_filter(cx, name, n, in, args, n_args, out);
#undef F
    return FAIL(Q_EUNSUPPORTED, "unknown filter '%.*s'", cx->line, (int)n, name);
}
