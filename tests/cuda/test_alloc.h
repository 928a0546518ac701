/* test_alloc.h: host memory for the CUDA tests (tests/cuda/test_cuda_*.c), or the test stops naming the size. On its
 * own so that test_cuda_kvgrow.c, which runs the engine and not cuda_test_util.h's mirrored backends, takes it too. */
#ifndef QUILL_TEST_ALLOC_H
#define QUILL_TEST_ALLOC_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "FATAL out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}
static inline void *xcalloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) {
        fprintf(stderr, "FATAL %zu x %zu bytes of host memory\n", n, size);
        exit(1);
    }
    void *p = xmalloc(n * size);
    memset(p, 0, n * size);
    return p;
}

#endif
