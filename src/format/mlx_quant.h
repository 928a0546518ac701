/* mlx_quant.h: MLX affine quantization of one row, as mlx.core.quantize (mode "affine") does it on the
 * CPU (mlx/backend/cpu/quantized.cpp; the golden script's quantizer follows the same one).
 * Per group of `group` values: the group's min and max, scale = (max - min) / (2^bits - 1) at least
 * 1e-7, signed towards the edge of larger magnitude; the edge is snapped to a whole code (scale =
 * edge / rint(edge / scale)) and becomes the bias unless it rounds to code 0; codes =
 * clamp(rint((w - bias) / scale), 0, 2^bits - 1) with rint rounding ties to even, packed as a little-endian bit stream into
 * uint32 words. Dequantized: scale * code + bias, with scale and bias rounded to the stored dtype. */
#ifndef QUILL_MLX_QUANT_H
#define QUILL_MLX_QUANT_H

#include <stdint.h>

/* w: [n_in]; codes: [n_in * bits / 32] (zeroed by the function); scales, biases: [n_in / group]
 * (f32; the caller rounds them to the checkpoint's dtype). n_in % group == 0, n_in*bits % 32 == 0. */
void mlx_quantize_row(const float *w, int64_t n_in, int bits, int group, uint32_t *codes, float *scales,
                      float *biases);

/* Code e of a packed row. */
static inline uint32_t mlx_code_at(const uint32_t *codes, int64_t e, int bits) {
    int64_t bit = e * bits;
    uint64_t v = codes[bit >> 5];
    if ((bit & 31) + bits > 32) v |= (uint64_t)codes[(bit >> 5) + 1] << 32;
    return (uint32_t)(v >> (bit & 31)) & ((1u << bits) - 1u);
}

#endif
