/* bench_wgmma.cu: the wgmma prompt GEMM (src/backend/cuda/cuda_gemm_wg.cuh) on the device: checks and
 * speed, against cuBLAS with its own algorithm choice (which may split K or use workspace: the speed to
 * reach, not a kernel quill can take as is). Built and run by tests/cuda/bench_wgmma.sh (nvcc, cudart and
 * cuBLAS). For weight shapes (n x K) of the 9B and random bf16 x (4096 x K) and W:
 *   err    max|y - ref| / max|ref| over sampled outputs, ref in float64 on the CPU (bf16 inputs are exact),
 *          at most 1e-5 sqrt(K / 4096) (f32 accumulation; cuBLAS gives the same bits);
 *          also for two products, x as bf16 hi + lo parts (the split precision's x)
 *   cublas max|y - y_cublas| / max|y_cublas| over all outputs
 *   same   rows of calls with m = 1, 7, 200 at offsets 0, 61, 3000 bitwise equal to those rows of the
 *          4096-row call (EXACT(batch)), and a launch of two weights (the shape and its first 32 rows)
 *          equal to their own launches
 *   us, TF median time of one call (CUDA events) and 2 m n K / time, for the wgmma kernel and cuBLAS;
 *   then a second table: each tile's time at 32..1024 rows, which one wg_gemm takes, and the small tile's outputs
 *   bitwise the large tile's at every row count;
 *   then a third: 4-bit weights (random codes, bf16 scales and biases, x = hi + lo) in the split precision, by the
 *   dequantization pass's arithmetic (w rounded to f32, its hi and lo parts made here, three products: the kernel's
 *   time without the pass) and by cuda_gemm_wgq.cuh's fold from the codes: each one's error against float64 (the
 *   fold's at most 1e-5 sqrt(K / 4096)), every fold tile bitwise the 4096-row call at 4096, 32 and 200 rows, a 7-row
 *   call bitwise the 4096-row call's rows, the times at 32..4096 rows, then each tile's. BENCH_WGMMA_Q4_ONLY=1 runs
 *   that table alone.
 * Outputs are poisoned (NaN) before the checked calls. Exit 1 on a failed check. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include <cublas_v2.h>

#include "backend/cuda/cuda_gemm_wgq.cuh"
#include "bench_check.h"

#define M 4096
#define CB(x)                                                                                          \
    do {                                                                                               \
        cublasStatus_t s_ = (x);                                                                       \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                             \
            fprintf(stderr, "FATAL %s: cublas status %d (line %d)\n", #x, (int)s_, __LINE__);          \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((rs >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

/* y = x w^T, or x1 w^T + x w^T (in that order) when x1: two products as the split precision's lo and hi parts
 * of x. */
static void run_wg(const uint16_t *x, const uint16_t *w, float *y, int m, int n, int K, const uint16_t *x1 = NULL) {
    wg_args a;
    memset(&a, 0, sizeof a);
    a.x[0] = (const __nv_bfloat16 *)x, a.x[1] = (const __nv_bfloat16 *)x1;
    a.products = x1 ? 2 : 1, a.xsel[0] = x1 ? 1 : 0, a.count = 1;
    a.w[0][0] = a.w[0][1] = (const __nv_bfloat16 *)w;
    a.y[0] = y, a.n[0] = n;
    CK(wg_gemm(&a, m, K, 0));
}
/* Weights w (n x K) and its first 32 rows as a second weight in one launch, y and y32 (m x 32). */
static void run_wg_pair(const uint16_t *x, const uint16_t *w, float *y, float *y32, int m, int n, int K) {
    wg_args a;
    memset(&a, 0, sizeof a);
    a.x[0] = (const __nv_bfloat16 *)x, a.products = 1, a.count = 2;
    a.w[0][0] = a.w[1][0] = (const __nv_bfloat16 *)w;
    a.y[0] = y, a.n[0] = n, a.y[1] = y32, a.n[1] = 32;
    CK(wg_gemm(&a, m, K, 0));
}
/* y (row-major m x n) = x W^T: in cuBLAS's column-major terms y^T (n x m) = W (n x K) . x^T (K x m). */
static void run_cublas(cublasHandle_t h, const uint16_t *x, const uint16_t *w, float *y, int m, int n, int K) {
    const float one = 1.0f, zero = 0.0f;
    CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, K, &one, w, CUDA_R_16BF, K, x, CUDA_R_16BF, K, &zero, y,
                    CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

template <typename F> static float median_us(F f) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> t;
    for (int i = 0; i < 12; i++) {
        CK(cudaEventRecord(a));
        f();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (i >= 2) t.push_back(ms * 1000.0f);
    }
    std::sort(t.begin(), t.end());
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return t[t.size() / 2];
}

