/* jinja_lex.c: template source -> tokens, with jinja2's whitespace rules as transformers configures
 * them (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False).
 * Rules applied here, so the parser sees final text:
 *  - newlines (\r\n, \r) become \n and one trailing newline of the source is dropped;
 *  - "{%-", "{{-", "{#-" strip all whitespace before the tag; "-%}", "-}}", "-#}" all after it;
 *  - lstrip_blocks: spaces/tabs between a line start and "{%" or "{#" are dropped ("{%+" keeps them);
 *    a line start is a '\n' in the text before the tag, or the previous tag's end having ended with
 *    '\n' (or the template start);
 *  - trim_blocks: one '\n' right after "%}" or "#}" is dropped ("+%}" keeps it).
 * Inside a tag the end marker only counts when brackets are balanced (so "{{ {'a': {}} }}" works).
 * Invariants: every token's text lives in the arena; the array ends with JT_EOF.
 * Not here: what the tokens mean (jinja_parse.c). Line statements and custom delimiters: not
 * supported (transformers does not enable them). */
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

typedef struct lexer {
    jarena *a;
    const char *s;
    size_t n, pos;
    int line;
    jtok *t;
    size_t nt, cap;
} lexer;

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static int is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static qstatus push(lexer *lx, jtok t) {
    if (lx->nt == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        jtok *nt = realloc(lx->t, cap * sizeof *nt);
        if (!nt) return q_fail(Q_ENOMEM, "chat template: out of memory lexing");
        lx->t = nt;
        lx->cap = cap;
    }
    lx->t[lx->nt++] = t;
    return Q_OK;
}

static void count_lines(lexer *lx, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        if (lx->s[i] == '\n') lx->line++;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string literal: Python unicode-escape rules (jinja2 decodes literals that way); an unknown
 * escape keeps its backslash. */
static qstatus lex_string(lexer *lx) {
    char q = lx->s[lx->pos];
    int line0 = lx->line;
    size_t i = lx->pos + 1, start = i;
    while (i < lx->n && lx->s[i] != q) {
        if (lx->s[i] == '\\' && i + 1 < lx->n) i++;
        i++;
    }
    if (i >= lx->n) return q_fail(Q_EINVAL, "chat template line %d: unterminated string", line0);
    char *o = ja_alloc(lx->a, (i - start) + 1);
    if (!o) return q_fail(Q_ENOMEM, "chat template: out of memory lexing");
    size_t on = 0;
    for (size_t j = start; j < i; j++) {
        char c = lx->s[j];
        if (c != '\\') { o[on++] = c; continue; }
        char e = lx->s[++j];
        int hx = 0;
        switch (e) {
        case 'n': o[on++] = '\n'; break;
        case 't': o[on++] = '\t'; break;
        case 'r': o[on++] = '\r'; break;
        case 'a': o[on++] = '\a'; break;
        case 'b': o[on++] = '\b'; break;
        case 'f': o[on++] = '\f'; break;
        case 'v': o[on++] = '\v'; break;
        case '\\': o[on++] = '\\'; break;
        case '\'': o[on++] = '\''; break;
        case '"': o[on++] = '"'; break;
        case '\n': break; /* line continuation */
        case 'x': hx = 2; break;
        case 'u': hx = 4; break;
        case 'U': hx = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                uint32_t v = 0;
                int k = 0;
                while (k < 3 && j < i && lx->s[j] >= '0' && lx->s[j] <= '7') v = v * 8 + (uint32_t)(lx->s[j++] - '0'), k++;
                j--;
                on += put_utf8(o + on, v);
            } else {
                o[on++] = '\\';
                o[on++] = e;
            }
        }
        if (hx) {
            uint32_t v = 0;
            for (int k = 0; k < hx; k++) {
                int h = j + 1 + (size_t)k < i ? hexval(lx->s[j + 1 + (size_t)k]) : -1;
                if (h < 0) return q_fail(Q_EINVAL, "chat template line %d: bad \\%c escape", lx->line, e);
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
                return q_fail(Q_EUNSUPPORTED, "chat template line %d: escape \\%c out of range", lx->line, e);
            j += (size_t)hx;
            on += put_utf8(o + on, v); /* 4 bytes never exceed the escape's own length */
        }
    }
    count_lines(lx, lx->pos, i);
    jtok t = {.kind = JT_STRING, .line = line0, .s = o, .n = on};
    lx->pos = i + 1;
    return push(lx, t);
}

static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">="};

