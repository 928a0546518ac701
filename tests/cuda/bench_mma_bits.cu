/* bench_mma_bits.cu: whether Hopper's warpgroup MMA (wgmma, A from registers, B from shared memory) gives
 * bit for bit the sums the decode matmul takes from mma.sync today (cuda_gemv.cuh gt_unit: a 64-value unit as
 * two accumulators of two k16 steps each, each started fresh, then added), so that a many-row decode kernel on
 * wgmma would keep EXACT(batch) with the one-row mma.sync kernel; and whether wgmma's bits depend on its N (the
 * rows a launch shares). One warpgroup, A = 64 outputs x 64 values as the 4-bit unit feeds them (bf16 128 + q)
 * or random bf16 weights, B = N rows of bf16 x; for each form it prints the outputs that differ between the two
 * instructions and the largest relative difference. Built and run by tests/cuda/bench_mma_bits.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/backend/cuda/cuda_wgmma.cuh"
#include "bench_check.h"

enum { M = 64, K = 64, NMAX = 64 };

__device__ __forceinline__ void mma16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool fresh) {
    const float z = 0.0f;
    if (fresh)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%10,%10,%10,%10};\n"
                     : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(z));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The warp's A fragment of k16 step j: rows 16w + g (a0, a2) and + 8 (a1, a3), values 16j + 2t.. and + 8.. */
__device__ __forceinline__ void a_frag(const uint16_t *A, int w, int lane, int j, uint32_t (&a)[4]) {
    const int g = lane >> 2, t = lane & 3, r0 = 16 * w + g, k0 = 16 * j + 2 * t;
    const uint32_t *p0 = (const uint32_t *)(A + r0 * K + k0), *p1 = (const uint32_t *)(A + (r0 + 8) * K + k0);
    a[0] = p0[0], a[1] = p1[0], a[2] = p0[4], a[3] = p1[4];
}

/* split = 1: gt_unit's form (k-steps 0, 1 and 2, 3 in two fresh accumulators, then P + R); 0: one chain of 4.
 * out[r][n] from mma.sync (out_m) and wgmma (out_w). */