/* The two tiles at prompt sizes: times of each (forced) and whether the small tile's outputs are the large tile's. */
#define N_TILE_ROWS 6
static const int k_tile_rows[N_TILE_ROWS] = {32, 64, 128, 256, 512, 1024};
struct tile_row {
    int n, K, same;
    float large[N_TILE_ROWS], small[N_TILE_ROWS];
    char pick[N_TILE_ROWS];
};
static tile_row tile_rows(const uint16_t *x, const uint16_t *xl, const uint16_t *w, float *y, float *ys, int n, int K,
                          int *fails) {
    tile_row t;
    memset(&t, 0, sizeof t);
    t.n = n, t.K = K, t.same = 1;
    wg_args a;
    memset(&a, 0, sizeof a);
    a.x[0] = (const __nv_bfloat16 *)x, a.x[1] = (const __nv_bfloat16 *)xl;
    a.products = 2, a.xsel[0] = 1, a.xsel[1] = 0, a.count = 1;
    a.w[0][0] = a.w[0][1] = (const __nv_bfloat16 *)w;
    a.n[0] = n;
    for (int j = 0; j < N_TILE_ROWS; j++) {
        const int m = k_tile_rows[j];
        a.y[0] = y;
        CK(cudaMemset(y, 0xFF, (size_t)m * n * 4));
        CK(cudaMemset(ys, 0xFF, (size_t)m * n * 4));
        CK(wg_launch<wg_large>(wg_gemm_kernel, &a, m, K, 0));
        a.y[0] = ys;
        CK(wg_launch<wg_small>(wg_gemm_small_kernel, &a, m, K, 0));
        CK(cudaDeviceSynchronize());
        std::vector<float> hl((size_t)m * n), hs((size_t)m * n);
        CK(cudaMemcpy(hl.data(), y, hl.size() * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hs.data(), ys, hs.size() * 4, cudaMemcpyDeviceToHost));
        t.same &= memcmp(hl.data(), hs.data(), hl.size() * 4) == 0;
        t.large[j] = median_us([&] { CK(wg_launch<wg_large>(wg_gemm_kernel, &a, m, K, 0)); });
        t.small[j] = median_us([&] { CK(wg_launch<wg_small>(wg_gemm_small_kernel, &a, m, K, 0)); });
        t.pick[j] = wg_use_small(&a, m) ? 'S' : 'L';
    }
    *fails += !t.same;
    return t;
}

/* The fold's tiles (cuda_gemm_wgq.cuh), each checked against the others and timed on its own. */
typedef cudaError_t (*wq_fn)(const wq_args *, int, int);
typedef wq_tile<2, 128, 1, 4, 1, 2> wq_long_in_step; /* the long tile without its ping-pong (the A/B) */
template <class T> static cudaError_t wq_run(const wq_args *a, int m, int K) { return wq_launch<T>(a, m, K, 0); }
static const struct {
    const char *name;
    wq_fn f;
    int turn; /* K tiles a turn of its loop: K % (64 turn) == 0 */
} k_wq[] = {{"short (32 rows)", wq_run<wq_short>, wq_short::TURN},
            {"mid (64 rows)", wq_run<wq_mid>, wq_mid::TURN},
            {"long (128 rows)", wq_run<wq_long>, wq_long::TURN},
            {"long, in step", wq_run<wq_long_in_step>, wq_long_in_step::TURN},
            {"any (128, 1 a turn)", wq_run<wq_any>, wq_any::TURN}};
#define N_WQ ((int)(sizeof k_wq / sizeof k_wq[0]))

