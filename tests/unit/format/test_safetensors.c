/* test_safetensors.c: format/safetensors.c. Round trip through st_write_file; every malformed header
 * case returns an error (never a crash) whose message names the file and, where there is one, the
 * tensor; sharded checkpoints with an index and without; lookup over ~1000 names; conversions.
 * Files live in a mkdtemp directory under /tmp, removed by the teardown. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "format/safetensors.h"

typedef struct tdir {
    char path[64];
} tdir;

static int setup(void **state) {
    tdir *d = calloc(1, sizeof *d);
    if (!d) return -1;
    snprintf(d->path, sizeof d->path, "/tmp/quill_st_XXXXXX");
    if (!mkdtemp(d->path)) { free(d); return -1; }
    *state = d;
    return 0;
}

static int teardown(void **state) {
    tdir *d = *state;
    DIR *dd = opendir(d->path);
    struct dirent *de;
    char p[512];
    while (dd && (de = readdir(dd))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", d->path, de->d_name);
        unlink(p);
    }
    if (dd) closedir(dd);
    rmdir(d->path);
    free(d);
    return 0;
}

static void join(char *buf, size_t cap, const tdir *d, const char *name) { snprintf(buf, cap, "%s/%s", d->path, name); }

/* Writes u64 header size (n_hdr_claim, or strlen(hdr) when ~0), hdr, then n_data bytes of data. */
static void write_raw(const char *path, const char *hdr, uint64_t n_hdr_claim, const void *data, size_t n_data) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t n = n_hdr_claim == ~0ull ? strlen(hdr) : n_hdr_claim;
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(n >> (8 * i));
    assert_int_equal(fwrite(len, 1, 8, f), 8);
    assert_int_equal(fwrite(hdr, 1, strlen(hdr), f), strlen(hdr));
    if (n_data) assert_int_equal(fwrite(data, 1, n_data, f), n_data);
    assert_int_equal(fclose(f), 0);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* Opening `path` fails with `want`, and the message mentions every non-NULL needle. */
static void expect_fail_file(const char *path, qstatus want, const char *needle1, const char *needle2) {
    st_set *s = (st_set *)0x1;
    qstatus st = st_open_file(path, &s);
    assert_int_equal(st, want);
    assert_null(s);
    if (needle1 && !strstr(q_lasterr(), needle1)) fail_msg("message \"%s\" lacks \"%s\"", q_lasterr(), needle1);
    if (needle2 && !strstr(q_lasterr(), needle2)) fail_msg("message \"%s\" lacks \"%s\"", q_lasterr(), needle2);
}

