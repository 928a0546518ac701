/* safetensors.c: the safetensors container, read through mmap and written whole.
 *
 * Reading: every file of a checkpoint is mmapped read-only and its JSON header parsed once, at open.
 * Invariants after a successful open:
 *   (1) every st_tensor has a known dtype, 0..ST_MAX_DIMS non-negative dims, and
 *       numel * dtype size == n_bytes (no overflow);
 *   (2) data .. data + n_bytes lies inside its file's byte buffer, and no two tensors of one file
 *       overlap;
 *   (3) names are unique across the whole set, and the hash table maps each name to its tensor;
 *   (4) with an index, every name in its weight_map exists in the shard the index names.
 * Any violation is an error naming the file and the tensor; nothing aborts on bad input.
 * Tensor data may be misaligned (MLX writes no header padding): callers copy bytes out.
 *
 * Writing (st_write_file): header keys sorted, tensors packed in that order, header padded with
 * spaces to 8 bytes.
 *
 * Not here: what the tensors mean (model/weights.c), dtype conversion beyond f32/f16/bf16 reads. */
#include "safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/fileio.h"
#include "../util/hash.h"

#define ST_MAX_HEADER_BYTES (100ull << 20) /* the Python reader's limit */
#define ST_PATH_MAX 4096

typedef struct st_file {
    char *path;
    unsigned char *map;   /* whole file, PROT_READ */
    size_t size;          /* file bytes */
} st_file;

struct st_set {
    st_file *files;
    int n_files, cap_files;
    st_tensor *tensors;   /* names are owned strings; file points into files[].path */
    int n_tensors, cap_tensors;
    int *table;           /* open addressing: index into tensors, -1 empty */
    size_t table_cap;     /* power of two, >= 2 * n_tensors */
};

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [ST_BOOL] = {"BOOL", 1}, [ST_U8] = {"U8", 1},   [ST_I8] = {"I8", 1},     [ST_I16] = {"I16", 2},
    [ST_U16] = {"U16", 2},   [ST_F16] = {"F16", 2}, [ST_BF16] = {"BF16", 2}, [ST_I32] = {"I32", 4},
    [ST_U32] = {"U32", 4},   [ST_F32] = {"F32", 4}, [ST_I64] = {"I64", 8},   [ST_U64] = {"U64", 8},
    [ST_F64] = {"F64", 8},
};
#define N_DTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

size_t st_dtype_size(st_dtype dt) { return (int)dt >= 0 && (int)dt < N_DTYPES ? dtypes[dt].size : 0; }
const char *st_dtype_name(st_dtype dt) { return (int)dt >= 0 && (int)dt < N_DTYPES ? dtypes[dt].name : "?"; }

static int dtype_parse(const char *s, st_dtype *out) {
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(s, dtypes[i].name) == 0) { *out = (st_dtype)i; return 1; }
    return 0;
}

int64_t st_numel(const st_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->n_dims; i++) n *= t->shape[i];
    return n;
}

/* ---- set bookkeeping ---------------------------------------------------------------------------- */

void st_close(st_set *set) {
    if (!set) return;
    for (int i = 0; i < set->n_tensors; i++) free((char *)set->tensors[i].name);
    for (int i = 0; i < set->n_files; i++) {
        if (set->files[i].map) munmap(set->files[i].map, set->files[i].size);
        free(set->files[i].path);
    }
    free(set->tensors);
    free(set->files);
    free(set->table);
    free(set);
}

static size_t name_hash(const char *name) { return (size_t)q_fnv1a(Q_FNV_OFFSET, name, strlen(name)); }

static int table_slot(const st_set *set, const char *name) {
    size_t mask = set->table_cap - 1;
    for (size_t h = name_hash(name) & mask;; h = (h + 1) & mask) {
        int i = set->table[h];
        if (i < 0 || strcmp(set->tensors[i].name, name) == 0) return (int)h;
    }
}

