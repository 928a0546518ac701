/* bench_gemm.cu: the prefill GEMM (op matmul_prefill) on the device: accuracy, EXACT(batch), speed.
 * Run by tests/cuda/bench_gemm.sh on the GPU machine. For each weight shape (n_out x K) and format
 * (bf16, MLX 4-bit group 64) and each mode (split = f32-class default, bf16 = QUILL_PREFILL_PRECISION=bf16):
 *   err   max|y - ref| / max|ref| over sample rows of a 4096-row call, ref in float64 on the CPU from the
 *         same f32 inputs and the same f32-dequantized weights; outputs poisoned (NaN) before each call
 *   same  rows computed in calls of m = 1, 7, 64, 512, 2048 rows (at offsets 0, in the middle, at the
 *         end of the 4096-row input) bitwise equal to the same rows of the 4096-row call, plus a second
 *         4096-row call equal to the first, plus one call of m = 16384 rows (the 4096-row input repeated
 *         from a phase of MBIG_PHASE rows, so each of its rows sits elsewhere in its tile) whose every row
 *         equals its row of the 4096-row call; "k/N" calls equal
 *   ms, TF  median time of one call (CUDA events on the backend's stream) and 2*m*n_out*K / time
 * and the old tiled SIMT kernel (QUILL_PREFILL_GEMM=tiled) on one shape. Before each shape's rows, a '#'
 * line gives the algorithm chosen for it and how (cuda_prefill_gemm_describe: the tier, the heuristic's
 * and the enumeration's candidates and why they were refused). Exit 1 on any failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_device.h"

#include "bench_check.h"

#define MMAX 4096
#define MBIG 16384
#define MBIG_PHASE 3192 /* row r of the big input is row (r + MBIG_PHASE) % MMAX of the 4096-row input */
static const int M_LIST[] = {1, 7, 64, 512, 2048, 4096};
#define N_M 6
#define N_SAMPLE 6

static uint64_t rs = 88172645463325252ull;
static uint32_t xr32(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs >> 32);
}
static float frand(void) { return (float)(xr32() >> 8) / 8388608.0f - 1.0f; } /* [-1, 1) */

/* A weight on the host: bf16 values, or 4-bit codes with bf16 scales and biases (group 64). */
typedef struct hw {
    int q4;
    int64_t n_out, k;
    uint16_t *w16;
    uint32_t *codes;
    uint16_t *sc, *bi;
} hw;

static hw hw_make(int q4, int64_t n_out, int64_t k) {
    hw h;
    memset(&h, 0, sizeof h);
    h.q4 = q4;
    h.n_out = n_out;
    h.k = k;
    if (!q4) {
        h.w16 = (uint16_t *)malloc((size_t)(n_out * k) * 2);
        for (int64_t i = 0; i < n_out * k; i++) h.w16[i] = bench_f2bf(0.05f * frand());
    } else {
        const int64_t words = n_out * k / 8, ng = n_out * k / 64;
        h.codes = (uint32_t *)malloc((size_t)words * 4);
        h.sc = (uint16_t *)malloc((size_t)ng * 2);
        h.bi = (uint16_t *)malloc((size_t)ng * 2);
        for (int64_t i = 0; i < words; i++) h.codes[i] = xr32();
        for (int64_t i = 0; i < ng; i++) {
            const float s = 0.006f + 0.004f * frand();
            h.sc[i] = bench_f2bf(s);
            h.bi[i] = bench_f2bf(-7.5f * s + 0.002f * frand());
        }
    }
    return h;
}
static void hw_free(hw *h) {
    free(h->w16);
    free(h->codes);
    free(h->sc);
    free(h->bi);
}
/* Row o of W as f32, rounded as the kernels round it: fl(fl(scale * code) + bias). */
static void hw_row(const hw *h, int64_t o, float *out) {
    for (int64_t i = 0; i < h->k; i++) {
        if (!h->q4) {
            out[i] = bench_bf2f(h->w16[o * h->k + i]);
            continue;
        }
        const uint32_t u = h->codes[(o * h->k + i) / 8];
        const float code = (float)((u >> (4 * (i % 8))) & 15u);
        const int64_t g = (o * h->k + i) / 64;
        volatile float t = bench_bf2f(h->sc[g]) * code;
        out[i] = t + bench_bf2f(h->bi[g]);
    }
}