/* Lexes the inside of a tag up to its end marker. var: "}}" else "%}". Returns with pos after the
 * end marker; *ws_after: 1 when '-' asked to strip, 2 when '+' (block) keeps the newline. */
static qstatus lex_tag(lexer *lx, int var, int *ws_after) {
    int depth = 0;
    for (;;) {
        while (lx->pos < lx->n && is_ws(lx->s[lx->pos])) {
            if (lx->s[lx->pos] == '\n') lx->line++;
            lx->pos++;
        }
        if (lx->pos >= lx->n) return q_fail(Q_EINVAL, "chat template line %d: unclosed tag", lx->line);
        const char *p = lx->s + lx->pos;
        size_t left = lx->n - lx->pos;
        const char *end = var ? "}}" : "%}";
        if (depth == 0) {
            int mod = (p[0] == '-' || (!var && p[0] == '+')) ? 1 : 0;
            if (left >= (size_t)(2 + mod) && memcmp(p + mod, end, 2) == 0) {
                *ws_after = mod ? (p[0] == '-' ? 1 : 2) : 0;
                jtok t = {.kind = var ? JT_VAR_END : JT_BLOCK_END, .line = lx->line};
                lx->pos += (size_t)(2 + mod);
                return push(lx, t);
            }
        }
        jtok t = {.line = lx->line};
        char c = p[0];
        if (c == '\'' || c == '"') {
            Q_TRY(lex_string(lx));
            continue;
        }
        if (is_alpha(c)) {
            size_t k = 1;
            while (k < left && (is_alpha(p[k]) || is_digit(p[k]))) k++;
            t.kind = JT_NAME, t.s = p, t.n = k;
            lx->pos += k;
        } else if (is_digit(c)) {
            size_t k = 0;
            int isf = 0;
            while (k < left && (is_digit(p[k]) || p[k] == '_')) k++;
            if (k + 1 < left && p[k] == '.' && is_digit(p[k + 1])) {
                isf = 1;
                k++;
                while (k < left && (is_digit(p[k]) || p[k] == '_')) k++;
            }
            if (k < left && (p[k] == 'e' || p[k] == 'E')) {
                size_t e = k + 1;
                if (e < left && (p[e] == '+' || p[e] == '-')) e++;
                if (e < left && is_digit(p[e])) {
                    isf = 1;
                    k = e;
                    while (k < left && is_digit(p[k])) k++;
                }
            }
            char num[64];
            size_t m = 0;
            for (size_t j = 0; j < k && m < sizeof num - 1; j++)
                if (p[j] != '_') num[m++] = p[j];
            num[m] = 0;
            if (isf) t.kind = JT_FLOAT, t.f = strtod(num, NULL);
            else {
                if (m > 18) return q_fail(Q_EUNSUPPORTED, "chat template line %d: integer too large", lx->line);
                t.kind = JT_INT, t.i = strtoll(num, NULL, 10);
            }
            lx->pos += k;
        } else {
            size_t k = 0;
            for (size_t j = 0; j < sizeof ops2 / sizeof *ops2; j++)
                if (left >= 2 && memcmp(p, ops2[j], 2) == 0) k = 2;
            if (!k) {
                if (!strchr("+-/*%~<>=.,:|()[]{}!", c))
                    return q_fail(Q_EINVAL, "chat template line %d: unexpected character '%c'", lx->line, c);
                k = 1;
                if (c == '(' || c == '[' || c == '{') depth++;
                if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
            }
            t.kind = JT_OP, t.s = p, t.n = k;
            lx->pos += k;
        }
        Q_TRY(push(lx, t));
    }
}

