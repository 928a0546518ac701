/* bench_attn.cu: prompt-row attention on the device, 9B shape (16 q heads, 4 kv heads, dim 256, one
 * stream): the old per-(row, head) kernel (attention_kernel, up to 4096 rows) against the flash kernel
 * (cuda_flash_prefill.cu) in bf16 and split mode, for one seq of 512, 4096 and 16384 prompt rows in one
 * call, and 65536 rows as 16 calls of 4096 in order (each attending to everything before). Prints
 *   ms     median time of one call (of the 16 calls for 65536), CUDA events on the stream
 *   TF     4 * rows * avg_keys * 256 * 16 / time (avg_keys = mean of pos + 1 over the rows)
 *   err    max|new - old| / max|old| on the GPU (512 and 4096 rows); for 65536, max over 2 rows x 16
 *          heads near the end of |new - ref| / max|ref| with ref in float64 on the CPU
 *   bad    non-finite outputs after the run (outputs are poisoned with NaN first)
 * Built and run by tests/cuda/bench_attn.sh; includes cuda_attention.cu for the old kernel. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "../../src/backend/cuda/cuda_attention.cu"

#include "bench_check.h"

/* cuda_attention.cu's decode path needs these two; the bench never runs it. */
qstatus cu_stage(qbackend *be, const void *host, size_t bytes, void **dev) {
    (void)be; (void)host; (void)bytes; (void)dev;
    return q_fail(Q_EUNSUPPORTED, "bench: no staging");
}
qstatus cu_att_scratch(qbackend *be, size_t bytes, float **out) {
    (void)be; (void)bytes; (void)out;
    return q_fail(Q_EUNSUPPORTED, "bench: no scratch");
}

enum { NQ = 16, NKV = 4, DIM = 256, MAXR = 65536, CHUNK = 4096 };
static const float SCALE = 0.0625f;

__device__ __forceinline__ uint32_t hash32(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return (uint32_t)x;
}
__global__ void fill_kernel(float *p, int64_t n, uint64_t seed) { /* uniform in [-1, 1) */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        p[i] = (float)(hash32(seed * 0x9e3779b97f4a7c15ull + (uint64_t)i) >> 8) / 8388608.0f - 1.0f;
}
__global__ void poison_kernel(float *p, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        p[i] = __int_as_float(0x7fc00000);
}
__global__ void count_bad_kernel(const float *p, int64_t n, unsigned long long *bad) {
    unsigned long long c = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        c += !isfinite(p[i]);
    if (c) atomicAdd(bad, c);
}

static float *d_q, *d_kc, *d_vc, *d_out;
static qbackend be;
static cuda_state st;
static unsigned long long *d_bad;

/* mode: -1 old kernel, FLASH_BF16, FLASH_SPLIT. One call: rows [row0, row0 + n) at positions row0.. */
static void call(int mode, int row0, int n) {
    if (mode < 0) {
        attention_kernel<float><<<dim3((unsigned)n, NQ), ATT_WARPS * 32, 0, st.stream>>>(d_q, row0, row0, d_kc, d_vc, NQ,
                                                                                      NKV, DIM, SCALE, d_out);
        CK(cudaGetLastError());
    } else {
        OK(cuda_flash_prefill(&be, d_q, row0, n, row0, d_kc, d_vc, QW_F32, NQ, NKV, DIM, SCALE, mode, d_out));
    }
}
/* rows n as calls of at most CHUNK rows (one call when n <= 16384). */
static void run_case(int mode, int n) {
    if (n <= 16384) call(mode, 0, n);
    else
        for (int r = 0; r < n; r += CHUNK) call(mode, r, CHUNK);
}
static double time_case(int mode, int n, int reps) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    run_case(mode, n); /* warm-up */
    std::vector<float> ms;
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(a, st.stream));
        run_case(mode, n);
        CK(cudaEventRecord(b, st.stream));
        CK(cudaEventSynchronize(b));
        float t;
        CK(cudaEventElapsedTime(&t, a, b));
        ms.push_back(t);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}
