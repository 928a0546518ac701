/* jinja_ops.c: what the evaluator does to values: attribute and item access (jinja2's getattr /
 * getitem order: a dict's methods before its keys for `.name`, keys before methods for `[key]`),
 * Python slicing, the loop variable's attributes, arithmetic (Python int/float rules, floor
 * division and modulo, overflow refused rather than wrapped), `~`, comparisons and `in`.
 * Undefined follows jinja2's default Undefined: printing and truth are fine, anything else fails.
 * Invariants: results live in the render arena; errors name cx->line. Not here: scopes, statements,
 * calls (jinja_eval.c); filters, tests, methods (jinja_filters.c). */
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

#define OOM() q_fail(Q_ENOMEM, "chat template: out of memory rendering")
#define FAIL(st, ...) q_fail(st, "chat template line %d: " __VA_ARGS__)

qstatus jinja_op_undefined(jctx *cx, const jnode *x, const char *what) {
    if (x->kind == JN_NAME) return FAIL(Q_EINVAL, "'%.*s' is undefined (%s)", cx->line, (int)x->n, x->s, what);
    if (x->kind == JN_ATTR) return FAIL(Q_EINVAL, "attribute '%.*s' is undefined (%s)", cx->line, (int)x->n, x->s, what);
    return FAIL(Q_EINVAL, "undefined value (%s)", cx->line, what);
}

static qstatus loop_attr(jctx *cx, const jloop *lp, const char *s, size_t n, jv *out) {
    size_t len = lp->items->n, i = lp->index0;
#define IS(x) (n == strlen(x) && memcmp(s, x, n) == 0)
    if (IS("index0")) *out = jv_int((int64_t)i);
    else if (IS("index")) *out = jv_int((int64_t)i + 1);
    else if (IS("revindex")) *out = jv_int((int64_t)(len - i));
    else if (IS("revindex0")) *out = jv_int((int64_t)(len - i - 1));
    else if (IS("first")) *out = jv_bool(i == 0);
    else if (IS("last")) *out = jv_bool(i + 1 == len);
    else if (IS("length")) *out = jv_int((int64_t)len);
    else if (IS("previtem")) *out = i > 0 ? lp->items->v[i - 1] : jv_undef();
    else if (IS("nextitem")) *out = i + 1 < len ? lp->items->v[i + 1] : jv_undef();
    else if (IS("depth")) *out = jv_int(1);
    else if (IS("depth0")) *out = jv_int(0);
    else if (IS("cycle") || IS("changed")) return FAIL(Q_EUNSUPPORTED, "loop.%.*s not supported", cx->line, (int)n, s);
    else *out = jv_undef();
#undef IS
    return Q_OK;
}

/* obj.name */
qstatus jinja_op_attr(jctx *cx, const jnode *n, jv obj, const char *s, size_t len, jv *out) {
    int found = 0;
    switch (obj.k) {
    case JV_UNDEF: return jinja_op_undefined(cx, n->a, "attribute access");
    case JV_DICT:
        Q_TRY(jinja_method_lookup(cx, obj, s, len, out, &found));
        if (found) return Q_OK;
        /* fall through */
    case JV_NS: {
        const jv *v = jd_get(obj.u.d, s, len);
        *out = v ? *v : jv_undef();
        return Q_OK;
    }
    case JV_STR: case JV_LIST:
        Q_TRY(jinja_method_lookup(cx, obj, s, len, out, &found));
        if (!found) *out = jv_undef();
        return Q_OK;
    case JV_LOOP: return loop_attr(cx, obj.u.loop, s, len, out);
    case JV_INT: case JV_FLOAT: case JV_BOOL: {
        static const char *const num_attrs[] = {"real", "imag", "numerator", "denominator", "conjugate",
            "bit_length", "bit_count", "to_bytes", "as_integer_ratio", "is_integer", "hex", NULL};
        for (const char *const *a = num_attrs; *a; a++)
            if (strlen(*a) == len && !memcmp(*a, s, len))
                return FAIL(Q_EUNSUPPORTED, "attribute %s.%.*s not supported", cx->line, jv_kind_name(obj), (int)len, s);
        *out = jv_undef();
        return Q_OK;
    }
    default: *out = jv_undef(); return Q_OK;
    }
}

