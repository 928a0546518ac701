/* jinja.h: a small Jinja interpreter for chat templates, rendering as transformers'
 * apply_chat_template does (jinja2 ImmutableSandboxedEnvironment, trim_blocks=True,
 * lstrip_blocks=True, loopcontrols, globals raise_exception/strftime_now/namespace/range, a tojson
 * filter that is Python's json.dumps(ensure_ascii=False)). Values follow Python semantics: undefined
 * is falsy and prints as "", str() of a dict is its Python repr, dicts keep insertion order.
 *
 * Pipeline: jinja_lex.c (source -> tokens, whitespace control) -> jinja_parse.c (statements) and
 * jinja_expr.c (expressions) -> tree -> jinja_eval.c (tree + variables -> text: scopes, statements,
 * calls), with jinja_ops.c (operators, attribute/item access, slicing), jinja_value.c (values, arena,
 * str/repr/json), jinja_filters.c (filters, tests) and jinja_methods.c (str/dict methods).
 *
 * Invariants: a compiled template is immutable and may be rendered from several threads at once;
 * every value of one render lives in that render's arena (capped at JINJA_ARENA_CAP); parser
 * nesting is bounded by JINJA_MAX_DEPTH and evaluator recursion by JINJA_MAX_EVAL_DEPTH, so hostile
 * input cannot blow the stack.
 * Not here: the OpenAI request -> template variables mapping (chat.c). Not supported (fails with
 * Q_EUNSUPPORTED naming the line): extends/include/import/block, call blocks, filter blocks, raw,
 * with, recursive loops, loop.cycle/changed, macro varargs/caller, printf-style `%` on strings,
 * integers beyond 64 bits, printing generators/functions, and any filter, test or method not listed
 * in jinja_filters.c / jinja_methods.c. */
#ifndef QUILL_JINJA_H
#define QUILL_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "../util/status.h"

/* ---- public API ------------------------------------------------------------------------------ */

typedef struct jinja_tmpl jinja_tmpl;

/* Compiles template source (n bytes). Owned; free with jinja_free. Syntax errors: Q_EINVAL, and
 * syntax we do not implement: Q_EUNSUPPORTED; both name the template line. */
qstatus jinja_compile(const char *src, size_t n, jinja_tmpl **out);
void jinja_free(jinja_tmpl *t);

/* Renders with the members of the JSON object `vars` as top-level variables (borrowed; must outlive
 * the call). *out is owned, NUL-terminated; *n_out its length. raise_exception -> Q_EINVAL with the
 * template's message; a runtime type error -> Q_EINVAL naming the line; unknown filter/test/method ->
 * Q_EUNSUPPORTED naming the line. */
qstatus jinja_render(const jinja_tmpl *t, const json_t *vars, char **out, size_t *n_out);

/* 1 when some for-loop of the template iterates over a variable or attribute called `name` (chat.c
 * uses it with "content" to pick the content format, as vLLM's detection does). */
int jinja_loops_over(const jinja_tmpl *t, const char *name);

/* ---- internals shared by the jinja_*.c files -------------------------------------------------- */

#define JINJA_MAX_DEPTH 128               /* parser nesting of expressions and blocks; macro calls */
#define JINJA_MAX_EVAL_DEPTH 1024         /* evaluator recursion (all expressions, blocks, macros) */
#define JINJA_ARENA_CAP ((size_t)1 << 30) /* bytes one render may allocate */

/* Arena: bump allocation in chunks; everything freed at once. */
typedef struct jarena_chunk jarena_chunk;
typedef struct jarena {
    jarena_chunk *head;
    size_t total_bytes; /* bytes allocated so far; capped at JINJA_ARENA_CAP */
} jarena;
void *ja_alloc(jarena *a, size_t n); /* zeroed, 16-aligned; NULL when out of memory or over cap */
char *ja_strdup(jarena *a, const char *s, size_t n);
void ja_free_all(jarena *a);

/* Tokens */
typedef enum jtok_kind {
    JT_DATA,        /* template text, whitespace control already applied */
    JT_VAR_BEGIN,   /* {{ */
    JT_VAR_END,     /* }} */
    JT_BLOCK_BEGIN, /* {% */
    JT_BLOCK_END,   /* %} */
    JT_NAME,
    JT_STRING, /* value unescaped */
    JT_INT,
    JT_FLOAT,
    JT_OP, /* punctuation/operator; text in s */
    JT_EOF
} jtok_kind;

typedef struct jtok {
    jtok_kind kind;
    int line;
    const char *s; /* JT_DATA/NAME/STRING/OP text (arena or source), n bytes */
    size_t n;
    int64_t i;
    double f;
} jtok;

