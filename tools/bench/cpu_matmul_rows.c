/* tools/bench/cpu_matmul_rows.c: the CPU backend's many-row matmul (prefill, 5+ streams: cpu_simd_pairs.c's scratch
 * path) on one thread, through the backend's own matmul op, for the 4-bit g64 weight shapes of the 0.8B / 4B / 9B
 * (docs/performance.md, fifty-third pass). Prints G multiply-adds a second for each shape and row count, best of
 * three runs of ~0.5 s; the weights' codes and scales are fixed bytes (the time does not depend on them). Against
 * the multiply and the add alone (tools/bench/cpu_q4_unit.c's `multiply`: 64 in 1.06 ns, ~60 G a core). Not part of
 * the build or the tests; from a build directory that has libquillcore.a:
 *   gcc -O2 -std=c11 -Isrc tools/bench/cpu_matmul_rows.c BUILD/libquillcore.a -lm -lpthread -o /tmp/cpu_matmul_rows
 *   /tmp/cpu_matmul_rows [ROWS ...]          (default: 64 512) */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *must_alloc(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) {
        fprintf(stderr, "cpu_matmul_rows: out of memory for %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}

/* One n_out x n_in 4-bit weight with bf16 scales and biases of 1 and -1 in groups of 64. */
static qweight make_q4(int64_t n_out, int64_t n_in) {
    qweight W = {.fmt = QW_AFFINE, .n_out = n_out, .n_in = n_in, .sb_fmt = QW_BF16, .bits = 4, .group = 64};
    const int64_t groups = n_out * (n_in / 64);
    W.w = must_alloc((size_t)(n_out * n_in / 2));
    memset(W.w, 0x5a, (size_t)(n_out * n_in / 2));
    uint16_t *s = must_alloc((size_t)groups * 2), *b = must_alloc((size_t)groups * 2);
    for (int64_t i = 0; i < groups; i++) s[i] = 0x3f80, b[i] = 0xbf80; /* bf16 1.0, -1.0 */
    W.scales = s, W.biases = b;
    return W;
}

static double gmacs(qbackend *be, const qweight *W, int n) {
    float *x = must_alloc((size_t)n * (size_t)W->n_in * sizeof(float));
    float *y = must_alloc((size_t)n * (size_t)W->n_out * sizeof(float));
    for (int64_t i = 0; i < n * W->n_in; i++) x[i] = (float)(i % 97) * 1e-3f;
    double best = 0;
    for (int run = 0; run < 3; run++) {
        int reps = 0;
        double t0 = now(), t;
        do {
            qstatus st = be->ops->matmul(be, x, n, W, y);
            if (st != Q_OK) {
                fprintf(stderr, "cpu_matmul_rows: matmul failed: %s\n", q_lasterr());
                exit(1);
            }
            reps++;
        } while ((t = now() - t0) < 0.5);
        double g = (double)W->n_in * (double)W->n_out * n * reps / t / 1e9;
        if (g > best) best = g;
    }
    free(x);
    free(y);
    return best;
}

int main(int argc, char **argv) {
    int rows[16] = {64, 512}, n_rows = 2;
    if (argc > 1) {
        n_rows = 0;
        for (int i = 1; i < argc && n_rows < 16; i++) rows[n_rows++] = atoi(argv[i]);
    }
    /* n_out x n_in: the 0.8B's gate / up and down, the 4B's, the 9B's */
    static const int64_t shapes[][2] = {{3584, 1024}, {1024, 3584}, {9216, 2560}, {2560, 9216},
                                        {12288, 4096}, {4096, 12288}};
    qbackend *be = NULL;
    if (cpu_backend_create(1, &be) != Q_OK) {
        fprintf(stderr, "cpu_matmul_rows: %s\n", q_lasterr());
        return 1;
    }
    printf("| weight (n_out x n_in, 4-bit g64) |");
    for (int r = 0; r < n_rows; r++) printf(" %d rows |", rows[r]);
    printf("\n|---|");
    for (int r = 0; r < n_rows; r++) printf("---|");
    printf("\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        qweight W = make_q4(shapes[s][0], shapes[s][1]);
        printf("| %lld x %lld |", (long long)W.n_out, (long long)W.n_in);
        for (int r = 0; r < n_rows; r++) printf(" %.1f |", gmacs(be, &W, rows[r]));
        printf("\n");
        fflush(stdout);
        free(W.w);
        free(W.scales);
        free(W.biases);
    }
    be->ops->destroy(be);
    return 0;
}