static qstatus table_build(st_set *set) {
    size_t cap = 16;
    while (cap < 2 * (size_t)set->n_tensors) cap *= 2;
    int *t = malloc(cap * sizeof *t);
    if (!t) return q_fail(Q_ENOMEM, "safetensors: out of memory for the name table");
    for (size_t i = 0; i < cap; i++) t[i] = -1;
    free(set->table);
    set->table = t;
    set->table_cap = cap;
    for (int i = 0; i < set->n_tensors; i++) {
        int slot = table_slot(set, set->tensors[i].name);
        if (t[slot] >= 0)
            return q_fail(Q_EFORMAT, "%s: tensor %s also appears in %s", set->tensors[i].file,
                          set->tensors[i].name, set->tensors[t[slot]].file);
        t[slot] = i;
    }
    return Q_OK;
}

const st_tensor *st_find(const st_set *set, const char *name) {
    if (!set || !name || !set->table) return NULL;
    int i = set->table[table_slot(set, name)];
    return i < 0 ? NULL : &set->tensors[i];
}

int st_count(const st_set *set) { return set ? set->n_tensors : 0; }
const st_tensor *st_at(const st_set *set, int i) {
    return set && i >= 0 && i < set->n_tensors ? &set->tensors[i] : NULL;
}

static st_tensor *tensor_push(st_set *set) {
    if (set->n_tensors == set->cap_tensors) {
        int cap = set->cap_tensors ? set->cap_tensors * 2 : 256;
        st_tensor *t = realloc(set->tensors, (size_t)cap * sizeof *t);
        if (!t) return NULL;
        set->tensors = t;
        set->cap_tensors = cap;
    }
    st_tensor *t = &set->tensors[set->n_tensors];
    memset(t, 0, sizeof *t);
    return t;
}

/* ---- one file ----------------------------------------------------------------------------------- */

static int cmp_by_begin(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return x->data < y->data ? -1 : x->data > y->data;
}

/* Parses one tensor entry `val` named `name` of file f (data buffer at base, n_data bytes). */
static qstatus parse_entry(st_set *set, st_file *f, const char *name, json_t *val,
                           const unsigned char *base, uint64_t n_data) {
    const char *path = f->path;
    if (!json_is_object(val)) return q_fail(Q_EFORMAT, "%s: tensor %s: entry is not an object", path, name);
    json_t *jd = json_object_get(val, "dtype"), *js = json_object_get(val, "shape"),
           *jo = json_object_get(val, "data_offsets");
    if (!json_is_string(jd)) return q_fail(Q_EFORMAT, "%s: tensor %s: missing or non-string \"dtype\"", path, name);
    st_dtype dt;
    if (!dtype_parse(json_string_value(jd), &dt))
        return q_fail(Q_EFORMAT, "%s: tensor %s: unknown dtype \"%s\"", path, name, json_string_value(jd));
    if (!json_is_array(js)) return q_fail(Q_EFORMAT, "%s: tensor %s: missing or non-array \"shape\"", path, name);
    size_t nd = json_array_size(js);
    if (nd > ST_MAX_DIMS)
        return q_fail(Q_EFORMAT, "%s: tensor %s: %zu dims, at most %d supported", path, name, nd, ST_MAX_DIMS);
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)))
        return q_fail(Q_EFORMAT, "%s: tensor %s: \"data_offsets\" is not [begin, end]", path, name);
    json_int_t b = json_integer_value(json_array_get(jo, 0)), e = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || e < b || (uint64_t)e > n_data)
        return q_fail(Q_EFORMAT, "%s: tensor %s: data_offsets [%lld, %lld] outside the %llu-byte buffer",
                      path, name, (long long)b, (long long)e, (unsigned long long)n_data);
    int64_t shape[ST_MAX_DIMS];
    uint64_t numel = 1;
    int overflow = 0;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return q_fail(Q_EFORMAT, "%s: tensor %s: shape[%zu] is not a non-negative integer", path, name, i);
        shape[i] = (int64_t)json_integer_value(d);
        if (shape[i] != 0 && numel > (UINT64_MAX / 8) / (uint64_t)shape[i]) overflow = 1;
        else numel *= (uint64_t)shape[i];
    }
    uint64_t want = numel * dtypes[dt].size;
    if (overflow || want != (uint64_t)(e - b))
        return q_fail(Q_EFORMAT, "%s: tensor %s: %s shape needs %llu bytes but data_offsets span %llu", path,
                      name, dtypes[dt].name, overflow ? 0ull : (unsigned long long)want,
                      (unsigned long long)(e - b));
    st_tensor *t = tensor_push(set);
    char *nm = t ? strdup(name) : NULL;
    if (!nm) return q_fail(Q_ENOMEM, "%s: out of memory", path);
    t->name = nm;
    t->file = f->path;
    t->dtype = dt;
    t->n_dims = (int)nd;
    memcpy(t->shape, shape, nd * sizeof shape[0]);
    t->n_bytes = want;
    t->data = base + b;
    set->n_tensors++;
    return Q_OK;
}