/* Lexes src into an arena array of tokens ending in JT_EOF. Errors name the line. */
qstatus jinja_lex(jarena *a, const char *src, size_t n, jtok **toks, size_t *n_toks);

/* Values */
typedef enum jv_kind {
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_DICT,
    JV_NS,     /* namespace(): a mutable dict */
    JV_MACRO,  /* a template macro */
    JV_FUNC,   /* a global function */
    JV_METHOD, /* a bound method of a str/dict/list */
    JV_LOOP    /* the loop variable */
} jv_kind;

struct jlist;
struct jdict;
struct jnode;
struct jmethod;
struct jloop;

typedef struct jv {
    jv_kind k;
    union {
        int b;
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t n;
        } s;
        struct jlist *l;
        struct jdict *d; /* JV_DICT and JV_NS */
        const struct jnode *macro;
        int func; /* JF_* */
        struct jmethod *m;
        struct jloop *loop;
    } u;
} jv;

typedef struct jlist {
    jv *v;
    size_t n, cap;
    int form; /* JL_*: which Python type this list stands for */
} jlist;

/* What a jlist is in Python. Lists and tuples differ only in repr(); dict views print as
 * dict_keys([...]) and are neither subscriptable nor JSON; generators (what jinja2's map, select,
 * reject, selectattr, rejectattr, reverse and items filters return) can be iterated but not
 * printed, measured, indexed or serialized. */
enum { JL_LIST, JL_TUPLE, JL_KEYS, JL_VALUES, JL_ITEMS, JL_GEN };

typedef struct jdict {
    jv *key; /* strings (or other scalars for dict literals) */
    jv *val;
    size_t n, cap;
} jdict;

typedef struct jmethod {
    jv self;
    const char *name;
} jmethod;

typedef struct jloop {
    const jlist *items;
    size_t index0;
} jloop;

enum { JF_RAISE, JF_NAMESPACE, JF_RANGE, JF_STRFTIME, JF_DICT };

static inline jv jv_undef(void) { jv v = {.k = JV_UNDEF}; return v; }
static inline jv jv_none(void) { jv v = {.k = JV_NONE}; return v; }
static inline jv jv_bool(int b) { jv v = {.k = JV_BOOL, .u.b = !!b}; return v; }
static inline jv jv_int(int64_t i) { jv v = {.k = JV_INT, .u.i = i}; return v; }
static inline jv jv_float(double f) { jv v = {.k = JV_FLOAT, .u.f = f}; return v; }
static inline jv jv_str(const char *p, size_t n) {
    jv v = {.k = JV_STR};
    v.u.s.p = p;
    v.u.s.n = n;
    return v;
}

/* Growable byte buffer (malloc'd, not arena). */
typedef struct jbuf {
    char *p;
    size_t n, cap;
    int oom; /* set once an append failed; later appends are no-ops */
} jbuf;
void jb_put(jbuf *b, const char *s, size_t n);
void jb_puts(jbuf *b, const char *s);
void jb_putc(jbuf *b, char c);

jlist *jl_new(jarena *a, size_t cap);
int jl_push(jarena *a, jlist *l, jv v); /* 0 ok, -1 out of memory */
jdict *jd_new(jarena *a, size_t cap);
int jd_set(jarena *a, jdict *d, jv key, jv val); /* replaces an equal key; 0 ok, -1 oom */
const jv *jd_get(const jdict *d, const char *key, size_t n);
const jv *jd_getv(const jdict *d, jv key);

int jv_truthy(jv v);
int jv_equal(jv a, jv b);
const char *jv_kind_name(jv v);
/* Python str(v) and repr(v) appended to b; -1 for values with no text form (macro, ...). */
int jv_to_str(jbuf *b, jv v);
int jv_repr(jbuf *b, jv v);
/* str(v) as an arena string (strings returned as is). Q_ENOMEM or Q_EINVAL. */
qstatus jv_as_str(jarena *a, jv v, jv *out);
/* json.dumps(v, ensure_ascii=False, indent, separators default, sort_keys); indent < 0: none. */
qstatus jv_to_json(jbuf *b, jv v, int indent, int sort_keys);
void jv_float_repr(jbuf *b, double f);
/* Converts a jansson value; strings are borrowed from j. */
qstatus jv_from_json(jarena *a, const json_t *j, jv *out, int depth);

/* UTF-8 helpers */
size_t ju_decode(const char *s, size_t n, uint32_t *cp); /* bytes used (>=1); bad byte -> its value */
size_t ju_count(const char *s, size_t n);                /* code points */
int ju_isspace(uint32_t cp);                             /* Python str.isspace */