/* Python index for a sequence of len items; -1 when out of range. */
static int64_t py_index(jv key, size_t len) {
    int64_t i = key.k == JV_BOOL ? key.u.b : key.u.i;
    if (i < 0) i += (int64_t)len;
    return (i < 0 || i >= (int64_t)len) ? -1 : i;
}

qstatus jinja_op_item(jctx *cx, const jnode *n, jv obj, jv key, jv *out) {
    int intkey = key.k == JV_INT || key.k == JV_BOOL;
    if (obj.k == JV_UNDEF) return jinja_op_undefined(cx, n->a, "subscript");
    if (obj.k == JV_DICT || obj.k == JV_NS) {
        const jv *v = jd_getv(obj.u.d, key);
        if (v) { *out = *v; return Q_OK; }
    } else if (obj.k == JV_LIST && obj.u.l->form > JL_TUPLE) {
        *out = jv_undef(); /* views and generators are not subscriptable: jinja2 gives undefined */
        return Q_OK;
    } else if (obj.k == JV_LIST && intkey) {
        int64_t i = py_index(key, obj.u.l->n);
        *out = i < 0 ? jv_undef() : obj.u.l->v[i];
        return Q_OK;
    } else if (obj.k == JV_STR && intkey) {
        size_t cnt = ju_count(obj.u.s.p, obj.u.s.n), pos = 0;
        int64_t i = py_index(key, cnt);
        if (i < 0) { *out = jv_undef(); return Q_OK; }
        uint32_t cp;
        for (int64_t k = 0; k < i; k++) pos += ju_decode(obj.u.s.p + pos, obj.u.s.n - pos, &cp);
        *out = jv_str(obj.u.s.p + pos, ju_decode(obj.u.s.p + pos, obj.u.s.n - pos, &cp));
        return Q_OK;
    }
    if (key.k == JV_STR) return jinja_op_attr(cx, n, obj, key.u.s.p, key.u.s.n, out);
    *out = jv_undef();
    return Q_OK;
}

/* A Python slice bound: negative counts from the end, then clamped to [lo, hi]. */
static int64_t clamp(int64_t v, int64_t len, int64_t lo, int64_t hi) {
    if (v < 0) v += len;
    return v < lo ? lo : v > hi ? hi : v;
}

qstatus jinja_op_slice(jctx *cx, const jnode *n, jv obj, const jv *p, jv *out) {
    int64_t v[3], len;
    int has[3];
    if (obj.k == JV_UNDEF) return jinja_op_undefined(cx, n->a, "slice");
    if (obj.k == JV_LIST && obj.u.l->form > JL_TUPLE) {
        *out = jv_undef();
        return Q_OK;
    }
    if (obj.k != JV_LIST && obj.k != JV_STR) { /* not subscriptable: jinja2 gives undefined */
        *out = jv_undef();
        return Q_OK;
    }
    len = obj.k == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)ju_count(obj.u.s.p, obj.u.s.n);
    for (int k = 0; k < 3; k++) {
        has[k] = p[k].k != JV_UNDEF && p[k].k != JV_NONE;
        if (has[k] && p[k].k != JV_INT && p[k].k != JV_BOOL) return FAIL(Q_EINVAL, "slice indices must be integers", cx->line);
        v[k] = has[k] ? (p[k].k == JV_INT ? p[k].u.i : p[k].u.b) : 0;
    }
    int64_t step = has[2] ? v[2] : 1, start, stop;
    if (step == 0) return FAIL(Q_EINVAL, "slice step cannot be zero", cx->line);
    if (step > 0) {
        start = has[0] ? clamp(v[0], len, 0, len) : 0;
        stop = has[1] ? clamp(v[1], len, 0, len) : len;
    } else {
        start = has[0] ? clamp(v[0], len, -1, len - 1) : len - 1;
        stop = has[1] ? clamp(v[1], len, -1, len - 1) : -1;
    }
    /* collect element positions (code point offsets for strings) */
    jlist *res = jl_new(cx->a, 0);
    size_t *off = NULL;
    if (!res) return OOM();
    if (obj.k == JV_STR) {
        off = malloc(((size_t)len + 1) * sizeof *off);
        if (!off) return OOM();
        size_t pos = 0;
        uint32_t cp;
        for (int64_t k = 0; k < len; k++) off[k] = pos, pos += ju_decode(obj.u.s.p + pos, obj.u.s.n - pos, &cp);
        off[len] = pos;
    }
    jbuf b = {0};
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (obj.k == JV_LIST) {
            if (jl_push(cx->a, res, obj.u.l->v[i])) { free(off); return OOM(); }
        } else {
            jb_put(&b, obj.u.s.p + off[i], off[i + 1] - off[i]);
        }
    }
    free(off);
    if (obj.k == JV_LIST) {
        out->k = JV_LIST, out->u.l = res;
        return Q_OK;
    }
    char *s = b.oom ? NULL : ja_strdup(cx->a, b.p ? b.p : "", b.n);
    size_t sn = b.n;
    free(b.p);
    if (!s) return OOM();
    *out = jv_str(s, sn);
    return Q_OK;
}

