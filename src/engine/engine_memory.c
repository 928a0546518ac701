/* engine_memory.c: the engine's memory figures (engine_get_memory) rendered for GET /memory (JSON,
 * jansson) and /metrics (Prometheus gauges). Only formatting: the figures and their invariants
 * (K/V held <= committed <= budget) live in engine.c. */
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine.h"

/* A snapshot with its per-slot arrays (owned; free with snapshot_free). */
typedef struct snapshot {
    qengine_memory m;
    int *rows, *charge;
} snapshot;

static qstatus snapshot_take(qengine *e, snapshot *s) {
    qengine_memory probe;
    engine_get_memory(e, &probe, NULL, NULL, 0);
    s->rows = calloc((size_t)probe.n_parallel, sizeof *s->rows);
    s->charge = calloc((size_t)probe.n_parallel, sizeof *s->charge);
    if (!s->rows || !s->charge) {
        free(s->rows);
        free(s->charge);
        return q_fail(Q_ENOMEM, "memory report: out of memory for %d slots", probe.n_parallel);
    }
    engine_get_memory(e, &s->m, s->rows, s->charge, probe.n_parallel);
    return Q_OK;
}

static void snapshot_free(snapshot *s) {
    free(s->rows);
    free(s->charge);
}

/* json_object_set_new with a failure flag, so one check covers a whole object. */
static void put(json_t *o, const char *k, json_t *v, int *bad) {
    if (!v || json_object_set_new(o, k, v) != 0) *bad = 1;
}

static json_t *split(const qengine_memory *m, int peak, int *bad) {
    json_t *o = json_object();
    if (!o) {
        *bad = 1;
        return NULL;
    }
    put(o, "weights", json_integer(m->weights_bytes), bad);
    put(o, "kv_mapped", json_integer(peak ? m->kv_peak_bytes : m->kv_bytes), bad);
    put(o, "gdn_states", json_integer(m->gdn_bytes), bad);
    put(o, "scratch", json_integer(m->scratch_bytes), bad); /* grows only: now == peak */
    put(o, "prompt_cache", json_integer(m->prompt_cache_bytes), bad);
    put(o, "total", json_integer(peak ? m->total_peak_bytes : m->total_bytes), bad);
    return o;
}

qstatus engine_memory_json(qengine *e, char **out) {
    *out = NULL;
    snapshot s;
    Q_TRY(snapshot_take(e, &s));
    const qengine_memory *m = &s.m;
    int bad = 0;
    json_t *root = json_object(), *kv = json_object(), *slots = json_array();
    if (!root || !kv || !slots) bad = 1;
    if (!bad) {
        put(root, "backend", json_string(m->backend ? m->backend : "?"), &bad);
        put(root, "unit", json_string("bytes"), &bad);
        put(root, "held", split(m, 0, &bad), &bad);
        put(root, "peak", split(m, 1, &bad), &bad);
        put(root, "host_buffers", json_integer(m->host_bytes), &bad);
        put(root, "gdn_state_type", json_string(m->gdn_state_type ? m->gdn_state_type : "?"), &bad);
        put(kv, "grow_rows", json_integer(m->kv_grow), &bad);
        put(kv, "first_rows", json_integer(m->first_rows), &bad);
        put(kv, "context", json_integer(m->n_ctx), &bad);
        put(kv, "type", json_string(m->kv_type ? m->kv_type : "?"), &bad);
        put(kv, "bytes_per_row", json_integer(m->kv_bytes_per_row), &bad);
        put(kv, "budget_rows", json_integer(m->kv_budget_rows), &bad);
        put(kv, "committed_rows", json_integer(m->kv_committed_rows), &bad);
        put(kv, "held_rows", json_integer(m->kv_held_rows), &bad);
        for (int i = 0; i < m->n_parallel && !bad; i++) {
            json_t *sl = json_object();
            if (!sl) {
                bad = 1;
                break;
            }
            put(sl, "slot", json_integer(i), &bad);
            put(sl, "rows", json_integer(s.rows[i]), &bad);
            put(sl, "charge_rows", json_integer(s.charge[i]), &bad);
            put(sl, "busy", json_boolean(s.charge[i] > 0), &bad);
            if (json_array_append_new(slots, sl) != 0) bad = 1;
        }
    }
    char *text = NULL;
    if (!bad) {
        put(root, "kv", kv, &bad);
        kv = NULL;
        put(root, "slots", slots, &bad);
        slots = NULL;
        text = bad ? NULL : json_dumps(root, JSON_COMPACT);
    }
    json_decref(kv);
    json_decref(slots);
    json_decref(root);
    snapshot_free(&s);
    if (!text) return q_fail(Q_ENOMEM, "memory report: out of memory building the JSON");
    *out = text;
    return Q_OK;
}

