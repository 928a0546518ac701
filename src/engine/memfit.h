/* memfit.h: the startup fit (issue 6 item 1). Before loading, the server adds up what it will hold:
 *
 *   weights + per-slot fixed state (GDN conv + recurrent) x parallel + activation scratch
 *   + K/V budget (rows x bytes per row) + prompt cache
 *
 * and compares it with the free memory of the device it will run on (CPU backend: MemAvailable from
 * /proc/meminfo; CUDA: cudaMemGetInfo) less a reserve (default max(10 % of the device's total,
 * 2 GiB)). If it does not fit, it refuses to start and prints memfit_table: the arithmetic and the
 * largest --context (at this --parallel) and --parallel (at this --context) that would fit.
 * `quill inspect MODEL_DIR --context C --parallel N` prints the same table without loading.
 * K/V counts the budget, not what grow-as-used holds at first: the budget is what admission lets the
 * streams reach (engine.c), so a server that starts can never run out of K/V mid-reply.
 * Not counted (small, listed so nobody assumes otherwise): CUDA's per-region rounding of K/V to the
 * 2 MiB granule (2 x attention layers x parallel granules at most), the CUDA context itself, the
 * CPU backend's per-thread scratch. */
#ifndef QUILL_MEMFIT_H
#define QUILL_MEMFIT_H

#include <stddef.h>
#include <stdint.h>

#include "../format/config.h"
#include "../util/status.h"

typedef struct qmemfit_params {
    int n_ctx, n_parallel;
    int prefill_chunk;         /* rows of the largest round beyond the decode rows (scratch) */
    int64_t kv_budget_rows;    /* 0: n_parallel * n_ctx (the engine's default) */
    double prompt_cache_gib;   /* --prompt-cache-gib */
    double reserve_gib;        /* --memory-reserve-gib; < 0: the default max(10 % of total, 2 GiB) */
    int no_dequant_copies;     /* 1: the prompt GEMM writes no dequantized weights (memfit_dequant_copies) */
} qmemfit_params;

typedef struct qmemfit {
    /* what it would hold, bytes */
    int64_t weights, gdn_per_slot, gdn, scratch, kv_per_row, kv_budget_rows, kv, prompt_cache, need;
    /* what there is, bytes */
    int64_t free, total, reserve, usable; /* usable = free - reserve (>= 0) */
    const char *source;   /* where free/total came from; static */
    int fits;             /* need <= usable */
    /* with the default budget (n_parallel * n_ctx rows): */
    int max_ctx;          /* largest context (multiple of 256, or of 16 below 256) fitting at n_parallel; 0 none */
    int max_parallel;     /* largest parallel fitting at n_ctx; 0 none */
} qmemfit;

/* Free and total memory of the device a backend named `backend` ("cpu" or "cuda"; NULL: "cpu") uses
 * (CUDA: device `device`). Q_EIO / Q_ECUDA / Q_EUNSUPPORTED (a CUDA-less build) naming the source. */
qstatus memfit_device_memory(const char *backend, int device, int64_t *free_bytes, int64_t *total_bytes,
                             const char **source);

/* Bytes the text model's tensors take in the checkpoint at dir (vision, mtp skipped): what the
 * backend will hold, give or take the few norm vectors converted to f32; on "cuda", with the sketch of a bf16
 * lm_head (qwen35_head_sketch_bytes), which *sketch (may be NULL) gets alone. */
qstatus memfit_weights_bytes(const char *dir, const char *backend, int64_t *out, int64_t *sketch);

/* Whether the prompt GEMM will write a call's 4-bit weights dequantized (two bf16 parts, 4 bytes a weight: a scratch
 * term of the fit): 0 for a checkpoint with no quantized module, and on "cuda" where every quantized module is 4-bit
 * in a group the device's prompt GEMM takes from the codes (cuda_prefill_folds: Hopper's fold, the default there);
 * else 1 (the other backends count CUDA's kernel scratch as an upper bound). */
int memfit_dequant_copies(const qwen35_config *cfg, const char *backend);

/* Does the arithmetic; never fails (bad figures just do not fit). */
void memfit_compute(const qwen35_config *cfg, int64_t weights_bytes, const qmemfit_params *p,
                    int64_t free_bytes, int64_t total_bytes, const char *source, qmemfit *out);

/* Renders the table (one line per term, the verdict, and when it does not fit the largest --context
 * and --parallel that would). Returns the length it needs, like snprintf (writes at most cap bytes). */
size_t memfit_table(const qmemfit *f, const qmemfit_params *p, char *buf, size_t cap);

#endif
