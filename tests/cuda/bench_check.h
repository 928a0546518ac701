/* bench_check.h: the device benchmarks' (tests/cuda/bench_*.cu) fatal checks: a failed CUDA call or
 * quill op ends the bench with the call, the error and the line; and bf16 <-> f32 on the host. */
#ifndef QUILL_BENCH_CHECK_H
#define QUILL_BENCH_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                          \
    do {                                                                                               \
        cudaError_t e_ = (x);                                                                          \
        if (e_ != cudaSuccess) {                                                                       \
            fprintf(stderr, "FATAL %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__);         \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)
#define OK(x)                                                                                          \
    do {                                                                                               \
        if ((x) != Q_OK) {                                                                             \
            fprintf(stderr, "FATAL %s: %s (line %d)\n", #x, q_lasterr(), __LINE__);                    \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

/* f32 -> bf16 bits, round to nearest even (finite inputs); bf16 bits -> f32 (exact) */
static inline uint16_t bench_f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline float bench_bf2f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
