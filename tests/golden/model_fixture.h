/* model_fixture.h: reading the model goldens made by tools/goldens/make_model_goldens.py:
 * tests/fixtures/models/<name>/{config.json, *.safetensors, goldens.json, logits_<i>.f32}. */
#ifndef QUILL_MODEL_FIXTURE_H
#define QUILL_MODEL_FIXTURE_H

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "harness.h"
#include "model/qwen35.h"
#ifdef QUILL_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#include "util/fileio.h"

typedef struct fixture_prompt {
    int32_t *ids;
    int n_ids;
    float *logits;      /* [vocab] at the last prompt position */
    float *logits_all;  /* [n_ids][vocab] or NULL */
    int32_t *greedy;
    int n_greedy;
} fixture_prompt;

typedef struct fixture {
    char dir[1024];
    int vocab;
    fixture_prompt prompts[16];
    int n_prompts;
} fixture;

static inline float *fixture_read_f32(const char *dir, const char *name, size_t n) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    size_t got = fread(v, sizeof *v, n, f);
    fclose(f);
    if (got != n) fail_msg("%s: expected %zu floats, got %zu", path, n, got);
    return v;
}

static inline int32_t *fixture_ids(json_t *arr, int *n) {
    assert_true(json_is_array(arr));
    *n = (int)json_array_size(arr);
    int32_t *ids = malloc((size_t)(*n + 1) * sizeof *ids);
    assert_non_null(ids);
    for (int i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(arr, (size_t)i));
    return ids;
}

/* Loads tests/fixtures/models/<name>/goldens.json; fails the test if absent. */
static inline void fixture_load(const char *name, fixture *fx) {
    memset(fx, 0, sizeof *fx);
    snprintf(fx->dir, sizeof fx->dir, "%s/models/%s", QUILL_FIXTURES, name);
    char path[1200];
    snprintf(path, sizeof path, "%s/goldens.json", fx->dir);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) fail_msg("%s: %s (line %d)", path, err.text, err.line);
    fx->vocab = (int)json_integer_value(json_object_get(root, "vocab_size"));
    json_t *prompts = json_object_get(root, "prompts");
    assert_true(json_is_array(prompts));
    fx->n_prompts = (int)json_array_size(prompts);
    assert_true(fx->n_prompts > 0 && fx->n_prompts <= 16);
    for (int i = 0; i < fx->n_prompts; i++) {
        json_t *p = json_array_get(prompts, (size_t)i);
        fixture_prompt *fp = &fx->prompts[i];
        fp->ids = fixture_ids(json_object_get(p, "ids"), &fp->n_ids);
        fp->greedy = fixture_ids(json_object_get(p, "greedy"), &fp->n_greedy);
        fp->logits = fixture_read_f32(fx->dir, json_string_value(json_object_get(p, "logits")), (size_t)fx->vocab);
        json_t *all = json_object_get(p, "logits_all");
        if (json_is_string(all))
            fp->logits_all = fixture_read_f32(fx->dir, json_string_value(all), (size_t)fx->vocab * fp->n_ids);
    }
    json_decref(root);
}

static inline void fixture_free(fixture *fx) {
    for (int i = 0; i < fx->n_prompts; i++) {
        free(fx->prompts[i].ids);
        free(fx->prompts[i].greedy);
        free(fx->prompts[i].logits);
        free(fx->prompts[i].logits_all);
    }
}

/* The backend the model tests run on: $QUILL_TEST_BACKEND ("cpu", the default, or "cuda"; tests/cuda/run.sh
 * sets it on the GPU machine). */
static inline qstatus test_backend_create(qbackend **be) {
    const char *name = getenv("QUILL_TEST_BACKEND");
    if (name && !strcmp(name, "cuda")) {
#ifdef QUILL_HAVE_CUDA
        return cuda_backend_create(0, be);
#else
        return q_fail(Q_EUNSUPPORTED, "QUILL_TEST_BACKEND=cuda but this build has no CUDA");
#endif
    }
    return cpu_backend_create(0, be);
}

/* max |a - b| / max |b|: the relative error the goldens are held to. */
static inline double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= num)) num = d; /* NaN propagates as a failure */
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return den > 0 ? num / den : num;
}

#endif