/* The 4-bit table (top comment): a weight n x K of group `group`, x 4096 x K. Returns 1 on a failed check. */
#define N_Q4_ROWS 5
static const int k_q4_rows[N_Q4_ROWS] = {32, 128, 512, 1024, 4096};
static int q4_row(int n, int K, int group) {
    const int64_t nw = (int64_t)n * K, ng = nw / group, KT = K / 64;
    std::vector<uint32_t> codes((size_t)nw / 8);
    std::vector<uint16_t> sc((size_t)ng), bi((size_t)ng), whi((size_t)nw), wlo((size_t)nw), hx((size_t)M * K),
        hl((size_t)M * K);
    std::vector<float> xs((size_t)M * KT);
    for (auto &c : codes) rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17, c = (uint32_t)(rs >> 32);
    for (int64_t g = 0; g < ng; g++) {
        const float s = 0.002f + 0.001f * frand();
        sc[g] = bench_f2bf(s), bi[g] = bench_f2bf(-8.0f * s + 0.001f * frand());
    }
    auto code = [&](int64_t i) { return (codes[i / 8] >> (4 * (i % 8))) & 15u; };
    auto gof = [&](int64_t i) { return (i / K) * (K / group) + (i % K) / group; };
    for (int64_t i = 0; i < nw; i++) { /* the pass: w = scale * code + bias, two roundings, then hi and lo */
        volatile float p = bench_bf2f(sc[gof(i)]) * (float)code(i);
        const float w = p + bench_bf2f(bi[gof(i)]);
        whi[i] = bench_f2bf(w);
        wlo[i] = bench_f2bf(w - bench_bf2f(whi[i]));
    }
    for (int64_t r = 0; r < M; r++)
        for (int64_t t = 0; t < KT; t++) {
            float sum = 0;
            for (int64_t k = t * 64; k < t * 64 + 64; k++) {
                const float v = frand();
                const size_t i = (size_t)(r * K + k);
                hx[i] = bench_f2bf(v), hl[i] = bench_f2bf(v - bench_bf2f(hx[i]));
                sum += v;
            }
            xs[(size_t)(r * KT + t)] = sum;
        }
    uint32_t *dc;
    uint16_t *ds, *db, *dh, *dl, *x, *xl;
    float *y, *yq, *yq2, *dxs;
    CK(cudaMalloc(&dc, codes.size() * 4));
    CK(cudaMalloc(&ds, sc.size() * 2));
    CK(cudaMalloc(&db, bi.size() * 2));
    CK(cudaMalloc(&dh, whi.size() * 2));
    CK(cudaMalloc(&dl, wlo.size() * 2));
    CK(cudaMalloc(&x, hx.size() * 2));
    CK(cudaMalloc(&xl, hl.size() * 2));
    CK(cudaMalloc(&dxs, xs.size() * 4));
    CK(cudaMalloc(&y, (size_t)M * n * 4));
    CK(cudaMalloc(&yq, (size_t)M * n * 4));
    CK(cudaMalloc(&yq2, (size_t)M * n * 4));
    CK(cudaMemcpy(dc, codes.data(), codes.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ds, sc.data(), sc.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, bi.data(), bi.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dh, whi.data(), whi.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dl, wlo.data(), wlo.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(xl, hl.data(), hl.size() * 2, cudaMemcpyHostToDevice));
    wg_args a; /* the pass's three products: hi.lo, lo.hi, hi.hi */
    memset(&a, 0, sizeof a);
    a.x[0] = (const __nv_bfloat16 *)x, a.x[1] = (const __nv_bfloat16 *)xl, a.count = 1, a.products = 3, a.n[0] = n;
    a.xsel[0] = 1, a.xsel[1] = 0, a.xsel[2] = 0;
    a.w[0][0] = a.w[0][2] = (const __nv_bfloat16 *)dh, a.w[0][1] = (const __nv_bfloat16 *)dl, a.y[0] = y;
    std::vector<float> xst((size_t)KT * M); /* the sums transposed, as xsum_kernel writes them (pitch M) */
    for (int64_t r = 0; r < M; r++)
        for (int64_t t = 0; t < KT; t++) xst[(size_t)(t * M + r)] = xs[(size_t)(r * KT + t)];
    CK(cudaMemcpy(dxs, xst.data(), xst.size() * 4, cudaMemcpyHostToDevice));
    wq_args q;
    memset(&q, 0, sizeof q);
    q.x_hi = (const __nv_bfloat16 *)x, q.x_lo = (const __nv_bfloat16 *)xl, q.xs_t = dxs, q.xs_pitch = M, q.count = 1;
    q.q[0].codes = dc, q.q[0].scales = ds, q.q[0].biases = db, q.q[0].group = group, q.q[0].sb_fmt = QW_BF16;
    q.n[0] = n, q.y[0] = yq;
    CK(cudaMemset(y, 0xFF, (size_t)M * n * 4));
    CK(cudaMemset(yq, 0xFF, (size_t)M * n * 4));
    CK(wg_gemm(&a, M, K, 0));
    CK(wq_gemm(&q, M, K, 0));
    CK(cudaDeviceSynchronize());
    std::vector<float> hy((size_t)M * n), hq((size_t)M * n), h2((size_t)M * n);
    CK(cudaMemcpy(hy.data(), y, hy.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hq.data(), yq, hq.size() * 4, cudaMemcpyDeviceToHost));
    double ep = 0, eq = 0, den = 0;
    for (int s = 0; s < 64; s++) { /* sampled outputs against float64 with w = s q + b exactly */
        const int64_t r = (s * 1031) % M, o = (s * 7919) % n;
        double ref = 0;
        for (int64_t k = 0; k < K; k++) {
            const int64_t i = o * K + k, j = r * K + k;
            const double w = (double)bench_bf2f(sc[gof(i)]) * code(i) + bench_bf2f(bi[gof(i)]);
            ref += w * ((double)bench_bf2f(hx[(size_t)j]) + bench_bf2f(hl[(size_t)j]));
        }
        ep = std::max(ep, fabs(ref - hy[(size_t)(r * n + o)]));
        eq = std::max(eq, fabs(ref - hq[(size_t)(r * n + o)]));
        den = std::max(den, fabs(ref));
    }
    ep /= den, eq /= den;
    bool same = true;
    for (float v : hq) same &= isfinite(v);
    for (int v = 0; v < N_WQ; v++) /* every tile: the 4096-row call's bits, and its first 32 and 200 rows' */
        for (int m : {M, 32, 200}) {
            if (K % (64 * k_wq[v].turn)) break;
            q.y[0] = yq2;
            CK(cudaMemset(yq2, 0xFF, (size_t)m * n * 4));
            CK(k_wq[v].f(&q, m, K));
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(h2.data(), yq2, (size_t)m * n * 4, cudaMemcpyDeviceToHost));
            same &= memcmp(h2.data(), hq.data(), (size_t)m * n * 4) == 0;
        }
    { /* 7 rows at offset 68 (16-byte aligned sums) against the 4096-row call */
        wq_args q7 = q;
        q7.x_hi = q.x_hi + (size_t)68 * K, q7.x_lo = q.x_lo + (size_t)68 * K, q7.xs_t = dxs + 68, q7.y[0] = yq2;
        CK(cudaMemset(yq2, 0xFF, (size_t)7 * n * 4));
        CK(wq_gemm(&q7, 7, K, 0));
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(h2.data(), yq2, (size_t)7 * n * 4, cudaMemcpyDeviceToHost));
        same &= memcmp(h2.data(), hq.data() + (size_t)68 * n, (size_t)7 * n * 4) == 0;
    }
    const bool ok = same && eq < 1e-5 * sqrt(K / 4096.0);
    q.y[0] = yq;
    printf("%5dx%-6d g%-3d | %8.2e / %8.2e", n, K, group, ep, eq);
    for (int m : k_q4_rows) {
        const float tp = median_us([&] { CK(wg_gemm(&a, m, K, 0)); });
        const float tq = median_us([&] { CK(wq_gemm(&q, m, K, 0)); });
        printf(" | %7.1f / %7.1f", tp, tq);
    }
    printf(" | %s%s\n", same ? "same" : "DIFFER", ok ? "" : "  FAILED");
    for (int v = 0; v < N_WQ; v++) {
        if (K % (64 * k_wq[v].turn)) continue;
        printf("  %-20s %-18s", k_wq[v].name, "");
        for (int m : k_q4_rows) printf(" | %9s %7.1f", "", median_us([&] { CK(k_wq[v].f(&q, m, K)); }));
        printf(" |\n");
    }
    for (void *ptr : {(void *)dc, (void *)ds, (void *)db, (void *)dh, (void *)dl, (void *)x, (void *)xl, (void *)dxs,
                      (void *)y, (void *)yq, (void *)yq2})
        CK(cudaFree(ptr));
    return !ok;
}

