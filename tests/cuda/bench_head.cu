/* bench_head.cu: one row's greedy id from the lm_head's 8-bit sketch (op head_argmax, cuda_head_sketch.cuh) against
 * the full bf16 head (matmul, then argmax), on a 9B-shaped head (248,320 x 4,096) of quill synth's uniform weights or
 * Gaussian ones, and rows h drawn Gaussian (1 % of the channels scaled by HEAD_OUTLIER). Prints, for 12 rows, the
 * candidates the sketch could not rule out and both ids (they must be equal: rc 1 otherwise), then both paths' times
 * (medians of 20 after one) and the bytes each reads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "bench_check.h"

__device__ static inline uint32_t mix32(uint64_t i, uint32_t seed) {
    uint64_t z = i * 0x9E3779B97F4A7C15ull + seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)(z ^ (z >> 31));
}
__device__ static inline float unif(uint64_t i, uint32_t seed) { return (mix32(i, seed) >> 8) * (1.0f / 16777216.0f); }
__device__ static inline float gauss(uint64_t i, uint32_t seed) {
    return sqrtf(-2.0f * logf(unif(2 * i, seed) + 1e-9f)) * cospif(2.0f * unif(2 * i + 1, seed));
}
/* sd: Gaussian with that deviation; else uniform in [-a, a) */
__global__ void fill_head(__nv_bfloat16 *p, size_t n, float a, float sd) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16_rn(sd > 0.0f ? sd * gauss(i, 11u) : a * (2.0f * unif(i, 11u) - 1.0f));
}
__global__ void fill_row(float *h, int K, uint32_t seed, float outlier) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < K) h[i] = gauss((uint64_t)i, seed) * (mix32((uint64_t)i, seed ^ 0x5555u) % 100 == 0 ? outlier : 1.0f);
}

template <typename F> static float median_ms(cudaStream_t st, F issue) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> ms;
    for (int r = 0; r < 21; r++) {
        CK(cudaEventRecord(a, st));
        issue();
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float m;
        CK(cudaEventElapsedTime(&m, a, b));
        if (r) ms.push_back(m);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

int main(void) {
    const int V = 248320, K = 4096;
    const int gaussian = getenv("HEAD_GAUSS") && atoi(getenv("HEAD_GAUSS"));
    const float outlier = getenv("HEAD_OUTLIER") ? (float)atof(getenv("HEAD_OUTLIER")) : 1.0f;
    qbackend *be = NULL;
    OK(cuda_backend_create(0, &be));
    cudaStream_t st = cu_stream(be);
    qweight W = {QW_BF16, V, K, NULL, NULL, NULL, QW_BF16, 0, 0, 0, 0};
    const size_t n = (size_t)V * K;
    float *h, *lg;
    int32_t *id;
    OK(be->ops->alloc(be, n * 2, &W.w));
    OK(be->ops->alloc(be, (size_t)K * 4, (void **)&h));
    OK(be->ops->alloc(be, (size_t)V * 4, (void **)&lg));
    OK(be->ops->alloc(be, 4, (void **)&id));
    fill_head<<<4096, 256, 0, st>>>((__nv_bfloat16 *)W.w, n, sqrtf(3.0f / K), gaussian ? 1.0f / sqrtf((float)K) : 0.0f);
    CK(cudaGetLastError());
    void *sk = NULL;
    int64_t bytes = 0;
    OK(be->ops->head_sketch_make(be, &W, &sk, &bytes));
    if (!sk) {
        fprintf(stderr, "FATAL: no sketch\n");
        return 1;
    }
    printf("# head %d x %d bf16 (%s), rows h Gaussian (1 %% of the channels x %.1f); sketch %.3f GB\n", V, K,
           gaussian ? "Gaussian weights, sd 1 / sqrt(K)" : "quill synth's uniform weights", outlier, bytes / 1e9);
    printf("| h | candidates | full head's id | sketch's id |\n|---|---|---|---|\n");
    int fails = 0;
    unsigned lo = ~0u, hi = 0;
    for (int s = 0; s < 12; s++) {
        fill_row<<<(K + 255) / 256, 256, 0, st>>>(h, K, 100u + (unsigned)s, outlier);
        CK(cudaGetLastError());
        int32_t full, fast;
        unsigned cnt = 0;
        OK(be->ops->matmul(be, h, 1, &W, lg));
        OK(be->ops->argmax(be, lg, 1, V, id));
        OK(be->ops->download(be, &full, id, 4));
        OK(be->ops->head_argmax(be, h, &W, sk, id));
        OK(be->ops->download(be, &fast, id, 4));
        OK(cuda_head_sketch_candidates(be, sk, &cnt));
        fails += fast != full;
        lo = std::min(lo, cnt), hi = std::max(hi, cnt);
        printf("| %d | %u | %d | %d%s |\n", s, cnt, full, fast, fast == full ? "" : " (DIFFERS)");
    }
    const float t_full = median_ms(st, [&] {
        OK(be->ops->matmul(be, h, 1, &W, lg));
        OK(be->ops->argmax(be, lg, 1, V, id));
    });
    const float t_sk = median_ms(st, [&] { OK(be->ops->head_argmax(be, h, &W, sk, id)); });
    printf("\n| path | us | GB read | TB/s |\n|---|---|---|---|\n");
    printf("| matmul + argmax (the full head) | %.1f | %.3f | %.2f |\n", t_full * 1e3, n * 2 / 1e9,
           n * 2 / (t_full * 1e9));
    printf("| head_argmax (the sketch, then the candidates' rows) | %.1f | %.3f | %.2f |\n", t_sk * 1e3, bytes / 1e9,
           bytes / (t_sk * 1e9));
    printf("# candidates %u to %u over 12 rows; ids that differ: %d\n", lo, hi, fails);
    be->ops->head_sketch_free(be, sk);
    be->ops->destroy(be);
    return fails ? 1 : 0;
}