static qstatus concat(jctx *cx, jv a, jv b, jv *out) {
    jbuf buf = {0};
    if (jv_to_str(&buf, a) || jv_to_str(&buf, b)) {
        free(buf.p);
        return FAIL(Q_EUNSUPPORTED, "cannot convert a %s/%s to a string", cx->line, jv_kind_name(a), jv_kind_name(b));
    }
    char *s = buf.oom ? NULL : ja_strdup(cx->a, buf.p ? buf.p : "", buf.n);
    size_t n = buf.n;
    free(buf.p);
    if (!s) return OOM();
    *out = jv_str(s, n);
    return Q_OK;
}

static int is_num(jv v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }
static double num_f(jv v) { return v.k == JV_FLOAT ? v.u.f : v.k == JV_INT ? (double)v.u.i : v.u.b; }
static int64_t num_i(jv v) { return v.k == JV_INT ? v.u.i : v.u.b; }

qstatus jinja_op_binop(jctx *cx, const jnode *n, jv a, jv b, jv *out) {
    char op = n->s[0];
    int two = n->n == 2;
    if (op == '~') return concat(cx, a, b, out);
    if (a.k == JV_UNDEF || b.k == JV_UNDEF) return jinja_op_undefined(cx, a.k == JV_UNDEF ? n->a : n->b, "arithmetic");
    if (op == '+' && a.k == JV_STR && b.k == JV_STR) return concat(cx, a, b, out);
    if (op == '%' && a.k == JV_STR) return FAIL(Q_EUNSUPPORTED, "printf-style string formatting not supported", cx->line);
    if (op == '+' && a.k == JV_LIST && b.k == JV_LIST) {
        jlist *l = jl_new(cx->a, a.u.l->n + b.u.l->n);
        if (!l) return OOM();
        for (size_t i = 0; i < a.u.l->n; i++) l->v[l->n++] = a.u.l->v[i];
        for (size_t i = 0; i < b.u.l->n; i++) l->v[l->n++] = b.u.l->v[i];
        out->k = JV_LIST, out->u.l = l;
        return Q_OK;
    }
    if (op == '*' && !two && ((a.k == JV_STR && b.k == JV_INT) || (a.k == JV_INT && b.k == JV_STR))) {
        jv s = a.k == JV_STR ? a : b;
        int64_t k = a.k == JV_INT ? a.u.i : b.u.i;
        if (k > 0 && s.u.s.n && (uint64_t)k > (JINJA_ARENA_CAP / s.u.s.n)) return FAIL(Q_EFULL, "string repeat too large", cx->line);
        jbuf buf = {0};
        for (int64_t i = 0; i < k; i++) jb_put(&buf, s.u.s.p, s.u.s.n);
        char *p = buf.oom ? NULL : ja_strdup(cx->a, buf.p ? buf.p : "", buf.n);
        size_t pn = buf.n;
        free(buf.p);
        if (!p) return OOM();
        *out = jv_str(p, pn);
        return Q_OK;
    }
    if (!is_num(a) || !is_num(b))
        return FAIL(Q_EINVAL, "unsupported operand types for %.*s: '%s' and '%s'", cx->line, (int)n->n, n->s, jv_kind_name(a), jv_kind_name(b));
    int ints = a.k != JV_FLOAT && b.k != JV_FLOAT;
    double x = num_f(a), y = num_f(b);
    int64_t i = num_i(a), j = num_i(b), res;
    if (op == '/' && !two) {
        if (y == 0) return FAIL(Q_EINVAL, "division by zero", cx->line);
        *out = jv_float(x / y);
        return Q_OK;
    }
    if (ints) {
        int ovf = 0;
        if (op == '+') ovf = __builtin_add_overflow(i, j, &res);
        else if (op == '-') ovf = __builtin_sub_overflow(i, j, &res);
        else if (op == '*' && two) { /* ** */
            if (j < 0) { *out = jv_float(__builtin_pow(x, y)); return Q_OK; }
            res = 1;
            for (int64_t k = 0; k < j && !ovf; k++) ovf = __builtin_mul_overflow(res, i, &res);
        } else if (op == '*') ovf = __builtin_mul_overflow(i, j, &res);
        else {
            if (j == 0) return FAIL(Q_EINVAL, "integer division or modulo by zero", cx->line);
            if (i == INT64_MIN && j == -1) return FAIL(Q_EUNSUPPORTED, "integer overflow", cx->line);
            int64_t q = i / j, m = i % j;
            if (m != 0 && ((m < 0) != (j < 0))) q--, m += j; /* Python floors */
            res = op == '%' ? m : q;
        }
        if (ovf) return FAIL(Q_EUNSUPPORTED, "integer overflow", cx->line);
        *out = jv_int(res);
        return Q_OK;
    }
    double v;
    if (op == '+') v = x + y;
    else if (op == '-') v = x - y;
    else if (op == '*' && two) v = __builtin_pow(x, y);
    else if (op == '*') v = x * y;
    else {
        if (y == 0) return FAIL(Q_EINVAL, "float division by zero", cx->line);
        double q = __builtin_floor(x / y);
        v = op == '%' ? x - q * y : q;
    }
    *out = jv_float(v);
    return Q_OK;
}

