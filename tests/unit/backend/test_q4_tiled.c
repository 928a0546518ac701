/* test_q4_tiled.c: the CUDA backend's tile order for 4-bit weights (src/backend/cuda/cuda_q4_tiled.cuh) on the host:
 * its readers (q4t_code_byte, q4t_sb_index) and its layout's inverses (q4t_code_src, q4t_sb_src, what pack_weight's
 * kernels use) undo each other over whole weights, so a weight laid out on the GPU is read back as the checkpoint
 * wrote it; the readers of either order; and which weights the layout takes. The GPU side (the kernels on tiled weights against the CPU) is
 * tests/cuda/test_cuda_ops.c. */
#include <stdlib.h>

#include "backend_test_util.h"
/* the header's functions are host and device code: plain static inline here */
#define __host__
#define __device__
#define __forceinline__ static inline
#include "backend/cuda/cuda_q4_tiled.cuh"

/* Every code byte of rows 0..n-1 (n % 16 == 0) of K codes: tiled place and back, and the places a permutation. */
static void check_codes(int64_t n, int64_t K) {
    const int64_t bytes = n * K / 2;
    unsigned char *seen = calloc((size_t)bytes, 1);
    assert_non_null(seen);
    for (int64_t o = 0; o < n; o++)
        for (int64_t k = 0; k < K; k += 2) {
            const int64_t t = q4t_code_byte(o, k, K);
            assert_true(t >= 0 && t < bytes);
            assert_int_equal(seen[t], 0);
            seen[t] = 1;
            assert_int_equal(q4t_code_src(t, K), o * (K / 2) + k / 2);
            if (k % 8 == 0) assert_int_equal(q4t_code_byte(o, k, K) % 4, 0); /* a row's word stays one word */
        }
    free(seen);
}

static void test_codes_round_trip(void **state) {
    (void)state;
    check_codes(16, 64);
    check_codes(48, 128);
    check_codes(32, 4096);
    /* a warp's unit: rows g and g + 8's bytes 8 t .. 8 t + 7 are lane 4 g + t's 16 bytes */
    for (int g = 0; g < 8; g++)
        for (int t = 0; t < 4; t++)
            for (int b = 0; b < 8; b += 2) {
                assert_int_equal(q4t_code_byte(g, 2 * (8 * t + b), 256), (4 * g + t) * 16 + b);
                assert_int_equal(q4t_code_byte(g + 8, 2 * (8 * t + b), 256), (4 * g + t) * 16 + 8 + b);
                assert_int_equal(q4t_code_byte(16 + g, 64 + 2 * (8 * t + b), 256),
                                 4 * 512 + 512 + (4 * g + t) * 16 + b); /* group 1 (4 units of 512), unit 1 */
            }
}

static void test_scales_round_trip(void **state) {
    (void)state;
    const int64_t gprs[] = {1, 2, 32, 64};
    for (size_t c = 0; c < sizeof gprs / sizeof gprs[0]; c++) {
        const int64_t gpr = gprs[c], n = 48, total = n * gpr;
        unsigned char *seen = calloc((size_t)total, 1);
        assert_non_null(seen);
        for (int64_t o = 0; o < n; o++)
            for (int64_t gi = 0; gi < gpr; gi++) {
                const int64_t t = q4t_sb_index(o, gi, gpr);
                assert_true(t >= 0 && t < total);
                assert_int_equal(seen[t], 0);
                seen[t] = 1;
                assert_int_equal(q4t_sb_src(t, gpr), o * gpr + gi);
                if (o % 16 < 8) { /* lane 4 g + t's pair for rows g and g + 8 of group G: one word, where gt_locate
                                   * and gt_sload read it */
                    assert_int_equal(t, (o / 16) * 16 * gpr + gi * 16 + (o % 8) * 2);
                    assert_int_equal(q4t_sb_index(o + 8, gi, gpr), t + 1);
                }
            }
        free(seen);
    }
}

