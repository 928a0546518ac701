/* bench_weights.h: what the decode-matmul benches (bench_gemv.cu, bench_gemv_int.cu) share: random
 * weights made on the device (bf16, or MLX 4-bit affine with bf16 scales and biases) in rotating copies so
 * that L2 does not keep them, a weight row as the CPU backend rounds it (the f64 reference's input), and the
 * median of event timings. Include after backend/backend.h and bench_check.h. */
#ifndef QUILL_BENCH_WEIGHTS_H
#define QUILL_BENCH_WEIGHTS_H

#include <string.h>

#include <algorithm>
#include <vector>

#include "bench_check.h"

/* ---- random data on the device ------------------------------------------------------------------ */
__host__ __device__ static inline uint32_t hash32(uint64_t i, uint32_t seed) {
    uint64_t z = i * 0x9E3779B97F4A7C15ull + seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)(z ^ (z >> 31));
}
__global__ void fill_words(uint32_t *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = hash32(i, seed);
}
/* bf16 values offset + scale * u, u uniform in [-1, 1) */
__global__ void fill_bf16(__nv_bfloat16 *p, size_t n, uint32_t seed, float offset, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float u = (float)(hash32(i, seed) >> 8) * (2.0f / 16777216.0f) - 1.0f;
        p[i] = __float2bfloat16_rn(offset + scale * u);
    }
}


/* ---- one weight (with rotating copies) ---------------------------------------------------------- */
struct wset {
    qweight W[16];
    int copies;
    size_t w_bytes, sb_bytes; /* per copy: codes, and scales (= biases) */
};

static wset make_weight(int64_t n_out, int64_t K, int group, uint32_t seed) { /* group 0: bf16 */
    wset s;
    memset(&s, 0, sizeof s);
    const size_t n = (size_t)(n_out * K);
    s.w_bytes = group ? n / 2 : n * 2;
    s.sb_bytes = group ? (size_t)(n_out * (K / group)) * 2 : 0;
    const size_t per = s.w_bytes + 2 * s.sb_bytes;
    s.copies = (int)std::min<size_t>(16, std::max<size_t>(1, (size_t)(240u << 20) / per + 1));
    for (int c = 0; c < s.copies; c++) {
        qweight q = {group ? QW_AFFINE : QW_BF16, n_out, K, NULL, NULL, NULL, QW_BF16, group ? 4 : 0, group, 0, 0};
        CK(cudaMalloc(&q.w, s.w_bytes));
        if (c == 0) {
            if (group) fill_words<<<2048, 256>>>((uint32_t *)q.w, s.w_bytes / 4, seed);
            else fill_bf16<<<2048, 256>>>((__nv_bfloat16 *)q.w, n, seed, 0.0f, 0.05f);
            CK(cudaGetLastError());
        } else CK(cudaMemcpy(q.w, s.W[0].w, s.w_bytes, cudaMemcpyDeviceToDevice));
        if (group) {
            CK(cudaMalloc(&q.scales, s.sb_bytes));
            CK(cudaMalloc(&q.biases, s.sb_bytes));
            if (c == 0) {
                fill_bf16<<<1024, 256>>>((__nv_bfloat16 *)q.scales, s.sb_bytes / 2, seed + 1, 0.01f, 0.005f);
                fill_bf16<<<1024, 256>>>((__nv_bfloat16 *)q.biases, s.sb_bytes / 2, seed + 2, -0.08f, 0.01f);
                CK(cudaGetLastError());
            } else {
                CK(cudaMemcpy(q.scales, s.W[0].scales, s.sb_bytes, cudaMemcpyDeviceToDevice));
                CK(cudaMemcpy(q.biases, s.W[0].biases, s.sb_bytes, cudaMemcpyDeviceToDevice));
            }
        }
        /* random codes: read in the tile order, as the model's are (cuda_q4_tiled.cuh; rows not padded here) */
        q.tiled = q4t_eligible(&q) && n_out % 16 == 0;
        s.W[c] = q;
    }
    CK(cudaDeviceSynchronize());
    return s;
}
static void free_weight(wset &s) {
    for (int c = 0; c < s.copies; c++) {
        CK(cudaFree(s.W[c].w));
        if (s.W[c].scales) CK(cudaFree(s.W[c].scales));
        if (s.W[c].biases) CK(cudaFree(s.W[c].biases));
    }
}

/* Row o of W as f32 values (4-bit: scale * code + bias rounded as the CPU backend rounds it). */
static void weight_row(const qweight &W, int64_t o, std::vector<float> &out) {
    const int64_t K = W.n_in;
    out.resize((size_t)K);
    if (W.fmt == QW_BF16) {
        std::vector<uint16_t> h((size_t)K);
        CK(cudaMemcpy(h.data(), (const uint16_t *)W.w + o * K, (size_t)K * 2, cudaMemcpyDeviceToHost));
        for (int64_t k = 0; k < K; k++) out[(size_t)k] = bench_bf2f(h[(size_t)k]);
        return;
    }
    /* 4-bit: the bytes holding the row, and its scales and biases (tiled: its group of 16 rows, cuda_q4_tiled.cuh);
     * code k is nibble k % 2 of byte `at` */
    const int64_t gpr = K / W.group, rows = W.tiled ? 16 : 1, r = W.tiled ? o % 16 : 0, first = o - r;
    std::vector<unsigned char> w((size_t)(rows * K / 2));
    std::vector<uint16_t> sc((size_t)(rows * gpr)), bi((size_t)(rows * gpr));
    CK(cudaMemcpy(w.data(), (const unsigned char *)W.w + first * (K / 2), w.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(sc.data(), (const uint16_t *)W.scales + first * gpr, sc.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(bi.data(), (const uint16_t *)W.biases + first * gpr, bi.size() * 2, cudaMemcpyDeviceToHost));
    for (int64_t k = 0; k < K; k++) {
        const int64_t at = q4_code_byte_at(W.tiled, r, k & ~1LL, K);
        const size_t s = (size_t)q4_sb_at(W.tiled, r, k / W.group, gpr);
        const float q = (float)((w[(size_t)at] >> (4 * (k & 1))) & 15u);
        const volatile float p = bench_bf2f(sc[s]) * q;
        out[(size_t)k] = p + bench_bf2f(bi[s]);
    }
}

static float median_us(std::vector<float> &v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2] * 1000.0f;
}

#endif
