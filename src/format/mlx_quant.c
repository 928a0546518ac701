/* mlx_quant.c: MLX affine quantization of a row (see mlx_quant.h). */
#include "mlx_quant.h"

#include <float.h>
#include <math.h>
#include <string.h>

void mlx_quantize_row(const float *w, int64_t n_in, int bits, int group, uint32_t *codes, float *scales,
                      float *biases) {
    const float n_bins = (float)((1 << bits) - 1);
    memset(codes, 0, (size_t)(n_in * bits / 32) * sizeof *codes);
    for (int64_t g = 0; g < n_in / group; g++) {
        const float *x = w + g * group;
        float lo = FLT_MAX, hi = -FLT_MAX;
        for (int i = 0; i < group; i++) {
            lo = fminf(lo, x[i]);
            hi = fmaxf(hi, x[i]);
        }
        float scale = fmaxf((hi - lo) / n_bins, 1e-7f);
        int side = fabsf(lo) > fabsf(hi);
        if (!side) scale = -scale;
        float edge = side ? lo : hi;
        float q0 = rintf(edge / scale); /* rint: ties to even, as MLX's CPU quantize */
        float bias = 0.0f;
        if (q0 != 0.0f) {
            scale = edge / q0;
            bias = edge;
        }
        scales[g] = scale;
        biases[g] = bias;
        for (int i = 0; i < group; i++) {
            float q = fminf(fmaxf(rintf((x[i] - bias) / scale), 0.0f), n_bins);
            uint32_t code = q > 0.0f ? (uint32_t)q : 0u;
            int64_t bit = (g * group + i) * bits;
            codes[bit >> 5] |= code << (bit & 31);
            if ((bit & 31) + bits > 32) codes[(bit >> 5) + 1] |= code >> (32 - (bit & 31));
        }
    }
}