static void test_round_trip(void **state) {
    tdir *d = *state;
    char path[256];
    join(path, sizeof path, d, "rt.safetensors");
    float a[6] = {1, -2, 3.5f, 0.25f, 100, -0.125f};
    uint16_t b[4];
    float bsrc[4] = {1.0f, 0.1f, -3.0f, 65504.0f};
    for (int i = 0; i < 4; i++) b[i] = st_f32_to_bf16(bsrc[i]);
    uint32_t u[4] = {0x01234567u, 0x89abcdefu, 0, 0xffffffffu};
    uint16_t h[3] = {0x3c00, 0xc000, 0x0001}; /* 1, -2, smallest subnormal */
    float scalar = 7.0f;
    st_write_entry e[] = {
        {"z.weight", ST_F32, 2, {2, 3}, a},
        {"a.bias", ST_BF16, 1, {4}, b},
        {"m.codes", ST_U32, 2, {2, 2}, u},
        {"half", ST_F16, 1, {3}, h},
        {"scalar", ST_F32, 0, {0}, &scalar},
        {"empty", ST_F32, 2, {0, 5}, NULL},
    };
    const char *meta[] = {"format", "pt", "quill", "test"};
    assert_ok(st_write_file(path, e, 6, meta, 2));

    /* The byte buffer starts 8-aligned (header padded like the Python writer). */
    FILE *f = fopen(path, "rb");
    unsigned char len[8];
    assert_int_equal(fread(len, 1, 8, f), 8);
    fclose(f);
    assert_int_equal(len[0] % 8, 0);

    st_set *s;
    assert_ok(st_open_file(path, &s));
    assert_int_equal(st_count(s), 6);
    const st_tensor *t = st_find(s, "z.weight");
    assert_non_null(t);
    assert_int_equal(t->dtype, ST_F32);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->n_bytes, sizeof a);
    assert_string_equal(t->file, path);
    assert_memory_equal(t->data, a, sizeof a);
    t = st_find(s, "m.codes");
    assert_non_null(t);
    assert_int_equal(t->dtype, ST_U32);
    assert_memory_equal(t->data, u, sizeof u);
    t = st_find(s, "scalar");
    assert_non_null(t);
    assert_int_equal(t->n_dims, 0);
    assert_int_equal(st_numel(t), 1);
    t = st_find(s, "empty");
    assert_non_null(t);
    assert_int_equal(t->n_bytes, 0);
    assert_null(st_find(s, "__metadata__"));
    assert_null(st_find(s, "nope"));

    float out[4];
    t = st_find(s, "a.bias");
    assert_ok(st_read_f32(t, out, 4));
    assert_true(out[0] == 1.0f && out[2] == -3.0f);
    assert_true(out[1] > 0.0996f && out[1] < 0.1004f);
    assert_true(out[3] == 65536.0f); /* 65504 rounds to nearest even in bf16 */
    t = st_find(s, "half");
    assert_ok(st_read_f32(t, out, 3));
    assert_true(out[0] == 1.0f && out[1] == -2.0f && out[2] == 5.9604644775390625e-8f);
    assert_int_equal(st_read_f32(t, out, 2), Q_EFORMAT); /* wrong count */
    assert_non_null(strstr(q_lasterr(), "half"));
    assert_int_equal(st_read_f32(st_find(s, "m.codes"), out, 4), Q_EFORMAT); /* not a float dtype */
    assert_non_null(strstr(q_lasterr(), "m.codes"));

    /* st_at walks every tensor once. */
    int seen = 0;
    for (int i = 0; i < st_count(s); i++) seen += st_find(s, st_at(s, i)->name) == st_at(s, i);
    assert_int_equal(seen, 6);
    assert_null(st_at(s, 6));
    st_close(s);
    st_close(NULL);
}

static void test_writer_rejects(void **state) {
    tdir *d = *state;
    char path[256];
    join(path, sizeof path, d, "bad_w.safetensors");
    float x = 1;
    st_write_entry dup[] = {{"a", ST_F32, 1, {1}, &x}, {"a", ST_F32, 1, {1}, &x}};
    assert_int_equal(st_write_file(path, dup, 2, NULL, 0), Q_EINVAL);
    assert_non_null(strstr(q_lasterr(), "a given twice"));
    st_write_entry nodata[] = {{"b", ST_F32, 1, {3}, NULL}};
    assert_int_equal(st_write_file(path, nodata, 1, NULL, 0), Q_EINVAL);
    assert_non_null(strstr(q_lasterr(), "b"));
    assert_int_equal(st_write_file("/nonexistent_dir/x.safetensors", dup, 1, NULL, 0), Q_EIO);
}

static void test_truncated(void **state) {
    tdir *d = *state;
    char path[256];
    join(path, sizeof path, d, "short.safetensors");
    write_text(path, "abc");
    expect_fail_file(path, Q_EFORMAT, path, "truncated");
    write_text(path, "");
    expect_fail_file(path, Q_EFORMAT, path, "truncated");

    /* A whole file cut short in its data: the last tensor's offsets leave the file. */
    float a[8] = {0};
    st_write_entry e[] = {{"first", ST_F32, 1, {4}, a}, {"second", ST_F32, 1, {4}, a + 4}};
    assert_ok(st_write_file(path, e, 2, NULL, 0));
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    assert_int_equal(truncate(path, size - 3), 0);
    expect_fail_file(path, Q_EFORMAT, path, "second");
    /* Cut inside the header. */
    assert_int_equal(truncate(path, 20), 0);
    expect_fail_file(path, Q_EFORMAT, path, "truncated");
}

