/* cuda_flash_prefill.h: causal GQA attention for prompt rows on tensor cores (cuda_flash_prefill.cu).
 * Used by cuda_attention() for seqs with chunked = 1, after their K/V rows are in the caches. */
#ifndef QUILL_CUDA_FLASH_PREFILL_H
#define QUILL_CUDA_FLASH_PREFILL_H

#include "backend/backend.h"

/* Precision of the tensor-core products (env QUILL_PREFILL_PRECISION, read once):
 * FLASH_BF16: q, k, p, v rounded to bf16, f32 accumulation (~1e-2 relative);
 * FLASH_SPLIT: x = bf16(x) + bf16(x - bf16(x)), three products hi*hi + lo*hi + hi*lo (~1e-5). */
enum { FLASH_BF16 = 0, FLASH_SPLIT = 1 };

#ifdef __cplusplus
extern "C" {
#endif

/* The precision QUILL_PREFILL_PRECISION asks for (cu_prefill_precision_bf16: "bf16", else split). */
int cuda_flash_precision(void);

/* Whether the flash kernel handles this shape (dim 64, 128 or 256; n_q / n_kv <= 128). */
int cuda_flash_supported(int n_q, int n_kv, int dim);

/* Rows [row0, row0 + n_rows) of q at positions pos0.. attend to cache positions 0..their own
 * (kc, vc: [ctx] rows of kv_fmt, QW_F32, QW_BF16 or QW_Q8, already holding positions < pos0 + n_rows);
 * out as q. */
qstatus cuda_flash_prefill(qbackend *be, const float *q, int row0, int n_rows, int pos0, const void *kc,
                           const void *vc, qwfmt kv_fmt, int n_q, int n_kv, int dim, float scale, int precision,
                           float *out);

#ifdef __cplusplus
}
#endif

#endif
