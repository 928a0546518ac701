/* stage_host.cpp: the decode matmul's staging of x (cuda_gemv_stage.cuh's gt_stage) run on the CPU, one host thread a
 * CUDA thread of a 256-thread block, warp shuffles through a barrier, so that its index math can be checked where no
 * GPU is (tests/cuda/stage_host.sh builds and runs it; CTest's cuda_stage_host).
 *
 * What it checks, for every input kind (x, gated, normalised, gated norm; split and bf16 x; dequant's scale after
 * the product), row count 1-8 and slice shape:
 * - H = 1 against an independent reference for plain x: every B fragment word and X sum where the layout comment
 *   says it is, and zeros in the rows past n;
 * - H = 2 and 4 (items split over two or four lanes, rows past n not staged) against H = 1: the same bits in every
 *   slot of a row < n (fragments, X sums, the norm's row scales), and the slots of rows past n left as they were.
 * The device's own arithmetic (rsqrtf, expf) differs from the host's, but both H run the same host arithmetic, and
 * the GPU's tests (cuda_test_cuda_matmul) check the bits of every row against many-row launches. */
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

extern "C" {
#include "backend/backend.h" /* qglu */
}
#include "backend/cuda/cuda_gemv_cfg.cuh"

/* CUDA's names, for a host thread standing in for a CUDA thread */
#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
struct uint4 { uint32_t x, y, z, w; };
struct float4 { float x, y, z, w; };
static inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
struct uint3h { unsigned x, y, z; };
static thread_local uint3h threadIdx, blockIdx, blockDim, gridDim;
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max(int64_t a, int64_t b) { return a > b ? a : b; }
template <typename T> static inline T __ldg(const T *p) { return *p; }
template <typename T> static inline T __ldcg(const T *p) { return *p; }
static inline float __fmul_rn(float a, float b) { return a * b; } /* built with -ffp-contract=off */
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
struct __nv_bfloat16 { uint16_t x; };
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { /* round to nearest even; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {(uint16_t)((u >> 16) | 0x40)};
    return {(uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
static inline float __bfloat162float(__nv_bfloat16 h) {
    const uint32_t u = (uint32_t)h.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t cu_pack_bf16x2(float a, float b) {
    return (uint32_t)__float2bfloat16_rn(a).x | (uint32_t)__float2bfloat16_rn(b).x << 16;
}
static inline float silu_f(float x) { return x / (1.0f + expf(-x)); }
static inline float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float glu_act(float g, int act) { return act == QGLU_SILU ? silu_f(g) : sigmoid_f(g); }

/* A block's warps: each shuffle is a write, a barrier, a read and a barrier among the warp's 32 threads. */
struct warp_room {
    std::barrier<> bar{32};
    uint32_t slot[32];
};
static warp_room g_warps[GT_WARPS];
static inline float warp_exchange(float v, unsigned from) {
    warp_room &w = g_warps[threadIdx.x / 32];
    memcpy(&w.slot[threadIdx.x % 32], &v, 4);
    w.bar.arrive_and_wait();
    float r;
    memcpy(&r, &w.slot[from], 4);
    w.bar.arrive_and_wait();
    return r;
}
static inline float __shfl_xor_sync(unsigned, float v, int m) {
    return warp_exchange(v, (threadIdx.x % 32) ^ (unsigned)m);
}
static inline float __shfl_up_sync(unsigned, float v, unsigned d) { /* lanes below d keep their own */
    const unsigned lane = threadIdx.x % 32;
    return warp_exchange(v, lane >= d ? lane - d : lane);
}

/* what the rest of the header names but this test never runs (the bulk copies, the split rows' kernel) */
static inline void cu_pdl_enter() {}
static inline uint32_t cu_smem_addr(const void *) { return 0; }
static inline void wg_fence_proxy_async_global() {}
static inline void wg_bar_expect(uint32_t, uint32_t) {}
static inline void wg_bulk_load(uint32_t, const void *, uint32_t, uint32_t) {}
static inline void wg_bar_wait(uint32_t, int) {}
static inline void __syncwarp() {}

#include "backend/cuda/cuda_gemv_stage.cuh"

typedef gt_cfg<64> C;
static const uint32_t SENTINEL = 0x7fc0dead;

struct shape {
    int in, n, row0, nt, us, u0, U;
    int bf16;
};
struct staged {
    std::vector<uint4> sx;
    std::vector<float> sX, sc;
};

/* The block's threads, made once: each waits at `start`, runs `job` as thread threadIdx.x and waits at `done`. */
static std::barrier<> start_bar(GT_THREADS + 1), done_bar(GT_THREADS + 1);
static std::function<void()> job;
static bool quit;
static void block_thread(int tid) {
    threadIdx = {(unsigned)tid, 0, 0};
    for (;;) {
        start_bar.arrive_and_wait();
        if (quit) return;
        job();
        done_bar.arrive_and_wait();
    }
}

/* Runs gt_stage<64, IN, 4, false, false, H> as one block of GT_THREADS threads. */
template <int IN, int H>
static staged run_block(const shape &s, const float *x, const gt_input &in) {
    staged o;
    o.sx.assign((size_t)s.nt * s.us * C::SXU, make_uint4(SENTINEL, SENTINEL, SENTINEL, SENTINEL));
    o.sX.assign((size_t)s.nt * s.us * 4, 0.0f);
    o.sc.assign(8, 0.0f);
    for (float &f : o.sX) memcpy(&f, &SENTINEL, 4);
    for (float &f : o.sc) memcpy(&f, &SENTINEL, 4);
    const bool after = gt_norm_after<64>(in);
    job = [&] {
        gt_stage<64, IN, 4, false, false, H>(x, in, s.n, (int64_t)s.U * C::UK, s.row0, s.nt, s.u0, s.us, o.sx.data(),
                                             o.sX.data(), (int)threadIdx.x, GT_THREADS, after ? o.sc.data() : nullptr);
    };
    start_bar.arrive_and_wait();
    done_bar.arrive_and_wait();
    return o;
}

static int failures;
static void fail(const shape &s, const char *what, int at) {
    if (++failures <= 20)
        fprintf(stderr, "stage_host: in %d n %d row0 %d nt %d us %d u0 %d bf16 %d: %s at %d\n", s.in, s.n, s.row0, s.nt,
                s.us, s.u0, s.bf16, what, at);
}
static uint32_t word(const uint4 &q, int c) { return c == 0 ? q.x : c == 1 ? q.y : c == 2 ? q.z : q.w; }
static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Fragment word c of (tile T, unit u, k-step pair jp, lane L = (g, t)) from the layout comment alone: column g is row
 * 4T + g/2, hi (g even) or lo (g odd); words {b0, b1} of k-step 2jp then of 2jp + 1, b0 = (e0, e0 + 4), b1 =
 * (e0 + 1, e0 + 5) of the lane's 16 values. */
static uint32_t expect_word(const shape &s, const float *x, int T, int u, int jp, int L, int c) {
    const int g = L / 4, t = L % 4, r = s.row0 + 4 * T + g / 2, part = g % 2;
    if (r >= s.n || (part && s.bf16)) return 0u;
    const int j = 2 * jp + c / 2, e0 = (j & 1) * 2 + (j >> 1) * 8, e = e0 + (c % 2);
    const float *v = x + (int64_t)r * s.U * C::UK + (int64_t)(s.u0 + u) * C::UK + t * C::EPT;
    const auto p = [&](int i) {
        const float hi = __bfloat162float(__float2bfloat16_rn(v[i]));
        return part ? v[i] - hi : hi;
    };
    return cu_pack_bf16x2(p(e), p(e + 4));
}

/* b (H = 2 or 4) against a (H = 1), and a against the layout where `layout` (plain x) */
static void compare(const shape &s, const float *x, const staged &a, const staged &b, bool layout, const char *hn) {
    char what[64];
    for (int T = 0; T < s.nt; T++)
        for (int u = 0; u < s.us; u++) {
            for (int jp = 0; jp < C::KSU / 2; jp++)
                for (int L = 0; L < 32; L++) {
                    const size_t at = ((size_t)(T * s.us + u) * (C::KSU / 2) + jp) * 32 + L;
                    const bool live = s.row0 + 4 * T + L / 8 < s.n;
                    for (int c = 0; c < 4; c++) {
                        const uint32_t wa = word(a.sx[at], c), wb = word(b.sx[at], c);
                        if (layout && wa != expect_word(s, x, T, u, jp, L, c))
                            fail(s, "H = 1 fragment against the layout", (int)at);
                        snprintf(what, sizeof what, live ? "%s fragment" : "%s wrote a dead row", hn);
                        if (live ? wb != wa : wb != SENTINEL) fail(s, what, (int)at);
                    }
                }
            for (int rr = 0; rr < 4; rr++) {
                const size_t at = (size_t)(T * s.us + u) * 4 + rr;
                const bool live = s.row0 + 4 * T + rr < s.n;
                if (!live && a.sX[at] != 0.0f) fail(s, "H = 1 X sum of a dead row", (int)at);
                snprintf(what, sizeof what, live ? "%s X sum" : "%s X sum of a dead row", hn);
                if (live ? bits(b.sX[at]) != bits(a.sX[at]) : bits(b.sX[at]) != SENTINEL) fail(s, what, (int)at);
            }
        }
    for (int r = 0; r < 8; r++)
        if (bits(a.sc[r]) != bits(b.sc[r])) {
            snprintf(what, sizeof what, "%s row scale", hn);
            fail(s, what, r);
        }
}

template <int IN> static void check(const shape &s, std::mt19937 &rng) {
    const int64_t K = (int64_t)s.U * C::UK;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x((size_t)s.n * K), g, ss, nw(K);
    for (float &f : x) f = nd(rng);
    for (float &f : nw) f = 1.0f + 0.1f * nd(rng);
    gt_input in{};
    in.bf16 = s.bf16;
    in.eps = 1e-6f;
    if (IN == GT_IN_GLU || IN == GT_IN_GNORM) {
        /* gated: the attention's output gate (heads of 256, the gates in [query | gate] rows) or, with bf16 x, the
         * MLP's swiglu (the gates in x's shape); the gated norm: vectors of 128 */
        const bool sigmoid = IN == GT_IN_GLU && s.bf16 != 1;
        const int dim = IN == GT_IN_GNORM ? GT_GNORM_DIM : sigmoid ? 256 : (int)K;
        const int64_t stride = sigmoid ? 2 * dim : dim;
        g.resize((size_t)s.n * (K / dim) * stride);
        for (float &f : g) f = nd(rng);
        in.glu.g = g.data() + (sigmoid ? dim : 0), in.glu.g_stride = stride, in.glu.dim = dim;
        in.glu.act = sigmoid ? QGLU_SIGMOID : QGLU_SILU;
        if (IN == GT_IN_GNORM) in.glu.norm_w = nw.data(), in.glu.norm_eps = 1e-6f;
    }
    if (IN == GT_IN_NORM) {
        in.parts = (int)(K / QNORM_PART);
        ss.resize((size_t)s.n * in.parts);
        for (float &f : ss) f = std::fabs(nd(rng)) * 64.0f;
        in.ss = ss.data(), in.nw = nw.data();
    }
    const staged a = run_block<IN, 1>(s, x.data(), in);
    compare(s, x.data(), a, run_block<IN, 2>(s, x.data(), in), IN == GT_IN_X, "H = 2");
    compare(s, x.data(), a, run_block<IN, 4>(s, x.data(), in), false, "H = 4");
}

int main() {
    std::vector<std::thread> threads;
    for (int tid = 0; tid < GT_THREADS; tid++) threads.emplace_back(block_thread, tid);
    std::mt19937 rng(7);
    int cases = 0;
    const int rows[][3] = {{1, 0, 1}, {2, 0, 1}, {3, 0, 1}, {4, 0, 1}, {5, 0, 2}, {7, 0, 2}, {8, 0, 2}, {6, 4, 1}};
    const int slices[][3] = {{2, 0, 4}, {8, 8, 64}, {16, 48, 64}, {24, 168, 192}, {32, 0, 64}};
    for (const auto &rw : rows)
        for (const auto &sl : slices)
            for (int bf16 : {0, 1, GT_DQ})
                for (int in = GT_IN_X; in <= GT_IN_GNORM; in++) {
                    const shape s{in, rw[0], rw[1], rw[2], sl[0], sl[1], sl[2], bf16};
                    if (in == GT_IN_GLU && s.U * C::UK % 256) continue; /* whole vectors of the gate */
                    if (in == GT_IN_X) check<GT_IN_X>(s, rng);
                    if (in == GT_IN_GLU) check<GT_IN_GLU>(s, rng);
                    if (in == GT_IN_NORM) check<GT_IN_NORM>(s, rng);
                    if (in == GT_IN_GNORM) check<GT_IN_GNORM>(s, rng);
                    cases++;
                }
    quit = true;
    start_bar.arrive_and_wait();
    for (std::thread &t : threads) t.join();
    printf("stage_host: %d cases, %d failures\n", cases, failures);
    return failures ? 1 : 0;
}