/* The either-order readers: the tiled ones, or the checkpoint's row-major places. */
static void test_either_order(void **state) {
    (void)state;
    const int64_t K = 256, gpr = K / 64;
    for (int64_t o = 0; o < 32; o++)
        for (int64_t k = 0; k < K; k += 2) {
            assert_int_equal(q4_code_byte_at(1, o, k, K), q4t_code_byte(o, k, K));
            assert_int_equal(q4_code_byte_at(0, o, k, K), o * (K / 2) + k / 2);
            assert_int_equal(q4_sb_at(1, o, k / 64, gpr), q4t_sb_index(o, k / 64, gpr));
            assert_int_equal(q4_sb_at(0, o, k / 64, gpr), o * gpr + k / 64);
        }
}

static void test_rows_and_eligible(void **state) {
    (void)state;
    assert_int_equal(q4t_rows(1), 16);
    assert_int_equal(q4t_rows(16), 16);
    assert_int_equal(q4t_rows(1000), 1008);
    static uint32_t words[64], sb[64]; /* 16-byte aligned enough for the checks: only the addresses are read */
    qweight W = {QW_AFFINE, 4, 128, words, sb, sb, QW_BF16, 4, 64, 0, 0};
    W.w = (void *)(((uintptr_t)words + 15) & ~(uintptr_t)15);
    assert_true(q4t_eligible(&W));
    W.group = 32;
    assert_false(q4t_eligible(&W)); /* the tensor-core kernels' groups only */
    W.group = 128;
    assert_true(q4t_eligible(&W));
    W.sb_fmt = QW_F16;
    assert_false(q4t_eligible(&W));
    W.sb_fmt = QW_BF16, W.bits = 8;
    assert_false(q4t_eligible(&W));
    W.bits = 4, W.fmt = QW_BF16;
    assert_false(q4t_eligible(&W));
}

/* The prompt GEMM's stage reads (q4t_stage_piece): plain, each piece where the tiles put it in a stage; swizzled,
 * where TMA's 128-byte swizzle moves it (modelled here on the whole address: bits 4..6 xor bits 7..9, the pattern
 * the bf16 GEMM's wgmma descriptors read). And what the swizzle is for: a warp's load (lanes 4 i .. 4 i + 3 share
 * rows lo = 16 w + i, i < 8) takes its 8 pieces from 8 different 16-byte bank groups, where the plain stage has 2. */
static uint32_t tma_swizzle128(uint32_t a) { return a ^ (((a >> 7) & 7) << 4); }
static void test_stage_pieces(void **state) {
    (void)state;
    for (uint32_t qt = 0; qt < 4 * 1024; qt += 1024)
        for (int lo = 0; lo < 128; lo++) {
            if (lo & 8) continue; /* rows lo + 8 ride with lo */
            for (int j = 0; j < 4; j++) {
                const uint32_t plain = qt + (uint32_t)(lo >> 4) * 512 + (uint32_t)(lo & 7) * 64 + 16 * (uint32_t)j;
                assert_int_equal(q4t_stage_piece(qt, lo, j, 0), plain);
                assert_int_equal(q4t_stage_piece(qt, lo, j, 1), tma_swizzle128(plain));
            }
        }
    for (int w = 0; w < 8; w++)
        for (int j = 0; j < 4; j++)
            for (int sw = 0; sw < 2; sw++) {
                unsigned groups = 0;
                for (int i = 0; i < 8; i++) groups |= 1u << ((q4t_stage_piece(0, 16 * w + i, j, sw) % 128) / 16);
                assert_int_equal(__builtin_popcount(groups), sw ? 8 : 2);
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codes_round_trip),
        cmocka_unit_test(test_scales_round_trip),
        cmocka_unit_test(test_either_order),
        cmocka_unit_test(test_rows_and_eligible),
        cmocka_unit_test(test_stage_pieces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
