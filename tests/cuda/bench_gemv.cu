/* bench_gemv.cu: the decode matmul (cuda_gemv.cuh's tensor-core gemv_tc_kernel) against the old SIMT
 * gemv_kernel, on the GPU: checks and timings. Built and run by tests/cuda/bench_gemv.sh (nvcc, cudart
 * only). For shapes (n_out x K) 4096x4096, 12288x4096, 4096x12288, 248320x4096 and bf16 / MLX 4-bit g64
 * weights (random, made on the device):
 *   check: n = 64 rows, outputs poisoned (NaN) first, every output written and finite;
 *     relative error max|y - ref| / max|ref| against an f64 CPU reference on 256 sampled outputs (old
 *     kernel too); EXACT(batch): a row's outputs bitwise equal alone (n = 1), at row 37 of 64, at row 37
 *     of 64 other random rows, and at row 3 of 13;
 *   time: n = 1, 16, 64 (BENCH_GEMV_ROWS="1,16" picks); CUDA events around each launch, median of the runs,
 *     rotating weight copies so that L2 (60 MB) does not keep them; GB/s of weight bytes (codes + scales +
 *     biases) and % of 4.3 TB/s.
 * Also checks 4-bit group 128 on the first shape. QUILL_DECODE_PRECISION=bf16: x rounded to bf16 (the
 * error bound 1e-2 instead of 2e-5); =dequant: the 4-bit weights too, before their MMAs. Prints one compact
 * table; exits non-zero on a failed check. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/cuda_gemv.cuh"
#include "bench_check.h"
#include "bench_weights.h"

/* The OLD decode kernel (before the tensor-core one) is gemv_kernel in cuda_gemv_simt.cuh, where it
 * remains the fallback for weights the tensor-core kernel does not take. */

/* ---- the kernels under test --------------------------------------------------------------------- */
struct scratch {
    float *part;
    unsigned *tick;
    void *pre;
};

static int bf16x; /* QUILL_DECODE_PRECISION=bf16 (1) or dequant (GT_DQ) */
static void run_tc(const qweight &W, const float *x, int n, float *y, const scratch &sc) {
    const int kind = gemv_tc_kind(&W);
    if (kind < 0) { fprintf(stderr, "weight not taken by the tensor-core kernel\n"); exit(2); }
    CK(gemv_tc_launch(kind, x, n, &W, y, sc.part, sc.tick, sc.pre, 0, bf16x));
}
/* The SIMT kernel reads codes row-major: on a tiled weight's random codes (bench_weights.h) it computes another random
 * weight, row_major(W), which its check is made against. */
static qweight row_major(const qweight &W) {
    qweight R = W;
    R.tiled = 0;
    return R;
}
static void run_old(const qweight &Wt, const float *x, int n, float *y) {
    const qweight W = row_major(Wt);
    dim3 grid((unsigned)((W.n_out + GV_WARPS - 1) / GV_WARPS), (unsigned)((n + GV_ROWS - 1) / GV_ROWS));
    if (W.fmt == QW_BF16) gemv_kernel<8><<<grid, GV_WARPS * 32>>>(x, n, W, y);
    else gemv_kernel<32><<<grid, GV_WARPS * 32>>>(x, n, W, y);
    CK(cudaGetLastError());
}

static int n_fail;

/* Relative error of y (n rows, device) against the f64 reference on sampled outputs. */
static double rel_err(const qweight &W, const std::vector<float> &hx, int n, const float *dy, int64_t *unwritten) {
    const int64_t N = W.n_out, K = W.n_in;
    std::vector<float> hy((size_t)(n * N));
    CK(cudaMemcpy(hy.data(), dy, hy.size() * 4, cudaMemcpyDeviceToHost));
    int64_t bad = 0;
    for (size_t i = 0; i < hy.size(); i++) bad += !isfinite(hy[i]);
    *unwritten = bad;
    double num = 0, den = 0;
    std::vector<float> wr;
    for (int s = 0; s < 256; s++) {
        const int64_t o = s == 255 ? N - 1 : (int64_t)s * (N / 255) + (s * 7) % 13;
        weight_row(W, o, wr);
        for (int r = 0; r < n; r++) {
            double ref = 0;
            for (int64_t k = 0; k < K; k++) ref += (double)wr[(size_t)k] * hx[(size_t)(r * K + k)];
            num = std::max(num, fabs(ref - hy[(size_t)(r * N + o)]));
            den = std::max(den, fabs(ref));
        }
    }
    return num / den;
}

/* A launch of two weights of one shape sharing x (the 9B's gate + up: 2 x 12288x4096) at 16 and 64 rows, the
 * many-row kernel's LOOP where it applies (QUILL_CUDA_GEMV_WIDE_LOOP=0: not): every sampled row of both outputs
 * bitwise that row alone (one row never loops), and the launch's time (pipelined, 20 back to back). */