int main(void) {
    tile_row tiles[8];
    int n_tiles = 0;
    static const int shapes[][2] = {{12288, 4096}, {4096, 12288}, {4096, 4096}, {8192, 4096}, {1024, 4096}, {32, 4096}};
    int fails = 0;
    if (!wg_available()) { fprintf(stderr, "needs a compute capability 9.0 device and an sm_90a build\n"); return 1; }
    cublasHandle_t h;
    CB(cublasCreate(&h));
    printf("shape         | err vs f64 | 2 products | vs cublas | same | wgmma us   TF/s | cublas us   TF/s\n");
    const bool only_q4 = getenv("BENCH_WGMMA_Q4_ONLY") != NULL; /* the 4-bit table alone (tuning runs) */
    for (const auto &sh : shapes) {
        if (only_q4) break;
        const int n = sh[0], K = sh[1];
        std::vector<uint16_t> hx((size_t)M * K), hl((size_t)M * K), hw((size_t)n * K); /* x's hi and lo parts */
        for (size_t i = 0; i < hx.size(); i++) {
            const float v = frand();
            hx[i] = bench_f2bf(v);
            hl[i] = bench_f2bf(v - bench_bf2f(hx[i]));
        }
        for (auto &v : hw) v = bench_f2bf(frand() * 0.05f);
        uint16_t *x, *xl, *w;
        float *y, *yc, *ys;
        CK(cudaMalloc(&x, hx.size() * 2));
        CK(cudaMalloc(&xl, hl.size() * 2));
        CK(cudaMemcpy(xl, hl.data(), hl.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&w, hw.size() * 2));
        CK(cudaMalloc(&y, (size_t)M * n * 4));
        CK(cudaMalloc(&yc, (size_t)M * n * 4));
        CK(cudaMalloc(&ys, (size_t)M * n * 4));
        CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(w, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemset(y, 0xFF, (size_t)M * n * 4)); /* NaN */
        run_wg(x, w, y, M, n, K);
        run_cublas(h, x, w, yc, M, n, K);
        CK(cudaDeviceSynchronize());
        std::vector<float> hy((size_t)M * n), hc((size_t)M * n);
        CK(cudaMemcpy(hy.data(), y, hy.size() * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hc.data(), yc, hc.size() * 4, cudaMemcpyDeviceToHost));
        double num = 0, den = 0, cn = 0, cd = 0;
        int64_t bad = 0;
        for (size_t i = 0; i < hy.size(); i++) {
            bad += !isfinite(hy[i]);
            cn = std::max(cn, fabs((double)hy[i] - hc[i]));
            cd = std::max(cd, fabs((double)hc[i]));
        }
        for (int s = 0; s < 64; s++) { /* sampled outputs against float64 */
            const int r = (s * 1031) % M, o = (s * 7919) % n;
            double ref = 0;
            for (int k = 0; k < K; k++)
                ref += (double)bench_bf2f(hx[(size_t)r * K + k]) * bench_bf2f(hw[(size_t)o * K + k]);
            num = std::max(num, fabs(ref - hy[(size_t)r * n + o]));
            den = std::max(den, fabs(ref));
        }
        const double err = num / den, cerr = cn / cd;
        bool same = bad == 0;
        static const int ms[3] = {1, 7, 200}, offs[3] = {0, 61, 3000};
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) {
                const int m = ms[a], off = std::min(offs[b], M - m);
                CK(cudaMemset(ys, 0xFF, (size_t)m * n * 4));
                run_wg(x + (size_t)off * K, w, ys, m, n, K);
                CK(cudaDeviceSynchronize());
                std::vector<float> hs((size_t)m * n);
                CK(cudaMemcpy(hs.data(), ys, hs.size() * 4, cudaMemcpyDeviceToHost));
                same &= memcmp(hs.data(), hy.data() + (size_t)off * n, hs.size() * 4) == 0;
            }
        /* two weights in one launch (the shape and its first 32 rows) against their own launches */
        {
            float *y32 = NULL, *y32b = NULL;
            CK(cudaMalloc(&y32, (size_t)200 * 32 * 4));
            CK(cudaMalloc(&y32b, (size_t)200 * 32 * 4));
            CK(cudaMemset(ys, 0xFF, (size_t)200 * n * 4));
            run_wg_pair(x + (size_t)3000 * K, w, ys, y32, 200, n, K);
            run_wg(x + (size_t)3000 * K, w, y32b, 200, 32, K);
            CK(cudaDeviceSynchronize());
            std::vector<float> hs((size_t)200 * n), a32(200 * 32), b32(200 * 32);
            CK(cudaMemcpy(hs.data(), ys, hs.size() * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(a32.data(), y32, a32.size() * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(b32.data(), y32b, b32.size() * 4, cudaMemcpyDeviceToHost));
            same &= memcmp(hs.data(), hy.data() + (size_t)3000 * n, hs.size() * 4) == 0;
            same &= memcmp(a32.data(), b32.data(), a32.size() * 4) == 0;
            CK(cudaFree(y32));
            CK(cudaFree(y32b));
        }
        /* two products (x = hi + lo, the split precision) against float64, and one row count against the 4096 */
        run_wg(x, w, y, M, n, K, xl);
        run_wg(x + (size_t)61 * K, w, ys, 7, n, K, xl + (size_t)61 * K);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(hy.data(), y, hy.size() * 4, cudaMemcpyDeviceToHost));
        std::vector<float> h7((size_t)7 * n);
        CK(cudaMemcpy(h7.data(), ys, h7.size() * 4, cudaMemcpyDeviceToHost));
        same &= memcmp(h7.data(), hy.data() + (size_t)61 * n, h7.size() * 4) == 0;
        double num2 = 0, den2 = 0;
        for (int s = 0; s < 64; s++) {
            const int r = (s * 1031) % M, o = (s * 7919) % n;
            double ref = 0;
            for (int k = 0; k < K; k++) {
                const size_t i = (size_t)r * K + k;
                ref += ((double)bench_bf2f(hx[i]) + bench_bf2f(hl[i])) * bench_bf2f(hw[(size_t)o * K + k]);
            }
            num2 = std::max(num2, fabs(ref - hy[(size_t)r * n + o]));
            den2 = std::max(den2, fabs(ref));
        }
        const double err2 = num2 / den2;
        const float tw = median_us([&] { run_wg(x, w, y, M, n, K); });
        const float tc = median_us([&] { run_cublas(h, x, w, yc, M, n, K); });
        const double fl = 2.0 * M * n * K;
        const double tol = 1e-5 * sqrt(K / 4096.0); /* f32 accumulation: error grows as sqrt(K) */
        const bool ok = same && err < tol && err2 < tol && cerr < 1e-4;
        fails += !ok;
        printf("%5dx%-6d | %10.2e | %10.2e | %9.2e | %-4s | %8.1f %6.1f | %9.1f %6.1f%s\n", n, K, err, err2, cerr,
               same ? "yes" : "NO", tw, fl / tw * 1e-6, tc, fl / tc * 1e-6, ok ? "" : "  FAILED");
        tiles[n_tiles++] = tile_rows(x, xl, w, y, ys, n, K, &fails);
        CK(cudaFree(x));
        CK(cudaFree(xl));
        CK(cudaFree(w));
        CK(cudaFree(y));
        CK(cudaFree(yc));
        CK(cudaFree(ys));
    }
    CB(cublasDestroy(h));
    printf("\nthe two tiles (2 products, as split-mode bf16 weights), us a call: large 128x256 / small 64x128,\n"
           "and the tile wg_gemm takes (L / S); bits: the small tile's outputs equal the large tile's\n");
    printf("shape        ");
    for (int r : k_tile_rows) printf(" | m %-15d", r);
    printf(" | bits\n");
    for (int i = 0; i < n_tiles; i++) {
        printf("%5dx%-6d ", tiles[i].n, tiles[i].K);
        for (int j = 0; j < N_TILE_ROWS; j++)
            printf(" | %6.1f / %6.1f %c", tiles[i].large[j], tiles[i].small[j], tiles[i].pick[j]);
        printf(" | %s\n", tiles[i].same ? "same" : "DIFFER");
    }
    printf("\n4-bit weights, split precision: error against float64 (the pass's arithmetic / the fold's), then us\n"
           "a call: the kernel on hi / lo parts dequantized first (its time without the pass) / the fold from the\n"
           "codes (its tile by the rows), then each fold tile's; bits: every tile equal at 4096, 32 and 200 rows,\n"
           "and 7 rows equal to the 4096-row call's\n");
    printf("shape              | err pass / fold    ");
    for (int r : k_q4_rows) printf(" | m %-15d", r);
    printf(" | bits\n");
    static const int q4_shapes[][3] = {{12288, 4096, 64}, {4096, 4096, 64}, {1000, 4096, 64}, {4096, 4096, 128},
                                       {4096, 12288, 64}, {1000, 4160, 64}};
    for (const auto &sh : q4_shapes) fails += q4_row(sh[0], sh[1], sh[2]);
    printf("%s: %d failed\n", fails ? "FAILED" : "ok", fails);
    return fails != 0;
}
