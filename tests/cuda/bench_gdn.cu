/* tests/cuda/bench_gdn.cu: the gated delta rule on the GPU for prompt rows, old (recurrent, chunked = 0)
 * vs new (chunked rule, chunked = 1, cuda_gdn_chunked.cu), on one 9B GDN layer's shape (Hk 16, Hv 32,
 * dk = dv = 128): one seq of 512, 4096 and 65536 rows and 16 seqs of 512. Per case: the median time
 * per call (CUDA events on the backend's stream), tokens/s, and the chunked result against the
 * recurrent one on the same inputs and starting state (max |diff| / max |recurrent|, outputs and
 * states), with every output poisoned (NaN) first and checked written. Then decode: 1, 16 and 64 seqs of one row (the
 * recurrent kernel), f32 and bf16 states (dims.state_bf16), the median time per call and the state bytes it moves.
 * BENCH_GDN_DECODE_ONLY=1 runs only the decode table. Run by tests/cuda/bench_gdn.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_flash_prefill.h"

#include "bench_check.h"

__device__ float uhash(uint64_t i, uint32_t seed) { /* uniform in [0, 1) */
    uint64_t x = i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31; x *= 0x94D049BB133111EBull; x ^= x >> 29;
    return (float)(x >> 40) * (1.0f / 16777216.0f);
}
__global__ void fill_kernel(float *p, int64_t n, int kind, uint32_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float u = uhash((uint64_t)i, seed);
        float v;
        if (kind == 0) { const float x = 6.0f * u - 3.0f; v = x / (1.0f + expf(-x)); } /* qkv after SiLU */
        else if (kind == 1) v = -1.0f * u;                                            /* g in (-1, 0] */
        else if (kind == 2) v = 0.01f + 0.98f * u;                                    /* beta */
        else v = u - 0.5f;                                                            /* state */
        p[i] = v;
    }
}
/* a bf16 state, uniform in [-0.5, 0.5) */
__global__ void fill_bf16_kernel(__nv_bfloat16 *p, int64_t n, uint32_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16_rn(uhash((uint64_t)i, seed) - 0.5f);
}
static void fill(float *p, int64_t n, int kind, uint32_t seed) {
    fill_kernel<<<1024, 256>>>(p, n, kind, seed);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
}

/* max |a - b| / max |b| on the device copies; NaN anywhere in a (unwritten) gives inf */
static double rel_err(const float *a_dev, const float *b_dev, size_t n) {
    float *a = (float *)malloc(n * 4), *b = (float *)malloc(n * 4);
    if (!a || !b) { fprintf(stderr, "FATAL host memory\n"); exit(1); }
    CK(cudaMemcpy(a, a_dev, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b, b_dev, n * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) { num = INFINITY; break; }
        const double d = fabs((double)a[i] - b[i]);
        if (d > num) num = d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    free(a); free(b);
    return den > 0 ? num / den : num;
}

static int cmp_f(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* median ms per call of gated_delta over reps calls */
static float time_calls(qbackend *be, const float *qkv, const float *g, const float *beta, const qseq *seqs, int ns,
                        float *const *S, qgdn_dims d, float *out, int reps) {
    cudaStream_t st = cu_stream(be);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    OK(be->ops->gated_delta(be, qkv, g, beta, seqs, ns, S, d, out)); /* warm-up */
    OK(be->ops->sync(be));
    float ms[32];
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(e0, st));
        OK(be->ops->gated_delta(be, qkv, g, beta, seqs, ns, S, d, out));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms[r], e0, e1));
    }
    OK(be->ops->sync(be));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    qsort(ms, (size_t)reps, sizeof ms[0], cmp_f);
    return ms[reps / 2];
}