/* Syntax tree */
typedef enum jnode_kind {
    /* expressions */
    JN_LIT, JN_NAME, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST, JN_NOT, JN_NEG,
    JN_POS, JN_BINOP, JN_CMP, JN_AND, JN_OR, JN_COND, JN_LIST, JN_DICT,
    /* statements */
    JN_BODY, JN_DATA, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SETBLOCK, JN_MACRO, JN_BREAK, JN_CONTINUE
} jnode_kind;

typedef struct jnode {
    jnode_kind kind;
    int line;
    const char *s; /* name / op / data text */
    size_t n;
    jv lit;
    int neg;                 /* JN_TEST: "is not"; JN_LIST: a tuple literal */
    struct jnode *a, *b, *c; /* operands / cond, body, else */
    struct jnode *d;         /* JN_FOR: the loop's `if` filter */
    struct jnode **kids;     /* args, list items, body statements, targets */
    size_t n_kids;
    struct jnode **kw;       /* keyword argument values; names in kwname */
    const char **kwname;
    size_t *kwlen;
    size_t n_kw;
} jnode;

struct jinja_tmpl {
    jarena arena;
    jnode *root; /* JN_BODY */
};

qstatus jinja_parse(jarena *a, const jtok *toks, size_t n_toks, jnode **root);

/* Evaluation context (jinja_eval.c), used by filters for errors and allocation. */
typedef struct jscope jscope;
typedef struct jctx {
    jarena *a;
    jscope *globals;
    int line;  /* line of the node being evaluated, for messages */
    int depth; /* macro call depth */
} jctx;

/* Operators and access (jinja_ops.c); n is the operation's node, for messages. jinja_op_undefined
 * fails naming x, the expression that was undefined, and what was attempted on it. */
qstatus jinja_op_undefined(jctx *cx, const jnode *x, const char *what);
/* Shared by the filters and the methods (jinja_filters.c): a string value from b's bytes (b's buffer is
 * freed either way), and the check that v is a string ("WHAT expects a string" otherwise). */
qstatus jinja_str_from_buf(jctx *cx, jbuf *b, jv *out);
qstatus jinja_need_str(jctx *cx, jv v, const char *what);
qstatus jinja_op_attr(jctx *cx, const jnode *n, jv obj, const char *s, size_t len, jv *out);
qstatus jinja_op_item(jctx *cx, const jnode *n, jv obj, jv key, jv *out);
qstatus jinja_op_slice(jctx *cx, const jnode *n, jv obj, const jv *p, jv *out); /* p: start, stop, step */
qstatus jinja_op_binop(jctx *cx, const jnode *n, jv a, jv b, jv *out);          /* op in n->s */
qstatus jinja_op_compare(jctx *cx, const char *op, jv a, jv b, int *out);

/* Filters, tests and methods (jinja_filters.c). args/kwargs as evaluated. */
qstatus jinja_filter(jctx *cx, const char *name, size_t nlen, jv in, const jv *args, size_t n_args,
                     const char **kwname, const size_t *kwlen, const jv *kw, size_t n_kw, jv *out);
qstatus jinja_test(jctx *cx, const char *name, size_t nlen, jv in, const jv *args, size_t n_args,
                   int *out);
/* Attribute lookup on str/dict/list: a bound method when `name` is one we implement; Q_EUNSUPPORTED
 * for a Python method we do not; *found = 0 otherwise. */
qstatus jinja_method_lookup(jctx *cx, jv self, const char *name, size_t nlen, jv *out, int *found);
qstatus jinja_method_call(jctx *cx, const jmethod *m, const jv *args, size_t n_args,
                          const char **kwname, const size_t *kwlen, const jv *kw, size_t n_kw,
                          jv *out);
/* String operations shared by filters and methods (jinja_methods.c). chars NULL: whitespace. */
jv jinja_str_strip(jv s, const jv *chars, int left, int right); /* a view into s */
const char *jinja_str_find(const char *h, size_t hn, const char *n, size_t nn);
qstatus jinja_str_replace(jctx *cx, jv s, jv old, jv new_, int64_t count, jv *out);
qstatus jinja_str_case(jctx *cx, jv s, int upper, jv *out);
qstatus jinja_str_join(jctx *cx, jlist *l, jv sep, int strict, jv *out); /* strict: items must be str */
int jinja_parse_number(jv s, double *out); /* Python float(s) of a stripped s; 1 on success */
int64_t jinja_int_arg(const jv *v, int64_t dflt); /* an int argument, dflt when absent/none */

/* Iterates v as Python would (list items, dict keys, str chars, undefined -> empty). */
qstatus jinja_iterate(jctx *cx, jv v, jlist **out);

#endif