static qstatus lex_all(lexer *lx) {
    int line_starting = 1;
    size_t data = 0; /* start of pending text */
    while (lx->pos <= lx->n) {
        const char *tag = NULL;
        for (size_t i = lx->pos; i + 1 < lx->n; i++)
            if (lx->s[i] == '{' && (lx->s[i + 1] == '{' || lx->s[i + 1] == '%' || lx->s[i + 1] == '#')) {
                tag = lx->s + i;
                break;
            }
        size_t tpos = tag ? (size_t)(tag - lx->s) : lx->n;
        size_t dend = tpos;
        char kind = tag ? tag[1] : 0;
        char mod = (tag && tpos + 2 < lx->n) ? tag[2] : 0;
        if (tag && mod == '-') {
            while (dend > data && is_ws(lx->s[dend - 1])) dend--;
        } else if (tag && mod != '+' && kind != '{') {
            size_t l = dend;
            while (l > data && lx->s[l - 1] != '\n') l--;
            int at_line = (l > data) || line_starting;
            size_t k = l;
            while (k < dend && (lx->s[k] == ' ' || lx->s[k] == '\t')) k++;
            if (at_line && k == dend) dend = l;
        }
        if (dend > data) {
            jtok t = {.kind = JT_DATA, .line = lx->line, .s = lx->s + data, .n = dend - data};
            Q_TRY(push(lx, t));
        }
        count_lines(lx, data, tpos);
        if (!tag) break;
        lx->pos = tpos + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
        int ws_after = 0;
        if (kind == '#') {
            const char *e = NULL;
            for (size_t i = lx->pos; i + 1 < lx->n; i++)
                if (lx->s[i] == '#' && lx->s[i + 1] == '}') { e = lx->s + i; break; }
            if (!e) return q_fail(Q_EINVAL, "chat template line %d: unclosed comment", lx->line);
            size_t epos = (size_t)(e - lx->s);
            if (epos > lx->pos && e[-1] == '-') ws_after = 1;
            else if (epos > lx->pos && e[-1] == '+') ws_after = 2;
            count_lines(lx, lx->pos, epos);
            lx->pos = epos + 2;
        } else {
            if (kind == '%') { /* raw blocks hold text we would lex as tags: refuse them here */
                size_t k = lx->pos;
                while (k < lx->n && is_ws(lx->s[k])) k++;
                if (k + 3 <= lx->n && !memcmp(lx->s + k, "raw", 3) && (k + 3 == lx->n || !is_alpha(lx->s[k + 3])))
                    return q_fail(Q_EUNSUPPORTED, "chat template line %d: statement 'raw' not supported", lx->line);
            }
            jtok t = {.kind = kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, .line = lx->line};
            Q_TRY(push(lx, t));
            Q_TRY(lex_tag(lx, kind == '{', &ws_after));
        }
        size_t after = lx->pos;
        if (ws_after == 1) {
            while (lx->pos < lx->n && is_ws(lx->s[lx->pos])) lx->pos++;
        } else if (ws_after == 0 && kind != '{' && lx->pos < lx->n && lx->s[lx->pos] == '\n') {
            lx->pos++;
        }
        line_starting = lx->s[lx->pos - 1] == '\n';
        count_lines(lx, after, lx->pos);
        data = lx->pos;
    }
    jtok t = {.kind = JT_EOF, .line = lx->line};
    return push(lx, t);
}

qstatus jinja_lex(jarena *a, const char *src, size_t n, jtok **toks, size_t *n_toks) {
    char *s = ja_alloc(a, n + 1);
    if (!s) return q_fail(Q_ENOMEM, "chat template: out of memory");
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            s[m++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else {
            s[m++] = src[i];
        }
    }
    if (m > 0 && s[m - 1] == '\n') m--;
    s[m] = 0;
    lexer lx = {.a = a, .s = s, .n = m, .line = 1};
    qstatus rc = lex_all(&lx);
    if (rc == Q_OK) {
        *toks = ja_alloc(a, lx.nt * sizeof **toks);
        if (!*toks) rc = q_fail(Q_ENOMEM, "chat template: out of memory");
        else {
            memcpy(*toks, lx.t, lx.nt * sizeof **toks);
            *n_toks = lx.nt;
        }
    }
    free(lx.t);
    return rc;
}