static void pair_checks(const float *dx, float *dy, float *dy2, const scratch &sc, std::vector<std::string> &lines) {
    const int64_t N = 12288, K = 4096;
    for (int group = 0; group <= 64; group += 64) {
        wset w0 = make_weight(N, K, group, 501u + (uint32_t)group), w1 = make_weight(N, K, group, 502u + (uint32_t)group);
        const qweight *W[2] = {&w0.W[0], &w1.W[0]};
        const int kind = gemv_tc_kind(W[0]);
        for (int n = 16; n <= 64; n += 48) {
            float *y[2] = {dy, dy + (size_t)n * N};
            const size_t half = (size_t)GT_MAX_SPLIT * 64 * N; /* floats of partials a weight may need */
            float *part[2] = {sc.part, sc.part + half};
            unsigned *tick[2] = {sc.tick, sc.tick + (1 << 17)};
            gt_extra ex = gt_extra();
            ex.bf16x = bf16x;
            CK(cudaMemset(dy, 0xff, (size_t)2 * n * N * 4));
            CK(gemv_tc_launch_multi(kind, dx, n, 2, W, y, part, tick, sc.pre, 0, ex));
            int exact = 1;
            std::vector<float> a((size_t)N), b((size_t)N);
            const int rows[3] = {0, 5, n - 1};
            for (int q = 0; q < 3; q++)
                for (int i = 0; i < 2; i++) {
                    CK(cudaMemset(dy2, 0xff, (size_t)N * 4));
                    run_tc(*W[i], dx + (size_t)rows[q] * K, 1, dy2, sc);
                    CK(cudaMemcpy(a.data(), y[i] + (size_t)rows[q] * N, (size_t)N * 4, cudaMemcpyDeviceToHost));
                    CK(cudaMemcpy(b.data(), dy2, (size_t)N * 4, cudaMemcpyDeviceToHost));
                    exact &= memcmp(a.data(), b.data(), (size_t)N * 4) == 0;
                }
            cudaEvent_t e0, e1;
            CK(cudaEventCreate(&e0));
            CK(cudaEventCreate(&e1));
            CK(cudaEventRecord(e0));
            for (int it = 0; it < 20; it++) {
                const qweight *Wc[2] = {&w0.W[it % w0.copies], &w1.W[it % w1.copies]};
                CK(gemv_tc_launch_multi(kind, dx, n, 2, Wc, y, part, tick, sc.pre, 0, ex));
            }
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            CK(cudaEventDestroy(e0));
            CK(cudaEventDestroy(e1));
            n_fail += !exact;
            char line[200];
            snprintf(line, sizeof line, "check pair 2x%lldx%lld %-6s n=%-2d pipelined %.1f us | EXACT(batch) %s | %s",
                     (long long)N, (long long)K, group ? "q4g64" : "bf16", n, ms * 1000.0 / 20.0,
                     exact ? "bitwise" : "DIFFERS", exact ? "ok" : "FAIL");
            lines.push_back(line);
        }
        free_weight(w0);
        free_weight(w1);
    }
}