/* The weight on a backend. */
typedef struct dw {
    qweight q;
} dw;
static dw dw_make(qbackend *be, const hw *h) {
    dw d;
    memset(&d, 0, sizeof d);
    qweight q = {h->q4 ? QW_AFFINE : QW_BF16, h->n_out, h->k, NULL, NULL, NULL, QW_BF16, h->q4 ? 4 : 0,
                 h->q4 ? 64 : 0, 0, 0};
    if (!h->q4) {
        const size_t b = (size_t)(h->n_out * h->k) * 2;
        OK(be->ops->alloc(be, b, &q.w));
        OK(be->ops->upload(be, q.w, h->w16, b));
    } else {
        const size_t b = (size_t)(h->n_out * h->k) / 2, g = (size_t)(h->n_out * h->k / 64) * 2;
        OK(be->ops->alloc(be, b, &q.w));
        OK(be->ops->upload(be, q.w, h->codes, b));
        OK(be->ops->alloc(be, g, &q.scales));
        OK(be->ops->upload(be, q.scales, h->sc, g));
        OK(be->ops->alloc(be, g, &q.biases));
        OK(be->ops->upload(be, q.biases, h->bi, g));
        size_t grown = 0;
        OK(be->ops->pack_weight(be, &q, &grown)); /* as the model loads it (cuda_q4_tiled.cuh) */
    }
    d.q = q;
    return d;
}
static void dw_free(qbackend *be, dw *d) {
    be->ops->free(be, d->q.w);
    be->ops->free(be, d->q.scales);
    be->ops->free(be, d->q.biases);
}

static void poison(qbackend *be, float *p, size_t n) { CK(cudaMemsetAsync(p, 0xff, n * 4, cu_stream(be))); }

static qbackend *make_backend(const char *prec, const char *gemm) {
    if (prec) setenv("QUILL_PREFILL_PRECISION", prec, 1);
    else unsetenv("QUILL_PREFILL_PRECISION");
    if (gemm) setenv("QUILL_PREFILL_GEMM", gemm, 1);
    else unsetenv("QUILL_PREFILL_GEMM");
    qbackend *be = NULL;
    OK(cuda_backend_create(0, &be));
    qweight w = {QW_BF16, 4096, 4096, NULL, NULL, NULL, QW_BF16, 0, 0, 0, 0};
    char buf[256];
    cuda_prefill_gemm_describe(be, &w, buf, sizeof buf); /* reads the environment now */
    if (!strncmp(buf, "error", 5)) {
        fprintf(stderr, "FATAL %s\n", buf);
        exit(1);
    }
    unsetenv("QUILL_PREFILL_PRECISION");
    unsetenv("QUILL_PREFILL_GEMM");
    return be;
}

static double time_call(qbackend *be, const float *x, int m, const qweight *W, float *y, int reps) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    double t[64];
    if (reps > 64) reps = 64;
    const int n_off = m <= MMAX / 4 ? 4 : 1; /* rotate the inputs where they would sit in L2 */
    for (int r = -2; r < reps; r++) {
        const int64_t off = (int64_t)((r + 2) % n_off) * (MMAX / 4);
        const float *xr = x + off * W->n_in;
        CK(cudaEventRecord(a, cu_stream(be)));
        OK(be->ops->matmul_prefill(be, xr, m, W, y));
        CK(cudaEventRecord(b, cu_stream(be)));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (r >= 0) t[r] = ms;
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    std::sort(t, t + reps);
    return t[reps / 2];
}

static int n_fail;

/* Counts elements of big (rows x n_out) not bitwise equal to row (r + MBIG_PHASE) % MMAX of ref. */
__global__ void cmp_big_kernel(const float *__restrict__ big, const float *__restrict__ ref, int64_t n_out,
                               int64_t rows, unsigned long long *bad) {
    unsigned long long local = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * n_out; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / n_out, c = i - r * n_out, rr = (r + MBIG_PHASE) % MMAX;
        local += __float_as_uint(big[i]) != __float_as_uint(ref[rr * n_out + c]);
    }
    if (local) atomicAdd(bad, local);
}

