/* cuda_backend.h: the CUDA implementation of backend.h's op interface. */
#ifndef QUILL_CUDA_BACKEND_H
#define QUILL_CUDA_BACKEND_H

#include <stdio.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates a backend on GPU `device` with its own stream. Owned; free with be->ops->destroy.
 * Fails with Q_ECUDA naming the call when there is no usable GPU. */
qstatus cuda_backend_create(int device, qbackend **out);

/* cuda_q4_tiled.cu: backend.h's pack_weight: an eligible 4-bit affine weight (q4t_eligible) laid out in tiles. */
qstatus cuda_pack_weight(qbackend *be, qweight *W, size_t *grown);

/* cuda_gemm.cu: whether the prompt GEMM on the current device takes 4-bit affine weights of this group from their
 * codes (no dequantized copy of them is made): for the memory fit. */
int cuda_prefill_folds(int bits, int group);

/* cuda_profile.cu: per-op GPU time (CUDA events around every op) for `quill bench --profile`.
 * enable swaps be->ops for a timed copy; reset forgets what was measured (after a warm-up); report
 * prints the table, times divided by `units` (decode steps, prefills). */
qstatus cuda_profile_enable(qbackend *be);
void cuda_profile_reset(void);
void cuda_profile_report(FILE *f, const char *unit, int units);

/* cuda_head.cu: the candidates the last head_argmax on this sketch took from their rows (may pass the cap, then it
 * answered -1); synchronises. For tests/cuda/bench_head.cu. */
qstatus cuda_head_sketch_candidates(qbackend *be, const void *sketch, unsigned *n);

/* cuda_vm.cu: backend.h vm_* through the driver's virtual memory management (cuMemAddressReserve,
 * cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap). */
qstatus cuda_vm_reserve(qbackend *be, size_t bytes, void **base, size_t *granule);
qstatus cuda_vm_map(qbackend *be, void *base, size_t from, size_t to);
qstatus cuda_vm_unmap(qbackend *be, void *base, size_t from, size_t to);
void cuda_vm_release(qbackend *be, void *base, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