static qstatus contains(jctx *cx, jv needle, jv hay, int *out) {
    *out = 0;
    if (hay.k == JV_UNDEF) return Q_OK;
    if (hay.k == JV_STR) {
        if (needle.k != JV_STR) return FAIL(Q_EINVAL, "'in <string>' requires string as left operand", cx->line);
        if (needle.u.s.n == 0) { *out = 1; return Q_OK; }
        for (size_t i = 0; i + needle.u.s.n <= hay.u.s.n; i++)
            if (memcmp(hay.u.s.p + i, needle.u.s.p, needle.u.s.n) == 0) { *out = 1; break; }
        return Q_OK;
    }
    if (hay.k == JV_LIST) {
        for (size_t i = 0; i < hay.u.l->n && !*out; i++) *out = jv_equal(hay.u.l->v[i], needle);
        return Q_OK;
    }
    if (hay.k == JV_DICT) {
        *out = jd_getv(hay.u.d, needle) != NULL;
        return Q_OK;
    }
    return FAIL(Q_EINVAL, "argument of type '%s' is not iterable", cx->line, jv_kind_name(hay));
}

qstatus jinja_op_compare(jctx *cx, const char *op, jv a, jv b, int *out) {
    if (!strcmp(op, "==")) { *out = jv_equal(a, b); return Q_OK; }
    if (!strcmp(op, "!=")) { *out = !jv_equal(a, b); return Q_OK; }
    if (!strcmp(op, "in")) return contains(cx, a, b, out);
    if (!strcmp(op, "not in")) { Q_TRY(contains(cx, a, b, out)); *out = !*out; return Q_OK; }
    int c;
    if (is_num(a) && is_num(b)) {
        if (a.k != JV_FLOAT && b.k != JV_FLOAT) c = (num_i(a) > num_i(b)) - (num_i(a) < num_i(b));
        else c = (num_f(a) > num_f(b)) - (num_f(a) < num_f(b));
    } else if (a.k == JV_STR && b.k == JV_STR) {
        size_t m = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        c = m ? memcmp(a.u.s.p, b.u.s.p, m) : 0;
        if (!c) c = (a.u.s.n > b.u.s.n) - (a.u.s.n < b.u.s.n);
    } else {
        return FAIL(Q_EINVAL, "'%s' not supported between '%s' and '%s'", cx->line, op, jv_kind_name(a), jv_kind_name(b));
    }
    if (!strcmp(op, "<")) *out = c < 0;
    else if (!strcmp(op, "<=")) *out = c <= 0;
    else if (!strcmp(op, ">")) *out = c > 0;
    else *out = c >= 0;
    return Q_OK;
}