/* The m = MBIG call against the 4096-row result dy: 1 when every row is bitwise equal. */
static int check_big(qbackend *B, const float *dx, const float *dy, const qweight *W, float *dxb, float *dyb,
                     unsigned long long *dbad) {
    const int64_t K = W->n_in, n_out = W->n_out;
    cudaStream_t st = cu_stream(B);
    for (int64_t r0 = 0; r0 < MBIG;) { /* the input, in contiguous pieces */
        const int64_t src = (r0 + MBIG_PHASE) % MMAX, len = std::min<int64_t>(MMAX - src, MBIG - r0);
        CK(cudaMemcpyAsync(dxb + r0 * K, dx + src * K, (size_t)(len * K) * 4, cudaMemcpyDeviceToDevice, st));
        r0 += len;
    }
    poison(B, dyb, (size_t)(MBIG * n_out));
    OK(B->ops->matmul_prefill(B, dxb, MBIG, W, dyb));
    CK(cudaMemsetAsync(dbad, 0, sizeof *dbad, st));
    cmp_big_kernel<<<132 * 8, 256, 0, st>>>(dyb, dy, n_out, MBIG, dbad);
    CK(cudaGetLastError());
    unsigned long long bad = 0;
    CK(cudaMemcpyAsync(&bad, dbad, sizeof bad, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    if (bad) fprintf(stderr, "m=%d: %llu elements differ from the 4096-row call (%lldx%lld)\n", MBIG, bad,
                     (long long)n_out, (long long)K);
    return bad == 0;
}

int main(void) {
    if (cuda_device_count() == 0) {
        printf("no GPU: skipped\n");
        return 77;
    }
    const int64_t shapes[][2] = {{4096, 4096}, {12288, 4096}, {4096, 12288}, {8192, 4096}};
    const char *mode_name[2] = {"split", "bf16"};
    qbackend *be[3];
    be[0] = make_backend("split", NULL);
    be[1] = make_backend("bf16", NULL);
    be[2] = make_backend(NULL, "tiled");
    cuda_device_info info;
    char err[256];
    if (cuda_device_query(0, &info, err, sizeof err) == 0) printf("# %s, %d SMs\n", info.name, info.n_sms);
    printf("| n_out x K   | fmt  | mode  | rel err  | same  |");
    for (int j = 0; j < N_M; j++) printf(" m=%-4d ms  TF/s |", M_LIST[j]);
    printf("\n");

    const int64_t kmax = 12288, nmax = 12288;
    float *hx = (float *)malloc((size_t)(MMAX * kmax) * 4);
    float *hy = (float *)malloc((size_t)(MMAX * nmax) * 4), *hy2 = (float *)malloc((size_t)(MMAX * nmax) * 4);
    float *wrow = (float *)malloc((size_t)kmax * 4);
    double *ref = (double *)malloc((size_t)(N_SAMPLE * nmax) * 8);
    const int sample[N_SAMPLE] = {0, 1, 777, 2048, 3001, MMAX - 1};
    char ln[512];
    float *dxb, *dyb; /* the m = MBIG check's input and output (plain device memory, any backend's stream) */
    unsigned long long *dbad;
    CK(cudaMalloc((void **)&dxb, (size_t)(MBIG * kmax) * 4));
    CK(cudaMalloc((void **)&dyb, (size_t)(MBIG * nmax) * 4));
    CK(cudaMalloc((void **)&dbad, sizeof *dbad));

    for (int s = 0; s < 4; s++) {
        const int64_t n_out = shapes[s][0], K = shapes[s][1];
        { /* the algorithm chosen for this shape, and why (before its rows: a later failure keeps it) */
            char d0[2048];
            qweight w = {QW_BF16, n_out, K, NULL, NULL, NULL, QW_BF16, 0, 0, 0, 0};
            cuda_prefill_gemm_describe(be[0], &w, d0, sizeof d0);
            printf("#   %lldx%lld %s\n", (long long)n_out, (long long)K, d0);
            fflush(stdout);
        }
        for (int64_t i = 0; i < MMAX * K; i++) hx[i] = frand();
        for (int q4 = 0; q4 < 2; q4++) {
            hw h = hw_make(q4, n_out, K);
            for (int64_t o = 0; o < n_out; o++) { /* float64 reference on the sample rows */
                hw_row(&h, o, wrow);
                for (int r = 0; r < N_SAMPLE; r++) {
                    const float *xr = hx + (int64_t)sample[r] * K;
                    double acc = 0;
                    for (int64_t i = 0; i < K; i++) acc += (double)xr[i] * wrow[i];
                    ref[r * n_out + o] = acc;
                }
            }
            const int n_be = (s == 0 && q4 == 0) ? 3 : 2;
            for (int b = 0; b < n_be; b++) {
                qbackend *B = be[b];
                dw w = dw_make(B, &h);
                float *dx, *dy, *dy2;
                OK(B->ops->alloc(B, (size_t)(MMAX * K) * 4, (void **)&dx));
                OK(B->ops->alloc(B, (size_t)(MMAX * n_out) * 4, (void **)&dy));
                OK(B->ops->alloc(B, (size_t)(MMAX * n_out) * 4, (void **)&dy2));
                OK(B->ops->upload(B, dx, hx, (size_t)(MMAX * K) * 4));
                /* accuracy on the 4096-row call */
                poison(B, dy, (size_t)(MMAX * n_out));
                OK(B->ops->matmul_prefill(B, dx, MMAX, &w.q, dy));
                OK(B->ops->download(B, hy, dy, (size_t)(MMAX * n_out) * 4));
                int64_t bad = 0;
                for (int64_t i = 0; i < MMAX * n_out; i++) bad += !isfinite(hy[i]);
                double num = 0, den = 0;
                for (int r = 0; r < N_SAMPLE; r++)
                    for (int64_t o = 0; o < n_out; o++) {
                        const double d = fabs((double)hy[(int64_t)sample[r] * n_out + o] - ref[r * n_out + o]);
                        if (!(d <= num)) num = d;
                        den = std::max(den, fabs(ref[r * n_out + o]));
                    }
                /* f32 accumulation error grows about as sqrt(K): 1e-5 at K = 4096 (measured 1.4e-5 at 12288) */
                const double rel = num / den, bound = b == 1 ? 2e-2 : 1e-5 * sqrt(std::max<double>(1.0, K / 4096.0));
                const int acc_ok = bad == 0 && rel <= bound;
                /* EXACT(batch): sub-calls at offsets, and a second full call */
                int same = 0, calls = 0;
                if (b < 2) {
                    for (int j = 0; j < N_M - 1; j++) {
                        const int m = M_LIST[j];
                        const int offs[3] = {0, (m * 37 + 1001) % (MMAX - m + 1), MMAX - m};
                        for (int t = 0; t < 3; t++) {
                            const int64_t off = offs[t];
                            poison(B, dy2 + off * n_out, (size_t)(m * n_out));
                            OK(B->ops->matmul_prefill(B, dx + off * K, m, &w.q, dy2 + off * n_out));
                            OK(B->ops->download(B, hy2, dy2 + off * n_out, (size_t)(m * n_out) * 4));
                            same += memcmp(hy2, hy + off * n_out, (size_t)(m * n_out) * 4) == 0;
                            calls++;
                        }
                    }
                    poison(B, dy2, (size_t)(MMAX * n_out));
                    OK(B->ops->matmul_prefill(B, dx, MMAX, &w.q, dy2));
                    OK(B->ops->download(B, hy2, dy2, (size_t)(MMAX * n_out) * 4));
                    same += memcmp(hy2, hy, (size_t)(MMAX * n_out) * 4) == 0;
                    calls++;
                    same += check_big(B, dx, dy, &w.q, dxb, dyb, dbad); /* dy: still the first 4096-row call */
                    calls++;
                }
                if (!acc_ok || same != calls) n_fail++;
                /* timing */
                int p = snprintf(ln, 512, "| %5lldx%-5lld | %-4s | %-5s | %8.2e%s| %2d/%-2d |", (long long)n_out,
                                 (long long)K, q4 ? "q4" : "bf16", b == 2 ? "tiled" : mode_name[b], rel,
                                 acc_ok ? " " : "!", same, calls);
                for (int j = 0; j < N_M; j++) {
                    const int m = M_LIST[j];
                    if (b == 2 && m != 512 && m != 4096) {
                        p += snprintf(ln + p, 512 - p, " %15s |", "-");
                        continue;
                    }
                    const double ms = time_call(B, dx, m, &w.q, dy, b == 2 ? 3 : (m >= 2048 ? 10 : 20));
                    p += snprintf(ln + p, 512 - p, " %8.3f %6.1f |", ms, 2.0 * m * n_out * K / (ms * 1e-3) / 1e12);
                }
                printf("%s\n", ln);
                fflush(stdout);
                B->ops->free(B, dx);
                B->ops->free(B, dy);
                B->ops->free(B, dy2);
                dw_free(B, &w);
            }
            hw_free(&h);
        }
    }
    for (int b = 0; b < 3; b++) be[b]->ops->destroy(be[b]);
    free(hx);
    free(hy);
    free(hy2);
    free(wrow);
    free(ref);
    cudaFree(dxb);
    cudaFree(dyb);
    cudaFree(dbad);
    printf("bounds: split 1e-5 x sqrt(K / 4096), bf16 2e-2; same = bitwise-equal calls; %s\n", n_fail ? "FAILED" : "all ok");
    return n_fail ? 1 : 0;
}