/* mmaps path, parses its header and appends its tensors to set. */
static qstatus open_one(st_set *set, const char *path) {
    if (set->n_files == set->cap_files) {
        int cap = set->cap_files ? set->cap_files * 2 : 4;
        st_file *nf = realloc(set->files, (size_t)cap * sizeof *nf);
        if (!nf) return q_fail(Q_ENOMEM, "%s: out of memory", path);
        set->files = nf;
        set->cap_files = cap;
    }
    st_file *f = &set->files[set->n_files];
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path) return q_fail(Q_ENOMEM, "%s: out of memory", path);
    set->n_files++; /* from here st_close releases f */

    int fd = open(path, O_RDONLY);
    if (fd < 0) return q_fail(Q_EIO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        return q_fail(Q_EIO, "%s: %s", path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) { close(fd); return q_fail(Q_EIO, "%s: not a regular file", path); }
    if (sb.st_size < 8) {
        close(fd);
        return q_fail(Q_EFORMAT, "%s: truncated: %lld bytes, no header size", path, (long long)sb.st_size);
    }
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (m == MAP_FAILED) return q_fail(Q_EIO, "%s: mmap: %s", path, strerror(err));
    f->map = m;
    f->size = (size_t)sb.st_size;

    uint64_t n_hdr = 0;
    for (int i = 7; i >= 0; i--) n_hdr = (n_hdr << 8) | f->map[i];
    if (n_hdr > ST_MAX_HEADER_BYTES)
        return q_fail(Q_EFORMAT, "%s: header size %llu exceeds the %llu-byte limit", path,
                      (unsigned long long)n_hdr, ST_MAX_HEADER_BYTES);
    if (n_hdr > f->size - 8)
        return q_fail(Q_EFORMAT, "%s: truncated: header size %llu but only %zu bytes follow", path,
                      (unsigned long long)n_hdr, f->size - 8);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)f->map + 8, (size_t)n_hdr, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return q_fail(Q_EFORMAT, "%s: bad JSON header: %s (byte %d)", path, jerr.text, jerr.position);
    if (!json_is_object(root)) {
        json_decref(root);
        return q_fail(Q_EFORMAT, "%s: JSON header is not an object", path);
    }
    const unsigned char *base = f->map + 8 + n_hdr;
    uint64_t n_data = f->size - 8 - n_hdr;
    int first = set->n_tensors;
    qstatus st = Q_OK;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val) && !json_is_null(val)) {
                st = q_fail(Q_EFORMAT, "%s: \"__metadata__\" is not an object", path);
                break;
            }
            continue;
        }
        st = parse_entry(set, f, key, val, base, n_data);
        if (st) break;
    }
    json_decref(root);
    if (st) return st;

    /* Invariant (2): no overlap between this file's tensors (empty ones occupy nothing). */
    int n = set->n_tensors - first;
    if (n > 1) {
        const st_tensor **order = malloc((size_t)n * sizeof *order);
        if (!order) return q_fail(Q_ENOMEM, "%s: out of memory", path);
        for (int i = 0; i < n; i++) order[i] = &set->tensors[first + i];
        qsort(order, (size_t)n, sizeof *order, cmp_by_begin);
        const st_tensor *last = NULL; /* the non-empty tensor reaching furthest so far */
        for (int i = 0; i < n && !st; i++) {
            if (order[i]->n_bytes == 0) continue;
            if (last && order[i]->data < last->data + last->n_bytes)
                st = q_fail(Q_EFORMAT, "%s: tensor %s overlaps tensor %s", path, order[i]->name, last->name);
            if (!last || order[i]->data + order[i]->n_bytes > last->data + last->n_bytes) last = order[i];
        }
        free(order);
    }
    return st;
}