static int64_t out_elems(int n) { return (int64_t)n * NQ * DIM; }
static void poison(int n) {
    poison_kernel<<<1024, 256, 0, st.stream>>>(d_out, out_elems(n));
    CK(cudaGetLastError());
}
static unsigned long long count_bad(int n) {
    CK(cudaMemsetAsync(d_bad, 0, sizeof *d_bad, st.stream));
    count_bad_kernel<<<1024, 256, 0, st.stream>>>(d_out, out_elems(n), d_bad);
    CK(cudaGetLastError());
    unsigned long long h = 0;
    CK(cudaMemcpyAsync(&h, d_bad, sizeof h, cudaMemcpyDeviceToHost, st.stream));
    CK(cudaStreamSynchronize(st.stream));
    return h;
}
static std::vector<float> download(int64_t off, int64_t n) {
    std::vector<float> h((size_t)n);
    CK(cudaMemcpyAsync(h.data(), d_out + off, (size_t)n * 4, cudaMemcpyDeviceToHost, st.stream));
    CK(cudaStreamSynchronize(st.stream));
    return h;
}
static double rel(const std::vector<float> &x, const std::vector<float> &ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < x.size(); i++) {
        const double d = fabs((double)x[i] - ref[i]);
        if (!(d <= num)) num = d;
        den = std::max(den, fabs((double)ref[i]));
    }
    return den > 0 ? num / den : num;
}
/* float64 reference for one row (position p) and all heads, from the device's inputs. */
static std::vector<float> ref_row(int p) {
    std::vector<float> q((size_t)NQ * DIM), k((size_t)(p + 1) * NKV * DIM), v(k.size()), o((size_t)NQ * DIM);
    CK(cudaMemcpy(q.data(), d_q + (int64_t)p * NQ * DIM, q.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(k.data(), d_kc, k.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(v.data(), d_vc, v.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<double> s((size_t)p + 1);
    for (int h = 0; h < NQ; h++) {
        const int kh = h / (NQ / NKV);
        double m = -INFINITY, l = 0;
        for (int j = 0; j <= p; j++) {
            double d = 0;
            for (int i = 0; i < DIM; i++) d += (double)q[(size_t)h * DIM + i] * k[((size_t)j * NKV + kh) * DIM + i];
            s[j] = d * SCALE;
            m = std::max(m, s[j]);
        }
        std::vector<double> acc(DIM, 0.0);
        for (int j = 0; j <= p; j++) {
            const double e = exp(s[j] - m);
            l += e;
            for (int i = 0; i < DIM; i++) acc[i] += e * v[((size_t)j * NKV + kh) * DIM + i];
        }
        for (int i = 0; i < DIM; i++) o[(size_t)h * DIM + i] = (float)(acc[i] / l);
    }
    return o;
}

int main(void) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("no GPU: skipped\n");
        return 77;
    }
    CK(cudaSetDevice(0));
    CK(cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking));
    be.ops = NULL;
    be.impl = &st;
    const int64_t qn = (int64_t)MAXR * NQ * DIM, kn = (int64_t)MAXR * NKV * DIM;
    CK(cudaMalloc(&d_q, qn * 4));
    CK(cudaMalloc(&d_out, qn * 4));
    CK(cudaMalloc(&d_kc, kn * 4));
    CK(cudaMalloc(&d_vc, kn * 4));
    CK(cudaMalloc(&d_bad, sizeof *d_bad));
    fill_kernel<<<4096, 256, 0, st.stream>>>(d_q, qn, 1);
    fill_kernel<<<4096, 256, 0, st.stream>>>(d_kc, kn, 2);
    fill_kernel<<<4096, 256, 0, st.stream>>>(d_vc, kn, 3);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(st.stream));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# %s, %d SMs; flash supported here: %d (env precision %s)\n", prop.name, prop.multiProcessorCount,
           cuda_flash_supported(NQ, NKV, DIM), cuda_flash_precision() == FLASH_SPLIT ? "split" : "bf16");
    printf("| rows  | kernel | calls | ms/call   | ms total  | TF/s   | err vs ref | bad |\n");
    printf("|-------|--------|-------|-----------|-----------|--------|------------|-----|\n");
    const int sizes[4] = {512, 4096, 16384, 65536}, reps[4] = {20, 7, 5, 3};
    const char *names[3] = {"old", "bf16", "split"};
    int fails = 0;
    for (int si = 0; si < 4; si++) {
        const int n = sizes[si];
        const double avg_keys = (n + 1) / 2.0; /* positions 0..n-1, each sees pos + 1 keys */
        const double flop = 4.0 * n * avg_keys * DIM * NQ;
        std::vector<float> old_out;
        for (int mode = -1; mode <= FLASH_SPLIT; mode++) {
            if (mode < 0 && n > 4096) continue;
            poison(n);
            run_case(mode, n);
            const unsigned long long bad = count_bad(n);
            double err = -1;
            if (n <= 4096) {
                std::vector<float> h = download(0, out_elems(n));
                if (mode < 0) old_out = h;
                else err = rel(h, old_out);
            } else if (n == 65536) {
                err = 0;
                const int rows[2] = {40000, 65535};
                for (int i = 0; i < 2; i++) {
                    std::vector<float> h = download((int64_t)rows[i] * NQ * DIM, NQ * DIM);
                    err = std::max(err, rel(h, ref_row(rows[i])));
                }
            }
            const double ms = time_case(mode, n, reps[si]);
            const int calls = n > 16384 ? n / CHUNK : 1;
            char e[32] = "-";
            if (err >= 0) snprintf(e, sizeof e, "%.2e", err);
            const double bound = mode == FLASH_BF16 ? 2e-2 : 1e-4;
            if (bad || (err >= 0 && !(err <= bound))) fails++;
            printf("| %5d | %-6s | %5d | %9.3f | %9.3f | %6.1f | %10s | %3llu |\n", n, names[mode + 1], calls,
                   ms / calls, ms, flop / (ms * 1e-3) / 1e12, e, bad);
            fflush(stdout);
        }
    }
    printf("# err: vs the old kernel (512, 4096 rows) or float64 on the CPU (65536: rows 40000, 65535)\n");
    printf("# %s\n", fails ? "FAILED" : "all checks passed");
    return fails ? 1 : 0;
}