int main(void) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) { printf("no GPU\n"); return 77; }
    qbackend *be = NULL;
    OK(cuda_backend_create(0, &be));
    const qgdn_dims d = {16, 32, 128, 128, 0, 0, NULL};
    const int64_t W = 2LL * d.n_k_heads * d.k_dim + (int64_t)d.n_v_heads * d.v_dim, no = d.n_v_heads * d.v_dim;
    const size_t Sn = (size_t)d.n_v_heads * d.k_dim * d.v_dim;
    const int64_t max_rows = 65536;
    float *qkv, *g, *beta, *o_c, *o_r;
    CK(cudaMalloc(&qkv, (size_t)max_rows * W * 4));
    CK(cudaMalloc(&g, (size_t)max_rows * d.n_v_heads * 4));
    CK(cudaMalloc(&beta, (size_t)max_rows * d.n_v_heads * 4));
    CK(cudaMalloc(&o_c, (size_t)max_rows * no * 4));
    CK(cudaMalloc(&o_r, (size_t)max_rows * no * 4));
    fill(qkv, max_rows * W, 0, 1);
    fill(g, max_rows * d.n_v_heads, 1, 2);
    fill(beta, max_rows * d.n_v_heads, 2, 3);
    enum { MAXS = 16 };
    float *S0[MAXS], *Sc[MAXS], *Sr[MAXS];
    for (int s = 0; s < MAXS; s++) {
        CK(cudaMalloc(&S0[s], Sn * 4));
        CK(cudaMalloc(&Sc[s], Sn * 4));
        CK(cudaMalloc(&Sr[s], Sn * 4));
        fill(S0[s], (int64_t)Sn, 3, 100 + s);
    }
    struct { int n_seqs, rows, pos0, reps; const char *name; } cases[] = {
        {1, 512, 0, 15, "1 x 512"}, {1, 4096, 0, 11, "1 x 4096"}, {1, 4096, 100, 5, "1 x 4096 @pos 100"},
        {1, 65536, 0, 3, "1 x 65536"}, {16, 512, 0, 9, "16 x 512"}};
    const char *only = getenv("BENCH_GDN_DECODE_ONLY");
    const size_t n_cases = only && !strcmp(only, "1") ? 0 : sizeof cases / sizeof cases[0];
    if (n_cases)
    printf("| case | rows | recurrent ms | chunked ms | speedup | chunked tok/s (1 layer) | x24 layers ms | err out | err state |\n");
    if (n_cases) printf("|---|---|---|---|---|---|---|---|---|\n");
    int bad = 0;
    for (size_t c = 0; c < n_cases; c++) {
        const int ns = cases[c].n_seqs, rows = cases[c].rows, n = ns * rows;
        qseq sc[MAXS], sr[MAXS];
        for (int s = 0; s < ns; s++) {
            sc[s] = (qseq){s * rows, rows, cases[c].pos0, 1};
            sr[s] = (qseq){s * rows, rows, cases[c].pos0, 0};
            CK(cudaMemcpy(Sc[s], S0[s], Sn * 4, cudaMemcpyDeviceToDevice));
            CK(cudaMemcpy(Sr[s], S0[s], Sn * 4, cudaMemcpyDeviceToDevice));
        }
        /* correctness: one call each from the same state, outputs poisoned first */
        CK(cudaMemset(o_c, 0xff, (size_t)n * no * 4));
        CK(cudaMemset(o_r, 0xff, (size_t)n * no * 4));
        OK(be->ops->gated_delta(be, qkv, g, beta, sc, ns, Sc, d, o_c));
        OK(be->ops->gated_delta(be, qkv, g, beta, sr, ns, Sr, d, o_r));
        OK(be->ops->sync(be));
        const double eo = rel_err(o_c, o_r, (size_t)n * no);
        double es = 0;
        for (int s = 0; s < ns; s++) {
            const double e = rel_err(Sc[s], Sr[s], Sn);
            if (!(e <= es)) es = e;
        }
        /* the tolerance grows with the run's length (both rules round differently, errors add up); bf16 prefill
         * mode: the chunked rule's products take one tf32 product */
        const double tol = cuda_flash_precision() == FLASH_SPLIT ? 1e-4 : 1e-2;
        if (!(eo <= tol && es <= tol)) bad++;
        const float tr = time_calls(be, qkv, g, beta, sr, ns, Sr, d, o_r, cases[c].reps);
        const float tc = time_calls(be, qkv, g, beta, sc, ns, Sc, d, o_c, cases[c].reps);
        printf("| %s | %d | %.3f | %.3f | %.1fx | %.0f | %.2f | %.1e | %.1e |\n", cases[c].name, n, tr, tc, tr / tc,
               n / (tc * 1e-3), 24 * tc, eo, es);
    }
    /* decode: one row for each of ns seqs, states f32 or bf16 (each seq its own buffer, as a stream's) */
    enum { DEC = 64 };
    float *Sd[DEC];
    for (int s = 0; s < DEC; s++) CK(cudaMalloc(&Sd[s], Sn * 4));
    printf("\n| decode seqs | state | us a call | state MB read + written | GB/s of state |\n|---|---|---|---|---|\n");
    for (int ns = 1; ns <= DEC; ns *= 4)
        for (int sb = 0; sb < 2; sb++) {
            qseq sq[DEC];
            for (int s = 0; s < ns; s++) {
                sq[s] = (qseq){s, 1, 100 + s, 0};
                if (sb) fill_bf16_kernel<<<1024, 256>>>((__nv_bfloat16 *)Sd[s], (int64_t)Sn, 200 + s);
                else fill_kernel<<<1024, 256>>>(Sd[s], (int64_t)Sn, 3, 200 + s);
            }
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            qgdn_dims dd = d;
            dd.state_bf16 = sb;
            const float ms = time_calls(be, qkv, g, beta, sq, ns, Sd, dd, o_r, 15);
            const double mb = 2.0 * ns * Sn * (sb ? 2 : 4) / 1e6;
            printf("| %d | %s | %.1f | %.1f | %.0f |\n", ns, sb ? "bf16" : "f32", ms * 1e3, mb, mb / ms);
        }
    for (int s = 0; s < DEC; s++) CK(cudaFree(Sd[s]));
    for (int s = 0; s < MAXS; s++) { CK(cudaFree(S0[s])); CK(cudaFree(Sc[s])); CK(cudaFree(Sr[s])); }
    CK(cudaFree(qkv)); CK(cudaFree(g)); CK(cudaFree(beta)); CK(cudaFree(o_c)); CK(cudaFree(o_r));
    be->ops->destroy(be);
    printf("%s\n", bad ? "FAIL: chunked vs recurrent error over the tolerance" : "chunked vs recurrent: ok");
    return bad ? 1 : 0;
}