static qstatus set_new(st_set **out) {
    *out = calloc(1, sizeof **out);
    return *out ? Q_OK : q_fail(Q_ENOMEM, "safetensors: out of memory");
}

qstatus st_open_file(const char *path, st_set **out) {
    *out = NULL;
    st_set *set;
    Q_TRY(set_new(&set));
    qstatus st = open_one(set, path);
    if (!st) st = table_build(set);
    if (st) { st_close(set); return st; }
    *out = set;
    return Q_OK;
}

/* ---- a directory -------------------------------------------------------------------------------- */

/* A shard name from an index must stay inside dir. */
static int shard_name_ok(const char *s) {
    return s[0] && s[0] != '/' && !strstr(s, "..");
}

static qstatus open_indexed(st_set *set, const char *dir, const char *index_path) {
    char *text = NULL;
    Q_TRY(q_read_file(index_path, &text, NULL));
    json_error_t jerr;
    json_t *root = json_loads(text, 0, &jerr);
    free(text);
    if (!root) return q_fail(Q_EFORMAT, "%s: bad JSON: %s (line %d)", index_path, jerr.text, jerr.line);
    qstatus st = Q_OK;
    json_t *wm = json_object_get(root, "weight_map");
    char path[ST_PATH_MAX];
    const char *name;
    json_t *val;
    if (!json_is_object(wm)) {
        st = q_fail(Q_EFORMAT, "%s: missing or non-object \"weight_map\"", index_path);
        goto out;
    }
    /* Open each distinct shard once, in first-mention order. */
    json_object_foreach(wm, name, val) {
        if (!json_is_string(val) || !shard_name_ok(json_string_value(val))) {
            st = q_fail(Q_EFORMAT, "%s: weight_map[\"%s\"] is not a shard file name", index_path, name);
            goto out;
        }
        if ((st = q_path_join(path, sizeof path, dir, json_string_value(val)))) goto out;
        int seen = 0;
        for (int i = 0; i < set->n_files && !seen; i++) seen = strcmp(set->files[i].path, path) == 0;
        if (!seen && (st = open_one(set, path))) goto out;
    }
    if ((st = table_build(set))) goto out;
    /* Invariant (4): every indexed name is in the shard the index names. */
    json_object_foreach(wm, name, val) {
        if ((st = q_path_join(path, sizeof path, dir, json_string_value(val)))) goto out;
        const st_tensor *t = st_find(set, name);
        if (!t) {
            st = q_fail(Q_EFORMAT, "%s: tensor %s is listed in %s but missing from the shard", path, name, index_path);
            goto out;
        }
        if (strcmp(t->file, path) != 0) {
            st = q_fail(Q_EFORMAT, "%s: tensor %s is listed in %s for %s but found in %s", index_path, name,
                        index_path, path, t->file);
            goto out;
        }
    }
out:
    json_decref(root);
    return st;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int st_name_ends(const char *name, const char *suffix) {
    const size_t n = strlen(name), m = strlen(suffix);
    return n >= m && !strcmp(name + n - m, suffix);
}

static int has_suffix(const char *s, const char *suf) { return strlen(s) > strlen(suf) && st_name_ends(s, suf); }

static qstatus open_glob(st_set *set, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return q_fail(Q_EIO, "%s: %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, cap = 0;
    qstatus st = Q_OK;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!has_suffix(de->d_name, ".safetensors")) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            char **nn = realloc(names, (size_t)cap * sizeof *nn);
            if (!nn) { st = q_fail(Q_ENOMEM, "%s: out of memory", dir); break; }
            names = nn;
        }
        if (!(names[n] = strdup(de->d_name))) { st = q_fail(Q_ENOMEM, "%s: out of memory", dir); break; }
        n++;
    }
    closedir(d);
    if (!st && n == 0) st = q_fail(Q_EIO, "%s: no *.safetensors files and no model.safetensors.index.json", dir);
    if (!st) qsort(names, (size_t)n, sizeof *names, cmp_str); /* a deterministic order */
    char path[ST_PATH_MAX];
    for (int i = 0; i < n && !st; i++) {
        st = q_path_join(path, sizeof path, dir, names[i]);
        if (!st) st = open_one(set, path);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    if (!st) st = table_build(set);
    return st;
}

