/* cuda_rope.cuh: the pieces of partial NeoX RoPE that rope_kernel (cuda_attention.cu) and the fused q/k norm
 * + rope kernel (cuda_norm.cu) share, so the two give the same bits: the inverse frequencies as HF forms
 * them (host), the angle and its sine and cosine, and the rotation of a pair with each product rounded on its
 * own (no fma contraction, which the compiler could choose differently in the two kernels; the CPU twin rounds
 * the same way). */
#ifndef QUILL_CUDA_ROPE_CUH
#define QUILL_CUDA_ROPE_CUH

#include <math.h>

#define ROPE_MAX_PAIRS 128

typedef struct rope_freqs { float inv[ROPE_MAX_PAIRS]; } rope_freqs;

/* inv[j] = 1 / theta^(2j / rot_dim), the exponent rounded to f32 first (as HF and the CPU twin). */
static inline rope_freqs rope_freqs_make(float theta, int rot_dim) {
    rope_freqs f;
    for (int j = 0; j < rot_dim / 2 && j < ROPE_MAX_PAIRS; j++) {
        const float e = (float)(2 * j) / (float)rot_dim;
        f.inv[j] = 1.0f / (float)pow((double)theta, (double)e);
    }
    return f;
}

/* The pair (x1, x2) of pair index j at position p, rotated: x1' = x1 c - x2 s, x2' = x2 c + x1 s. */
__device__ __forceinline__ void rope_rotate(float &x1, float &x2, float p, const rope_freqs &f, int j) {
    float s, c;
    sincosf(p * f.inv[j], &s, &c); /* the angle rounds to f32 first, as torch computes it */
    const float a = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)), b = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
    x1 = a, x2 = b;
}

#endif