int main(void) {
    int dev = 0;
    CK(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("# %s, %d SMs, L2 %d MB; tensor-core gemv: %d threads/block, %d outputs x %d rows per block (more than %d "
           "rows: x %d)\n",
           prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, GT_THREADS, GT_OUT, GT_RC, GW_MIN_ROWS,
           4 * GW_MAX_TILES);
    CK(gemv_tc_init());
    if (const char *dp = getenv("QUILL_DECODE_PRECISION"))
        bf16x = !strcmp(dp, "bf16") ? 1 : !strcmp(dp, "dequant") ? GT_DQ : 0;
    if (bf16x == GT_DQ && wg_available()) { /* how many of gemv_dq_kernel's clusters fit the GPU at once */
        printf("# gemv_dq_kernel<64, 8> clusters that fit at once (blocks):");
        for (int c = 2; c <= GDQ_MAX_CLUSTER; c *= 2) {
            const int k = (int)(gemv_cluster_blocks(gemv_dq_kernel<64, 8, true, GDQ_PLAIN>, c, gdq_cfg<8>::SMEM) / c);
            printf(" %d of %d (%d)", k, c, k * c);
        }
        printf("\n");
    }
    if (bf16x) printf("# x rounded to bf16%s (QUILL_DECODE_PRECISION=%s)\n", bf16x == GT_DQ ? ", 4-bit weights too" : "",
                      bf16x == GT_DQ ? "dequant" : "bf16");
    const int64_t shapes[4][2] = {{4096, 4096}, {12288, 4096}, {4096, 12288}, {248320, 4096}};
    int ns[3] = {1, 16, 64}, n_ns = 3;
    if (const char *e = getenv("BENCH_GEMV_ROWS")) { /* e.g. "1" or "1,16": time only these row counts */
        n_ns = 0;
        for (const char *p = e; *p && n_ns < 3; p += strcspn(p, ","), p += *p == ',')
            if (atoi(p) >= 1 && atoi(p) <= 64) ns[n_ns++] = atoi(p);
    }
    const int NMAX = 64;
    const int64_t KMAX = 12288, NOUT_MAX = 248320;

    /* activations: x (64 rows), x2 (row 37 = x's row 37, others different), x13 (row 3 = x's row 37) */
    std::vector<float> hx((size_t)(NMAX * KMAX)), hx2((size_t)(NMAX * KMAX));
    for (size_t i = 0; i < hx.size(); i++) {
        hx[i] = (float)(hash32(i, 77) >> 8) * (2.0f / 16777216.0f) - 1.0f;
        hx2[i] = (float)(hash32(i, 78) >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
    float *dx, *dx2, *dx1, *dx13, *dy, *dy2;
    CK(cudaMalloc(&dx, hx.size() * 4));
    CK(cudaMalloc(&dx2, hx.size() * 4));
    CK(cudaMalloc(&dx1, (size_t)KMAX * 4));
    CK(cudaMalloc(&dx13, (size_t)13 * KMAX * 4));
    CK(cudaMalloc(&dy, (size_t)NMAX * NOUT_MAX * 4));
    CK(cudaMalloc(&dy2, (size_t)NMAX * NOUT_MAX * 4));
    scratch sc;
    CK(cudaMalloc(&sc.part, (size_t)GT_MAX_SPLIT * NMAX * NOUT_MAX * 4)); /* any split of any shape (1 GB) */
    CK(cudaMalloc(&sc.tick, (size_t)1 << 20));
    CK(cudaMemset(sc.tick, 0, (size_t)1 << 20));
    CK(cudaMalloc(&sc.pre, (size_t)NMAX / 4 * (KMAX / 32) * 1040)); /* the most gemv_tc_pre_bytes asks */
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    printf("%-13s %-6s %3s %3s | %8s %8s | %8s %7s | %6s | %8s %6s\n", "shape", "fmt", "n", "S", "old us", "new us",
           "new GB/s", "of 4.3T", "old/new", "pipe us", "GB/s");
    std::vector<std::string> check_lines;
    const int fmts[3] = {0, 64, 128};
    for (int si = 0; si < 4; si++) {
        for (int fi = 0; fi < 3; fi++) {
            const int group = fmts[fi];
            if (group == 128 && si != 0) continue;
            const int64_t N = shapes[si][0], K = shapes[si][1];
            wset ws = make_weight(N, K, group, 1000u + (uint32_t)(si * 10 + fi));
            const qweight &W = ws.W[0];
            const int S = gemv_tc_split(&W, gemv_tc_kind(&W));
            if (S > GT_MAX_SPLIT) { fprintf(stderr, "scratch too small\n"); return 2; }
            /* upload activations with this K */
            std::vector<float> xk((size_t)(NMAX * K)), x2k((size_t)(NMAX * K)), x13((size_t)(13 * K));
            for (int r = 0; r < NMAX; r++)
                for (int64_t k = 0; k < K; k++) {
                    xk[(size_t)(r * K + k)] = hx[(size_t)(r * KMAX + k)];
                    x2k[(size_t)(r * K + k)] = r == 37 ? hx[(size_t)(r * KMAX + k)] : hx2[(size_t)(r * KMAX + k)];
                }
            for (int r = 0; r < 13; r++)
                for (int64_t k = 0; k < K; k++) x13[(size_t)(r * K + k)] = r == 3 ? xk[(size_t)(37 * K + k)] : x2k[(size_t)(r * K + k)];
            CK(cudaMemcpy(dx, xk.data(), xk.size() * 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dx2, x2k.data(), x2k.size() * 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dx1, xk.data() + 37 * K, (size_t)K * 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dx13, x13.data(), x13.size() * 4, cudaMemcpyHostToDevice));

            /* checks: both kernels against the f64 reference; EXACT(batch) of the tensor-core kernel */
            const size_t ybytes = (size_t)(NMAX * N) * 4;
            double err[2];
            int64_t unw[2];
            std::vector<float> yv[2];
            for (int k = 0; k < 2; k++) { /* 0: old SIMT, 1: tensor cores */
                CK(cudaMemset(dy, 0xff, ybytes)); /* NaN */
                if (k) run_tc(W, dx, NMAX, dy, sc);
                else run_old(W, dx, NMAX, dy);
                CK(cudaDeviceSynchronize());
                err[k] = rel_err(k ? W : row_major(W), xk, NMAX, dy, &unw[k]);
                yv[k].resize((size_t)(NMAX * N));
                CK(cudaMemcpy(yv[k].data(), dy, ybytes, cudaMemcpyDeviceToHost));
            }
            int exact = 1;
            std::vector<float> b((size_t)N);
            const float *a = yv[1].data() + 37 * N;
            const float *xs[3] = {dx1, dx2, dx13};
            const int nn[3] = {1, NMAX, 13}, at[3] = {0, 37, 3};
            for (int q = 0; q < 3; q++) {
                CK(cudaMemset(dy2, 0xff, ybytes));
                run_tc(W, xs[q], nn[q], dy2, sc);
                CK(cudaMemcpy(b.data(), dy2 + (size_t)at[q] * N, (size_t)N * 4, cudaMemcpyDeviceToHost));
                exact &= memcmp(a, b.data(), (size_t)N * 4) == 0;
            }
            CK(cudaDeviceSynchronize());
            const int ok = err[1] < (bf16x ? 1e-2 : 2e-5) && unw[1] == 0 && exact;
            uint64_t bits = 1469598103934665603ull; /* FNV-1a of the 64 rows' outputs: equal across builds or knobs
                                                     * that must give the same bits (tune_gemv's variants) */
            const unsigned char *yb = (const unsigned char *)yv[1].data();
            for (size_t i = 0; i < yv[1].size() * 4; i++) bits = (bits ^ yb[i]) * 1099511628211ull;
            n_fail += !ok;
            char line[320];
            snprintf(line, sizeof line,
                     "check %6lldx%-6lld %-6s S=%-2d rel err new %.2e old %.2e | unwritten %lld | EXACT(batch) %s | "
                     "bits %016llx | %s",
                     (long long)N, (long long)K, group ? (group == 64 ? "q4g64" : "q4g128") : "bf16", S, err[1], err[0],
                     (long long)unw[1], exact ? "bitwise" : "DIFFERS", (unsigned long long)bits, ok ? "ok" : "FAIL");
            check_lines.push_back(line);

            /* timings (4-bit g128 is only checked) */
            if (group != 128) {
                const double wbytes = (double)ws.w_bytes + 2.0 * ws.sb_bytes;
                for (int ni = 0; ni < n_ns; ni++) {
                    const int n = ns[ni];
                    float us[2];
                    for (int which = 0; which < 2; which++) {
                        const int iters = N > 100000 ? 15 : 40;
                        std::vector<float> t;
                        for (int it = -3; it < iters; it++) {
                            const qweight &Wc = ws.W[(it + 3) % ws.copies];
                            CK(cudaEventRecord(e0));
                            if (which) run_tc(Wc, dx, n, dy, sc);
                            else run_old(Wc, dx, n, dy);
                            CK(cudaEventRecord(e1));
                            CK(cudaEventSynchronize(e1));
                            float ms;
                            CK(cudaEventElapsedTime(&ms, e0, e1));
                            if (it >= 0) t.push_back(ms);
                        }
                        us[which] = median_us(t);
                    }
                    /* pipelined: 20 launches back to back (programmatic launch overlaps their edges), as in a
                     * decode step, weight copies rotating so each reads DRAM */
                    CK(cudaEventRecord(e0));
                    for (int it = 0; it < 20; it++) run_tc(ws.W[it % ws.copies], dx, n, dy, sc);
                    CK(cudaEventRecord(e1));
                    CK(cudaEventSynchronize(e1));
                    float pms;
                    CK(cudaEventElapsedTime(&pms, e0, e1));
                    const double pipe_us = pms * 1000.0 / 20.0;
                    const double gbs = wbytes / (us[1] * 1e-6) / 1e9;
                    char shp[48];
                    snprintf(shp, sizeof shp, "%lldx%lld", (long long)N, (long long)K);
                    printf("%-13s %-6s %3d %3d | %8.1f %8.1f | %8.0f %6.1f%% | %5.2fx | %8.1f %6.0f\n", shp,
                           group ? "q4g64" : "bf16", n, S, us[0], us[1], gbs, 100.0 * gbs / 4300.0, us[0] / us[1], pipe_us,
                           wbytes / (pipe_us * 1e-6) / 1e9);
                }
            }
            free_weight(ws);
        }
    }
    pair_checks(dx, dy, dy2, sc, check_lines);
    for (auto &l : check_lines) printf("%s\n", l.c_str());
    CK(cudaFree(dx));
    CK(cudaFree(dx2));
    CK(cudaFree(dx1));
    CK(cudaFree(dx13));
    CK(cudaFree(dy));
    CK(cudaFree(dy2));
    CK(cudaFree(sc.part));
    CK(cudaFree(sc.tick));
    CK(cudaFree(sc.pre));
    printf("%s: %d failed checks\n", n_fail ? "FAIL" : "ok", n_fail);
    return n_fail ? 1 : 0;
}