qstatus st_open_dir(const char *dir, st_set **out) {
    *out = NULL;
    char index_path[ST_PATH_MAX];
    Q_TRY(q_path_join(index_path, sizeof index_path, dir, "model.safetensors.index.json"));
    st_set *set;
    Q_TRY(set_new(&set));
    qstatus st = q_file_exists(index_path) ? open_indexed(set, dir, index_path) : open_glob(set, dir);
    if (st) { st_close(set); return st; }
    *out = set;
    return Q_OK;
}

/* ---- conversions -------------------------------------------------------------------------------- */

static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float st_bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

float st_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023;
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf / nan */
    if (exp == 0) {
        float v = (float)man * (1.0f / 16777216.0f); /* man * 2^-24: subnormal or zero */
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t st_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet nan */
    u += 0x7fffu + ((u >> 16) & 1);                                            /* round to nearest even */
    return (uint16_t)(u >> 16);
}

qstatus st_read_f32(const st_tensor *t, float *out, int64_t n) {
    if (st_numel(t) != n)
        return q_fail(Q_EFORMAT, "%s: tensor %s: %lld elements, expected %lld", t->file, t->name,
                      (long long)st_numel(t), (long long)n);
    const unsigned char *p = t->data;
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == ST_F32) {
            memcpy(&out[i], p + 4 * i, 4);
        } else if (t->dtype == ST_F16 || t->dtype == ST_BF16) {
            uint16_t h = (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8));
            out[i] = t->dtype == ST_F16 ? st_f16_to_f32(h) : st_bf16_to_f32(h);
        } else {
            return q_fail(Q_EFORMAT, "%s: tensor %s: dtype %s, expected F32, F16 or BF16", t->file, t->name,
                          st_dtype_name(t->dtype));
        }
    }
    return Q_OK;
}

/* ---- writing ------------------------------------------------------------------------------------ */

static int cmp_entry(const void *a, const void *b) {
    return strcmp((*(const st_write_entry *const *)a)->name, (*(const st_write_entry *const *)b)->name);
}

static uint64_t entry_bytes(const st_write_entry *e) {
    uint64_t n = st_dtype_size(e->dtype);
    for (int d = 0; d < e->n_dims; d++) n *= (uint64_t)e->shape[d];
    return n;
}

