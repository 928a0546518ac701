/* bench_check.h: the device benchmarks' (tests/cuda/bench_*.cu) fatal checks: a failed CUDA call or
 * quill op ends the bench with the call, the error and the line. */
#ifndef QUILL_BENCH_CHECK_H
#define QUILL_BENCH_CHECK_H

#include <stdio.h>
#include <stdlib.h>

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

#endif