static void test_bad_json(void **state) {
    tdir *d = *state;
    char path[256];
    join(path, sizeof path, d, "json.safetensors");
    write_raw(path, "{\"a\": {\"dtype\": \"F32\",", ~0ull, NULL, 0);
    expect_fail_file(path, Q_EFORMAT, path, "bad JSON");
    write_raw(path, "[1, 2]", ~0ull, NULL, 0);
    expect_fail_file(path, Q_EFORMAT, path, "not an object");
    write_raw(path, "{\"w\": 5}", ~0ull, NULL, 0);
    expect_fail_file(path, Q_EFORMAT, path, "w");
    write_raw(path, "{\"w\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", ~0ull, "abcd", 4);
    expect_fail_file(path, Q_EFORMAT, path, "w: missing or non-string \"dtype\"");
    write_raw(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", ~0ull, "abcd", 4);
    expect_fail_file(path, Q_EFORMAT, path, "w: shape[0]");
    write_raw(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", ~0ull, "abcd", 4);
    expect_fail_file(path, Q_EFORMAT, path, "w: \"data_offsets\"");
    write_raw(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}", ~0ull,
              "abcd", 4);
    expect_fail_file(path, Q_EFORMAT, path, "w: 9 dims");
    write_raw(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, \"__metadata__\": 3}",
              ~0ull, "abcd", 4);
    expect_fail_file(path, Q_EFORMAT, path, "__metadata__");
    /* Duplicate keys are rejected by the JSON parser. */
    write_raw(path, "{\"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}, "
              "\"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", ~0ull, "a", 1);
    expect_fail_file(path, Q_EFORMAT, path, "bad JSON");
}

static void test_header_size(void **state) {
    tdir *d = *state;
    char path[256];
    join(path, sizeof path, d, "hsize.safetensors");
    write_raw(path, "{}", 1000, NULL, 0);
    expect_fail_file(path, Q_EFORMAT, path, "header size 1000");
    write_raw(path, "{}", 1ull << 60, NULL, 0);
    expect_fail_file(path, Q_EFORMAT, path, "exceeds");
    write_raw(path, "{}", ~0ull - 1, NULL, 0);
    expect_fail_file(path, Q_EFORMAT, path, NULL);
    /* An empty header is a valid, empty file. */
    write_raw(path, "{}", ~0ull, NULL, 0);
    st_set *s;
    assert_ok(st_open_file(path, &s));
    assert_int_equal(st_count(s), 0);
    st_close(s);
}

static void test_unknown_dtype(void **state) {
    tdir *d = *state;
    char path[256];
    join(path, sizeof path, d, "dtype.safetensors");
    write_raw(path, "{\"layer.w\": {\"dtype\": \"F8_E4M3\", \"shape\": [4], \"data_offsets\": [0, 4]}}", ~0ull,
              "abcd", 4);
    expect_fail_file(path, Q_EFORMAT, path, "layer.w: unknown dtype \"F8_E4M3\"");
}

static void test_wrong_shape(void **state) {
    tdir *d = *state;
    char path[256];
    join(path, sizeof path, d, "shape.safetensors");
    char data[24] = {0};
    write_raw(path, "{\"proj.weight\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 20]}}", ~0ull,
              data, 24);
    expect_fail_file(path, Q_EFORMAT, path, "proj.weight");
    /* A product that overflows 64 bits. */
    write_raw(path, "{\"big\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 16], \"data_offsets\": [0, 0]}}",
              ~0ull, NULL, 0);
    expect_fail_file(path, Q_EFORMAT, path, "big");
}

static void test_offsets_outside(void **state) {
    tdir *d = *state;
    char path[256];
    join(path, sizeof path, d, "offs.safetensors");
    char data[16] = {0};
    write_raw(path, "{\"t.w\": {\"dtype\": \"F32\", \"shape\": [6], \"data_offsets\": [0, 24]}}", ~0ull, data, 16);
    expect_fail_file(path, Q_EFORMAT, path, "t.w");
    write_raw(path, "{\"t.w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", ~0ull, data, 16);
    expect_fail_file(path, Q_EFORMAT, path, "t.w");
    write_raw(path, "{\"t.w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", ~0ull, data, 16);
    expect_fail_file(path, Q_EFORMAT, path, "t.w");
    write_raw(path, "{\"t.a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
              "\"t.b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", ~0ull, data, 16);
    expect_fail_file(path, Q_EFORMAT, path, "overlaps");
    /* Overlap with an earlier tensor that is not the previous one by offset. */
    write_raw(path, "{\"t.a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}, "
              "\"t.b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}, "
              "\"t.c\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}}", ~0ull, data, 16);
    expect_fail_file(path, Q_EFORMAT, path, "overlaps tensor t.a");
    /* Empty tensors sharing an offset with a real one are fine. */
    write_raw(path, "{\"t.a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
              "\"t.e\": {\"dtype\": \"F32\", \"shape\": [0, 3], \"data_offsets\": [0, 0]}, "
              "\"t.f\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [8, 8]}, "
              "\"t.b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}", ~0ull, data, 16);
    st_set *s;
    assert_ok(st_open_file(path, &s));
    assert_int_equal(st_count(s), 4);
    st_close(s);
}

static void test_misaligned(void **state) {
    tdir *d = *state;
    char path[256];
    join(path, sizeof path, d, "mis.safetensors");
    /* MLX style: no header padding, so the F32 tensor sits at an odd address. */
    unsigned char data[9] = {0x11};
    float v = 2.5f;
    memcpy(data + 1, &v, 4);
    memcpy(data + 5, &v, 4);
    write_raw(path, "{\"b\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}, "
              "\"f\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [1, 9]}}", ~0ull, data, 9);
    st_set *s;
    assert_ok(st_open_file(path, &s));
    float out[2];
    assert_ok(st_read_f32(st_find(s, "f"), out, 2));
    assert_true(out[0] == 2.5f && out[1] == 2.5f);
    st_close(s);
}

static void test_missing_file(void **state) {
    tdir *d = *state;
    char path[256];
    join(path, sizeof path, d, "nope.safetensors");
    expect_fail_file(path, Q_EIO, path, NULL);
    st_set *s;
    assert_int_equal(st_open_dir(d->path, &s), Q_EIO); /* empty dir */
    assert_non_null(strstr(q_lasterr(), d->path));
    assert_int_equal(st_open_dir("/nonexistent_quill_dir", &s), Q_EIO);
}

/* Two shards, each holding two tensors. */
static void write_shards(const tdir *d) {
    char path[256];
    float a[2] = {1, 2}, b[3] = {3, 4, 5}, c[1] = {6}, e[4] = {7, 8, 9, 10};
    st_write_entry s1[] = {{"model.a", ST_F32, 1, {2}, a}, {"model.b", ST_F32, 1, {3}, b}};
    st_write_entry s2[] = {{"model.c", ST_F32, 1, {1}, c}, {"lm_head.weight", ST_F32, 2, {2, 2}, e}};
    join(path, sizeof path, d, "model-00001-of-00002.safetensors");
    assert_ok(st_write_file(path, s1, 2, NULL, 0));
    join(path, sizeof path, d, "model-00002-of-00002.safetensors");
    assert_ok(st_write_file(path, s2, 2, NULL, 0));
}

static void test_sharded_index(void **state) {
    tdir *d = *state;
    write_shards(d);
    char path[256];
    join(path, sizeof path, d, "model.safetensors.index.json");
    write_text(path, "{\"metadata\": {\"total_size\": 40}, \"weight_map\": {"
                     "\"model.a\": \"model-00001-of-00002.safetensors\", \"model.b\": \"model-00001-of-00002.safetensors\","
                     "\"model.c\": \"model-00002-of-00002.safetensors\", "
                     "\"lm_head.weight\": \"model-00002-of-00002.safetensors\"}}");
    st_set *s;
    assert_ok(st_open_dir(d->path, &s));
    assert_int_equal(st_count(s), 4);
    const st_tensor *t = st_find(s, "lm_head.weight");
    assert_non_null(t);
    assert_non_null(strstr(t->file, "model-00002-of-00002.safetensors"));
    float out[4];
    assert_ok(st_read_f32(t, out, 4));
    assert_true(out[3] == 10);
    assert_non_null(strstr(st_find(s, "model.b")->file, "00001"));
    st_close(s);

    /* The index names a tensor its shard lacks. */
    write_text(path, "{\"weight_map\": {\"model.a\": \"model-00001-of-00002.safetensors\","
                     "\"model.ghost\": \"model-00002-of-00002.safetensors\"}}");
    assert_int_equal(st_open_dir(d->path, &s), Q_EFORMAT);
    assert_null(s);
    assert_non_null(strstr(q_lasterr(), "model.ghost"));
    assert_non_null(strstr(q_lasterr(), "model-00002-of-00002.safetensors"));

    /* The index puts a tensor in the wrong shard. */
    write_text(path, "{\"weight_map\": {\"model.a\": \"model-00002-of-00002.safetensors\","
                     "\"model.c\": \"model-00001-of-00002.safetensors\"}}");
    assert_int_equal(st_open_dir(d->path, &s), Q_EFORMAT);
    assert_non_null(strstr(q_lasterr(), "model."));

    /* The index names a shard that does not exist. */
    write_text(path, "{\"weight_map\": {\"model.a\": \"model-00003-of-00002.safetensors\"}}");
    assert_int_equal(st_open_dir(d->path, &s), Q_EIO);
    assert_non_null(strstr(q_lasterr(), "model-00003-of-00002.safetensors"));

    /* Escaping the directory, a non-object weight_map, bad JSON. */
    write_text(path, "{\"weight_map\": {\"model.a\": \"../x.safetensors\"}}");
    assert_int_equal(st_open_dir(d->path, &s), Q_EFORMAT);
    assert_non_null(strstr(q_lasterr(), "model.a"));
    write_text(path, "{\"weight_map\": [1]}");
    assert_int_equal(st_open_dir(d->path, &s), Q_EFORMAT);
    assert_non_null(strstr(q_lasterr(), "weight_map"));
    write_text(path, "{\"weight_map\": ");
    assert_int_equal(st_open_dir(d->path, &s), Q_EFORMAT);
    assert_non_null(strstr(q_lasterr(), "model.safetensors.index.json"));
}

static void test_sharded_glob(void **state) {
    tdir *d = *state;
    write_shards(d);
    st_set *s;
    assert_ok(st_open_dir(d->path, &s)); /* no index: every *.safetensors */
    assert_int_equal(st_count(s), 4);
    assert_non_null(st_find(s, "model.a"));
    assert_non_null(st_find(s, "model.c"));
    st_close(s);

    /* A third file repeating a name is an error naming the tensor and both files. */
    char path[256];
    float x = 0;
    st_write_entry e[] = {{"model.c", ST_F32, 1, {1}, &x}};
    join(path, sizeof path, d, "extra.safetensors");
    assert_ok(st_write_file(path, e, 1, NULL, 0));
    assert_int_equal(st_open_dir(d->path, &s), Q_EFORMAT);
    assert_non_null(strstr(q_lasterr(), "model.c"));
    assert_non_null(strstr(q_lasterr(), "extra.safetensors"));
    /* A malformed shard fails the whole open, naming it. */
    write_text(path, "xx");
    assert_int_equal(st_open_dir(d->path, &s), Q_EFORMAT);
    assert_non_null(strstr(q_lasterr(), "extra.safetensors"));
}

static void test_many_names(void **state) {
    tdir *d = *state;
    enum { N = 1200 };
    char(*names)[48] = malloc(N * sizeof *names);
    st_write_entry *e = calloc(N, sizeof *e);
    int32_t *vals = malloc(N * sizeof *vals);
    assert_true(names && e && vals);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "model.layers.%d.mlp.w%d", i / 7, i % 7);
        vals[i] = i * 3;
        e[i] = (st_write_entry){names[i], ST_I32, 1, {1}, &vals[i]};
    }
    char path[256];
    join(path, sizeof path, d, "many.safetensors");
    assert_ok(st_write_file(path, e, N, NULL, 0));
    st_set *s;
    assert_ok(st_open_file(path, &s));
    assert_int_equal(st_count(s), N);
    for (int i = 0; i < N; i++) {
        const st_tensor *t = st_find(s, names[i]);
        assert_non_null(t);
        int32_t v;
        memcpy(&v, t->data, 4);
        assert_int_equal(v, i * 3);
    }
    assert_null(st_find(s, "model.layers.0.mlp.w7"));
    st_close(s);
    free(names);
    free(e);
    free(vals);
}

static void test_dtype_table(void **state) {
    (void)state;
    assert_int_equal(st_dtype_size(ST_BF16), 2);
    assert_int_equal(st_dtype_size(ST_F64), 8);
    assert_int_equal(st_dtype_size(ST_BOOL), 1);
    assert_string_equal(st_dtype_name(ST_U32), "U32");
    assert_int_equal(st_dtype_size((st_dtype)99), 0);
    assert_true(st_f16_to_f32(0x7c00) > 3e38f);        /* +inf */
    assert_true(st_f16_to_f32(0x3555) > 0.333f && st_f16_to_f32(0x3555) < 0.3334f);
    assert_int_equal(st_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(st_f32_to_bf16(-2.0f), 0xc000);
    assert_true(st_bf16_to_f32(st_f32_to_bf16(3.140625f)) == 3.140625f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_rejects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_header_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_dtype, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_shape, setup, teardown),
        cmocka_unit_test_setup_teardown(test_offsets_outside, setup, teardown),
        cmocka_unit_test_setup_teardown(test_misaligned, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sharded_index, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sharded_glob, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_names, setup, teardown),
        cmocka_unit_test(test_dtype_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