/* snprintf that keeps going past the end of buf, counting what would have been written. */
static void add(char *buf, size_t cap, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void add(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(*len < cap ? buf + *len : NULL, *len < cap ? cap - *len : 0, fmt, ap);
    va_end(ap);
    if (n > 0) *len += (size_t)n;
}

size_t engine_memory_prometheus(qengine *e, char *buf, size_t cap) {
    size_t len = 0;
    if (buf && cap > 0) buf[0] = '\0';
    else cap = 0;
    snapshot s;
    if (snapshot_take(e, &s) != Q_OK) return 0;
    const qengine_memory *m = &s.m;
    static const char *kinds[] = {"weights", "kv_mapped", "gdn_states", "scratch", "prompt_cache", "total"};
    const int64_t now[] = {m->weights_bytes, m->kv_bytes, m->gdn_bytes, m->scratch_bytes,
                           m->prompt_cache_bytes, m->total_bytes};
    const int64_t peak[] = {m->weights_bytes, m->kv_peak_bytes, m->gdn_bytes, m->scratch_bytes,
                            m->prompt_cache_bytes, m->total_peak_bytes};
    add(buf, cap, &len, "# HELP quill_memory_bytes Backend (%s) memory held now, by kind.\n"
                        "# TYPE quill_memory_bytes gauge\n", m->backend ? m->backend : "?");
    for (int k = 0; k < 6; k++) add(buf, cap, &len, "quill_memory_bytes{kind=\"%s\"} %" PRId64 "\n", kinds[k], now[k]);
    add(buf, cap, &len, "# HELP quill_memory_peak_bytes Backend memory held at its peak since start, by kind.\n"
                        "# TYPE quill_memory_peak_bytes gauge\n");
    for (int k = 0; k < 6; k++) add(buf, cap, &len, "quill_memory_peak_bytes{kind=\"%s\"} %" PRId64 "\n", kinds[k], peak[k]);
    add(buf, cap, &len, "# HELP quill_host_buffer_bytes Host memory of the engine's round buffers.\n"
                        "# TYPE quill_host_buffer_bytes gauge\nquill_host_buffer_bytes %" PRId64 "\n", m->host_bytes);
    add(buf, cap, &len, "# HELP quill_kv_budget_rows K/V rows all slots may hold together.\n"
                        "# TYPE quill_kv_budget_rows gauge\nquill_kv_budget_rows %" PRId64 "\n", m->kv_budget_rows);
    add(buf, cap, &len, "# HELP quill_kv_committed_rows K/V rows charged to running streams plus idle slots.\n"
                        "# TYPE quill_kv_committed_rows gauge\nquill_kv_committed_rows %" PRId64 "\n", m->kv_committed_rows);
    add(buf, cap, &len, "# HELP quill_kv_held_rows K/V rows held now over all slots.\n"
                        "# TYPE quill_kv_held_rows gauge\nquill_kv_held_rows %" PRId64 "\n", m->kv_held_rows);
    add(buf, cap, &len, "# HELP quill_slot_kv_rows K/V rows held by each slot.\n# TYPE quill_slot_kv_rows gauge\n");
    for (int i = 0; i < m->n_parallel; i++) add(buf, cap, &len, "quill_slot_kv_rows{slot=\"%d\"} %d\n", i, s.rows[i]);
    snapshot_free(&s);
    return len;
}
