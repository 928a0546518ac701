/* cuda_test_util.h: what the CUDA op tests (tests/cuda/test_cuda_*.c) share: the two backends, random
 * buffers mirrored on both, weights in every format, and the table rows they print (relative error
 * under a bound, or bitwise equality). Each test program includes it once. */
#ifndef QUILL_CUDA_TEST_UTIL_H
#define QUILL_CUDA_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device.h"
#include "test_alloc.h"

static qbackend *cpu, *gpu;
static int n_fail, n_pass;
static unsigned rng = 12345u;

static inline float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

static inline void die(const char *what) {
    fprintf(stderr, "FATAL %s: %s\n", what, q_lasterr());
    exit(1);
}
#define OK(x) do { if ((x) != Q_OK) die(#x); } while (0)

/* A buffer mirrored on both backends. */
typedef struct buf { size_t bytes; void *c, *g; } buf;

static inline buf mk(size_t bytes, const void *host) {
    buf b = {bytes, NULL, NULL};
    OK(cpu->ops->alloc(cpu, bytes, &b.c));
    OK(gpu->ops->alloc(gpu, bytes, &b.g));
    if (host) {
        OK(cpu->ops->upload(cpu, b.c, host, bytes));
        OK(gpu->ops->upload(gpu, b.g, host, bytes));
    }
    return b;
}
static inline buf mk_rand(size_t n, float scale) {
    float *h = xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = frand() * scale;
    buf b = mk(n * sizeof(float), h);
    free(h);
    return b;
}
static inline void rm(buf b) { cpu->ops->free(cpu, b.c); gpu->ops->free(gpu, b.g); }

/* A table row for a relative error e against its bound. */
static inline void expect_err(const char *name, double e, double tol) {
    int ok = e <= tol;
    printf("| %-40s | %9.2e | %7.0e | %s |\n", name, e, tol, ok ? "ok" : "FAIL");
    ok ? n_pass++ : n_fail++;
}

/* max |x - ref| / max |ref| over n values (a NaN difference counts as the largest). */
static inline double rel_err(const float *ref, const float *x, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)ref[i] - x[i]);
        if (!(d <= num)) num = d;
        if (fabs(ref[i]) > den) den = fabs(ref[i]);
    }
    return den > 0 ? num / den : num;
}

/* Compares the float contents of b on both backends. */
static inline void expect_close(const char *name, buf b, double tol) {
    float *x = xmalloc(b.bytes), *y = xmalloc(b.bytes);
    OK(cpu->ops->download(cpu, x, b.c, b.bytes));
    OK(gpu->ops->download(gpu, y, b.g, b.bytes));
    expect_err(name, rel_err(x, y, b.bytes / sizeof(float)), tol);
    free(x);
    free(y);
}

static inline void expect_flag(const char *name, int ok) {
    printf("| %-40s | %9s | %7s | %s |\n", name, ok ? "bitwise" : "differs", "exact", ok ? "ok" : "FAIL");
    ok ? n_pass++ : n_fail++;
}

static inline void expect_same(const char *name, const void *a, const void *b, size_t bytes) {
    expect_flag(name, memcmp(a, b, bytes) == 0);
}

static inline void bf16_from(const float *f, uint16_t *o, size_t n) {
    for (size_t i = 0; i < n; i++) { uint32_t u; memcpy(&u, &f[i], 4); o[i] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16); }
}

/* A K/V cache of `rows` positions of n_kv heads of dim values in fmt (backend.h qkv_row_bytes), holding the
 * same random rows on both backends. */
static inline buf mk_cache(size_t rows, int n_kv, int dim, qwfmt fmt) {
    const size_t width = (size_t)n_kv * dim, rb = (size_t)qkv_row_bytes(fmt, n_kv, dim);
    float *f = xmalloc(width * sizeof *f);
    unsigned char *c = xmalloc(rows * rb);
    for (size_t r = 0; r < rows; r++) {
        for (size_t i = 0; i < width; i++) f[i] = frand();
        qkv_encode_row(fmt, f, n_kv, dim, c + r * rb);
    }
    buf b = mk(rows * rb, c);
    free(f);
    free(c);
    return b;
}
static inline const char *kv_name(qwfmt fmt) { return fmt == QW_Q8 ? "q8 K/V" : fmt == QW_BF16 ? "bf16 K/V" : "f32 K/V"; }

/* Whether the GPU buffers a and b hold the same bytes. */
static inline int same_gpu(const void *a, const void *b, size_t bytes) {
    void *x = xmalloc(bytes), *y = xmalloc(bytes);
    OK(gpu->ops->download(gpu, x, a, bytes));
    OK(gpu->ops->download(gpu, y, b, bytes));
    const int same = memcmp(x, y, bytes) == 0;
    free(x);
    free(y);
    return same;
}

