/* backend.c: what every backend shares: the byte sizes of weight formats.
 * Invariants: an AFFINE row is n_in*bits/32 whole uint32 words; its scales and biases are
 * n_in/group elements of sb_fmt each. Not here: the ops themselves (cpu/, cuda/). */
#include "backend.h"

size_t qwfmt_elem_bytes(qwfmt f) {
    switch (f) {
    case QW_F32: return 4;
    case QW_F16: return 2;
    case QW_BF16: return 2;
    case QW_AFFINE: return 0; /* sub-byte codes: see qweight_bytes */
    case QW_Q8: return 1;     /* K/V codes (their rows also hold scales: qkv_row_bytes) */
    }
    return 0;
}

int64_t qweight_bytes(const qweight *W) {
    if (!W || W->n_out <= 0 || W->n_in <= 0) return 0;
    if (W->fmt != QW_AFFINE) return W->n_out * W->n_in * (int64_t)qwfmt_elem_bytes(W->fmt);
    if (W->bits <= 0 || W->group <= 0) return 0;
    int64_t words = W->n_in * W->bits / 32;
    int64_t groups = W->n_in / W->group;
    return W->n_out * (words * 4 + 2 * groups * (int64_t)qwfmt_elem_bytes(W->sb_fmt));
}