/* Builds the header JSON (keys sorted by jansson) for the entries in `order`. Owned string or NULL. */
static char *header_json(const st_write_entry *const *order, int n, const char *const *meta_kv, int n_meta) {
    json_t *root = json_object();
    if (!root) return NULL;
    int ok = 1;
    uint64_t off = 0;
    for (int k = 0; k < n && ok; k++) {
        const st_write_entry *e = order[k];
        json_t *shape = json_array(), *offs = json_array(), *obj = json_object();
        ok = shape && offs && obj;
        for (int d = 0; d < e->n_dims && ok; d++) ok = !json_array_append_new(shape, json_integer(e->shape[d]));
        uint64_t nb = entry_bytes(e);
        ok = ok && !json_array_append_new(offs, json_integer((json_int_t)off)) &&
             !json_array_append_new(offs, json_integer((json_int_t)(off + nb)));
        off += nb;
        ok = ok && !json_object_set_new(obj, "dtype", json_string(st_dtype_name(e->dtype)));
        ok = ok && !json_object_set(obj, "shape", shape) && !json_object_set(obj, "data_offsets", offs);
        ok = ok && !json_object_set(root, e->name, obj);
        json_decref(shape);
        json_decref(offs);
        json_decref(obj);
    }
    if (ok && n_meta > 0) {
        json_t *meta = json_object();
        ok = meta != NULL;
        for (int i = 0; i < n_meta && ok; i++)
            ok = meta_kv[2 * i] && meta_kv[2 * i + 1] &&
                 !json_object_set_new(meta, meta_kv[2 * i], json_string(meta_kv[2 * i + 1]));
        ok = ok && !json_object_set(root, "__metadata__", meta);
        json_decref(meta);
    }
    char *s = ok ? json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    return s;
}

qstatus st_write_file(const char *path, const st_write_entry *entries, int n, const char *const *meta_kv,
                      int n_meta) {
    if (n < 0 || (n > 0 && !entries) || n_meta < 0 || (n_meta > 0 && !meta_kv))
        return q_fail(Q_EINVAL, "%s: bad st_write_file arguments", path);
    for (int i = 0; i < n; i++) {
        const st_write_entry *e = &entries[i];
        if (!e->name || !e->name[0] || strcmp(e->name, "__metadata__") == 0)
            return q_fail(Q_EINVAL, "%s: entry %d has no usable name", path, i);
        if (st_dtype_size(e->dtype) == 0 || e->n_dims < 0 || e->n_dims > ST_MAX_DIMS)
            return q_fail(Q_EINVAL, "%s: tensor %s: bad dtype or dims", path, e->name);
        for (int d = 0; d < e->n_dims; d++)
            if (e->shape[d] < 0) return q_fail(Q_EINVAL, "%s: tensor %s: negative dim", path, e->name);
        if (entry_bytes(e) > 0 && !e->data) return q_fail(Q_EINVAL, "%s: tensor %s: no data", path, e->name);
    }
    const st_write_entry **order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    if (!order) return q_fail(Q_ENOMEM, "%s: out of memory", path);
    for (int i = 0; i < n; i++) order[i] = &entries[i];
    qsort(order, (size_t)n, sizeof *order, cmp_entry);
    for (int k = 1; k < n; k++)
        if (strcmp(order[k]->name, order[k - 1]->name) == 0) {
            const char *dup = order[k]->name;
            free(order);
            return q_fail(Q_EINVAL, "%s: tensor %s given twice", path, dup);
        }
    char *hdr = header_json(order, n, meta_kv, n_meta);
    if (!hdr) { free(order); return q_fail(Q_ENOMEM, "%s: could not build the header", path); }
    size_t n_hdr = strlen(hdr), pad = (8 - n_hdr % 8) % 8;
    qstatus st = Q_OK;
    FILE *f = fopen(path, "wb");
    if (!f) {
        st = q_fail(Q_EIO, "%s: %s", path, strerror(errno));
        goto out;
    }
    unsigned char len[8];
    uint64_t total = n_hdr + pad;
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(total >> (8 * i));
    int ok = fwrite(len, 1, 8, f) == 8 && fwrite(hdr, 1, n_hdr, f) == n_hdr;
    for (size_t i = 0; i < pad && ok; i++) ok = fputc(' ', f) != EOF;
    for (int k = 0; k < n && ok; k++) {
        size_t nb = (size_t)entry_bytes(order[k]);
        ok = nb == 0 || fwrite(order[k]->data, 1, nb, f) == nb;
    }
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        remove(path);
        st = q_fail(Q_EIO, "%s: write failed", path);
    }
out:
    free(hdr);
    free(order);
    return st;
}