/* Whether b holds the same bytes on both backends. */
static inline void expect_same_buf(const char *name, buf b) {
    void *x = xmalloc(b.bytes), *y = xmalloc(b.bytes);
    OK(cpu->ops->download(cpu, x, b.c, b.bytes));
    OK(gpu->ops->download(gpu, y, b.g, b.bytes));
    expect_same(name, x, y, b.bytes);
    free(x);
    free(y);
}

/* A weight on both backends: fmt F32, BF16, or AFFINE with bits/group. */
typedef struct wpair { qweight c, g; buf w, s, b; } wpair;
static inline wpair mk_weight(qwfmt fmt, int64_t n_out, int64_t n_in, int bits, int group) {
    wpair p;
    memset(&p, 0, sizeof p);
    size_t n = (size_t)(n_out * n_in);
    if (fmt == QW_F32) p.w = mk_rand(n, 0.1f);
    else if (fmt == QW_BF16) {
        float *f = xmalloc(n * 4); uint16_t *h = xmalloc(n * 2);
        for (size_t i = 0; i < n; i++) f[i] = frand() * 0.1f;
        bf16_from(f, h, n);
        p.w = mk(n * 2, h);
        free(f); free(h);
    } else {
        size_t words = (size_t)(n_out * n_in * bits / 32), ng = (size_t)(n_out * n_in / group);
        uint32_t *h = xmalloc(words * 4);
        for (size_t i = 0; i < words; i++) { rng = rng * 1664525u + 1013904223u; h[i] = rng; }
        p.w = mk(words * 4, h);
        float *sf = xmalloc(ng * 4), *bf = xmalloc(ng * 4); uint16_t *sh = xmalloc(ng * 2), *bh = xmalloc(ng * 2);
        for (size_t i = 0; i < ng; i++) { sf[i] = 0.01f + 0.01f * frand(); bf[i] = -0.05f * (1 << bits) * sf[i]; }
        bf16_from(sf, sh, ng); bf16_from(bf, bh, ng);
        p.s = mk(ng * 2, sh); p.b = mk(ng * 2, bh);
        free(h); free(sf); free(bf); free(sh); free(bh);
    }
    qweight q = {fmt, n_out, n_in, NULL, NULL, NULL, QW_BF16, bits, group, 0, 0};
    p.c = q; p.g = q;
    p.c.w = p.w.c; p.g.w = p.w.g;
    p.c.scales = p.s.c; p.g.scales = p.s.g;
    p.c.biases = p.b.c; p.g.biases = p.b.g;
    if (fmt == QW_AFFINE) { /* as the model loads it: tiled where eligible, its buffers maybe moved (rows padded) */
        size_t grown = 0;
        OK(gpu->ops->pack_weight(gpu, &p.g, &grown));
        p.w.g = p.g.w, p.s.g = p.g.scales, p.b.g = p.g.biases;
    }
    return p;
}
static inline void rm_weight(wpair p) { rm(p.w); if (p.s.c) { rm(p.s); rm(p.b); } }

static inline int prefill_bf16_mode(void) {
    const char *p = getenv("QUILL_PREFILL_PRECISION");
    return p && !strcmp(p, "bf16");
}
/* QUILL_DECODE_PRECISION=bf16 or dequant: the tensor-core decode matmuls take x rounded to bf16 (and with dequant
 * 4-bit weights made bf16 before their MMAs): bf16-class results */
static inline int decode_bf16_mode(void) {
    const char *p = getenv("QUILL_DECODE_PRECISION");
    return p && (!strcmp(p, "bf16") || !strcmp(p, "dequant"));
}
/* The bound of a tensor-core decode matmul against the CPU: f32-class, or bf16-class in decode bf16 mode. */
static inline double decode_tol(void) { return decode_bf16_mode() ? 2e-2 : 1e-5; }
static inline void poison_gpu(buf b) {
    float *h = xmalloc(b.bytes);
    for (size_t i = 0; i < b.bytes / 4; i++) h[i] = NAN;
    OK(gpu->ops->upload(gpu, b.g, h, b.bytes));
    free(h);
}

/* Runs the tests with both backends made; 77 (skipped) without a GPU. */
static inline int run_cuda_tests(void (*const *tests)(void), int n) {
    if (cuda_device_count() == 0) {
        printf("no GPU: skipped\n");
        return 77;
    }
    OK(cpu_backend_create(0, &cpu));
    OK(cuda_backend_create(0, &gpu));
    printf("| %-40s | %9s | %7s | %s |\n|---|---|---|---|\n", "op (cuda vs cpu)", "rel err", "bound", "");
    /* QUILL_CUDA_TESTS=2,3 runs those tests only (0-based, in the binary's order): a sanitizer on a few of them */
    const char *only = getenv("QUILL_CUDA_TESTS");
    char list[256], key[16];
    snprintf(list, sizeof list, ",%s,", only ? only : "");
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, ",%d,", i);
        if (!only || strstr(list, key)) tests[i]();
    }
    printf("%d passed, %d failed\n", n_pass, n_fail);
    cpu->ops->destroy(cpu);
    gpu->ops->destroy(gpu);
    return n_fail ? 1 : 0;
}

#endif