template <int N> __global__ void __launch_bounds__(128) both(const uint16_t *A, const uint16_t *B, int split, float *out_m, float *out_w) {
    __shared__ __align__(1024) uint16_t sb[NMAX * K]; /* B: N rows of 128 bytes (64 values), 128-byte swizzle */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    for (int i = threadIdx.x; i < N * K / 8; i += 128) { /* 16-byte chunks: row n, chunk c -> c ^ (n % 8) */
        const int n = i / 8, c = i % 8;
        *(uint4 *)(sb + n * K + 8 * (c ^ (n % 8))) = *(const uint4 *)(B + n * K + 8 * c);
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* the stores, visible to wgmma's reads */
    __syncthreads();
    /* mma.sync: column block j8 of 8 rows of B */
    for (int j8 = 0; j8 < N / 8; j8++) {
        float P[4], R[4];
        for (int j = 0; j < 4; j++) {
            uint32_t a[4];
            a_frag(A, w, lane, j, a);
            const uint16_t *bn = B + (8 * j8 + g) * K + 16 * j + 2 * t;
            const uint32_t b0 = *(const uint32_t *)bn, b1 = *(const uint32_t *)(bn + 8);
            if (split) mma16(j < 2 ? P : R, a, b0, b1, (j & 1) == 0);
            else mma16(P, a, b0, b1, j == 0);
        }
        for (int c = 0; c < 4; c++) {
            const float v = split ? P[c] + R[c] : P[c];
            const int r = 16 * w + g + 8 * (c >> 1), n = 8 * j8 + 2 * t + (c & 1);
            out_m[r * N + n] = v;
        }
    }
    /* wgmma: the same A fragments, B through the descriptor (+32 bytes a k16 step) */
    float P[N / 2], R[N / 2];
    for (int i = 0; i < N / 2; i++) P[i] = R[i] = 0.0f;
    const uint32_t base = (uint32_t)__cvta_generic_to_shared(sb);
    wg_fence();
    for (int j = 0; j < 4; j++) {
        uint32_t a[4];
        a_frag(A, w, lane, j, a);
        const uint64_t db = wg_desc(base + 32 * j);
        if (split) {
            if (j < 2) wg_mma_ra<N>(P, a, db, j & 1);
            else wg_mma_ra<N>(R, a, db, j & 1);
        } else {
            wg_mma_ra<N>(P, a, db, j != 0);
        }
    }
    wg_commit();
    wg_wait<0>();
    for (int i = 0; i < N / 2; i++) {
        const float v = split ? P[i] + R[i] : P[i];
        const int r = 16 * w + g + 8 * ((i >> 1) & 1), n = 8 * (i >> 2) + 2 * t + (i & 1);
        out_w[r * N + n] = v;
    }
}

static uint32_t rng = 1234567u;
static float frand(void) { rng = rng * 1664525u + 1013904223u; return (float)((rng >> 8) & 0xffffff) / 8388608.0f - 1.0f; }

/* One case at N rows: the outputs that differ between the two instructions, and wgmma's against its N = 64 run
 * (w64: written by the N = 64 case, which is run first, read by the others). Returns the outputs N changes. */
template <int N> static int run_case(const char *what, const uint16_t *hA, const uint16_t *hB, int split, float *w64,
                                     int *n_diff_total) {
    uint16_t *dA, *dB;
    float *dm, *dw;
    CK(cudaMalloc(&dA, M * K * 2));
    CK(cudaMalloc(&dB, NMAX * K * 2));
    CK(cudaMalloc(&dm, M * NMAX * 4));
    CK(cudaMalloc(&dw, M * NMAX * 4));
    CK(cudaMemcpy(dA, hA, M * K * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, hB, NMAX * K * 2, cudaMemcpyHostToDevice));
    both<N><<<1, 128>>>(dA, dB, split, dm, dw);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    static float m[M * NMAX], wv[M * NMAX];
    CK(cudaMemcpy(m, dm, M * N * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(wv, dw, M * N * 4, cudaMemcpyDeviceToHost));
    if (N == 64) memcpy(w64, wv, sizeof(float) * M * NMAX);
    int diff = 0, diff_n = 0;
    double worst = 0.0;
    for (int r = 0; r < M; r++)
        for (int n = 0; n < N; n++) {
            const float a = m[r * N + n], b = wv[r * N + n];
            if (memcmp(&a, &b, 4)) {
                diff++;
                const double rel = fabs((double)a - b) / fmax(fabs((double)a), 1e-30);
                if (rel > worst) worst = rel;
            }
            /* N independence: wgmma's first N columns against its N = 64 run */
            if (memcmp(&b, &w64[r * NMAX + n], 4)) diff_n++;
        }
    printf("| %-34s | %-13s | %3d | %5d of %5d | %9.2e | %s |\n", what, split ? "2 x 2 k-steps" : "chain of 4", N, diff,
           M * N, worst, N == 64 ? "(reference)" : diff_n ? "DIFFERS" : "same bits");
    *n_diff_total += diff;
    CK(cudaFree(dA));
    CK(cudaFree(dB));
    CK(cudaFree(dm));
    CK(cudaFree(dw));
    return diff_n;
}

int main(void) {
    static uint16_t A[2][M * K], B[NMAX * K];
    for (int i = 0; i < M * K; i++) {
        A[0][i] = (uint16_t)(0x4300u | ((uint32_t)(frand() * 8.0f + 8.0f) & 15u)); /* 128 + q, the 4-bit unit */
        A[1][i] = bench_f2bf(frand() * 0.05f);                                        /* bf16 weights */
    }
    for (int i = 0; i < NMAX * K; i++) B[i] = bench_f2bf(frand() * 3.0f); /* bf16 x */
    printf("| A | sum | N | outputs mma.sync != wgmma | max rel diff | wgmma N vs N = 64 |\n|---|---|---|---|---|---|\n");
    int total = 0, n_dep = 0;
    static float w64[M * NMAX];
    const char *names[2] = {"4-bit codes (bf16 128 + q)", "bf16 weights"};
    for (int a = 0; a < 2; a++)
        for (int split = 1; split >= 0; split--) {
            run_case<64>(names[a], A[a], B, split, w64, &total);
            n_dep += run_case<32>(names[a], A[a], B, split, w64, &total);
            n_dep += run_case<8>(names[a], A[a], B, split, w64, &total);
        }
    printf("%s: %d outputs differ between mma.sync and wgmma; wgmma's N changes %d\n",
           total || n_dep ? "DIFFER" : "same bits", total, n_dep);
    return 0;
}
