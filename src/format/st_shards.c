/* st_shards.c: sharded safetensors writing (see st_shards.h). Invariant: every tensor added is either
 * in `pending` (owned, not yet written) or written to shard file number `n_shards - 1` or earlier, and
 * `names` records which file holds it for the index. */
#include "st_shards.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/fileio.h"

typedef struct written { char *name; int shard; } written;

struct st_shards {
    char dir[1024];
    int64_t shard_bytes, pending_bytes, total_bytes;
    st_write_entry *pending;
    int n_pending, cap_pending;
    written *names;
    int n_names, cap_names;
    int n_shards;
};

qstatus st_shards_create(const char *dir, int64_t shard_bytes, st_shards **out) {
    st_shards *w = calloc(1, sizeof *w);
    if (!w) return q_fail(Q_ENOMEM, "shard writer: out of memory");
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    w->shard_bytes = shard_bytes > 0 ? shard_bytes : ((int64_t)4 << 30);
    *out = w;
    return Q_OK;
}

static void free_pending(st_shards *w) {
    for (int i = 0; i < w->n_pending; i++) {
        free((void *)w->pending[i].name);
        free((void *)w->pending[i].data);
    }
    w->n_pending = 0;
    w->pending_bytes = 0;
}

static void tmp_name(const st_shards *w, int shard, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/.shard-%05d.safetensors.tmp", w->dir, shard);
}

static qstatus flush(st_shards *w) {
    if (w->n_pending == 0) return Q_OK;
    char path[1200];
    tmp_name(w, w->n_shards, path, sizeof path);
    qstatus st = st_write_file(path, w->pending, w->n_pending, NULL, 0);
    if (st != Q_OK) return st;
    for (int i = 0; i < w->n_pending; i++) {
        if (w->n_names == w->cap_names) {
            int cap = w->cap_names ? 2 * w->cap_names : 256;
            written *nn = realloc(w->names, (size_t)cap * sizeof *nn);
            if (!nn) return q_fail(Q_ENOMEM, "shard writer: out of memory");
            w->names = nn;
            w->cap_names = cap;
        }
        w->names[w->n_names].name = (char *)w->pending[i].name;
        w->names[w->n_names++].shard = w->n_shards;
        w->pending[i].name = NULL; /* moved */
        free((void *)w->pending[i].data);
        w->pending[i].data = NULL;
    }
    w->n_pending = 0;
    w->pending_bytes = 0;
    w->n_shards++;
    return Q_OK;
}

qstatus st_shards_add(st_shards *w, const char *name, st_dtype dtype, int n_dims, const int64_t *shape,
                      void *data) {
    int64_t bytes = (int64_t)st_dtype_size(dtype);
    for (int d = 0; d < n_dims; d++) bytes *= shape[d];
    if (n_dims > ST_MAX_DIMS) { free(data); return q_fail(Q_EINVAL, "%s: too many dims", name); }
    if (w->n_pending > 0 && w->pending_bytes + bytes > w->shard_bytes) {
        qstatus st = flush(w);
        if (st != Q_OK) { free(data); return st; }
    }
    if (w->n_pending == w->cap_pending) {
        int cap = w->cap_pending ? 2 * w->cap_pending : 64;
        st_write_entry *np = realloc(w->pending, (size_t)cap * sizeof *np);
        if (!np) { free(data); return q_fail(Q_ENOMEM, "shard writer: out of memory"); }
        w->pending = np;
        w->cap_pending = cap;
    }
    char *nm = strdup(name);
    if (!nm) { free(data); return q_fail(Q_ENOMEM, "shard writer: out of memory"); }
    st_write_entry *e = &w->pending[w->n_pending++];
    memset(e, 0, sizeof *e);
    e->name = nm;
    e->dtype = dtype;
    e->n_dims = n_dims;
    for (int d = 0; d < n_dims; d++) e->shape[d] = shape[d];
    e->data = data;
    w->pending_bytes += bytes;
    w->total_bytes += bytes;
    return Q_OK;
}

static void final_name(const st_shards *w, int shard, char *buf, size_t cap) {
    if (w->n_shards == 1) snprintf(buf, cap, "model.safetensors");
    else snprintf(buf, cap, "model-%05d-of-%05d.safetensors", shard + 1, w->n_shards);
}

static qstatus write_index(st_shards *w) {
    json_t *root = json_object(), *meta = json_object(), *map = json_object();
    if (!root || !meta || !map) return q_fail(Q_ENOMEM, "shard index: out of memory");
    json_object_set_new(meta, "total_size", json_integer(w->total_bytes));
    json_object_set_new(root, "metadata", meta);
    for (int i = 0; i < w->n_names; i++) {
        char fn[128];
        final_name(w, w->names[i].shard, fn, sizeof fn);
        json_object_set_new(map, w->names[i].name, json_string(fn));
    }
    json_object_set_new(root, "weight_map", map);
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", w->dir);
    int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    return rc == 0 ? Q_OK : q_fail(Q_EIO, "%s: cannot write", path);
}

static void free_all(st_shards *w) {
    free_pending(w);
    free(w->pending);
    for (int i = 0; i < w->n_names; i++) free(w->names[i].name);
    free(w->names);
    free(w);
}

qstatus st_shards_finish(st_shards *w) {
    qstatus st = flush(w);
    for (int s = 0; st == Q_OK && s < w->n_shards; s++) {
        char from[1200], to[1200], fn[128];
        tmp_name(w, s, from, sizeof from);
        final_name(w, s, fn, sizeof fn);
        snprintf(to, sizeof to, "%s/%s", w->dir, fn);
        if (rename(from, to) != 0) st = q_fail(Q_EIO, "%s: cannot rename to %s", from, to);
    }
    if (st == Q_OK && w->n_shards > 1) st = write_index(w);
    free_all(w);
    return st;
}

void st_shards_abort(st_shards *w) {
    if (w) free_all(w);
}
