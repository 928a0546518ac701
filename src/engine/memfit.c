/* memfit.c: the startup fit (memfit.h). Pure arithmetic plus two probes (free memory, checkpoint
 * bytes). Invariants: (1) need is the sum of the printed terms, so the table adds up; (2) max_ctx and
 * max_parallel are found by the same function that decides `fits`, so the advice never disagrees
 * with the verdict. Not here: refusing to start (the server), the budget's enforcement (engine.c). */
#include "memfit.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../format/safetensors.h"
#include "../model/qwen35.h"
#ifdef QUILL_HAVE_CUDA
#include "../backend/cuda/cuda_backend.h"
#include "../backend/cuda/cuda_device.h"
#endif

#define GIB ((int64_t)1 << 30)

/* Reads "Key:   N kB" from /proc/meminfo. */
static qstatus meminfo(const char *key, int64_t *out) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return q_fail(Q_EIO, "memory fit: cannot open /proc/meminfo");
    char line[256];
    size_t klen = strlen(key);
    qstatus st = q_fail(Q_EIO, "memory fit: /proc/meminfo has no %s", key);
    while (fgets(line, sizeof line, f)) {
        long long kb = 0;
        if (!strncmp(line, key, klen) && line[klen] == ':' && sscanf(line + klen + 1, "%lld", &kb) == 1) {
            *out = (int64_t)kb * 1024;
            st = Q_OK;
            break;
        }
    }
    fclose(f);
    return st;
}

qstatus memfit_device_memory(const char *backend, int device, int64_t *free_bytes, int64_t *total_bytes,
                             const char **source) {
    if (!backend || !strcmp(backend, "cpu")) {
        Q_TRY(meminfo("MemAvailable", free_bytes));
        Q_TRY(meminfo("MemTotal", total_bytes));
        *source = "MemAvailable (/proc/meminfo)";
        return Q_OK;
    }
    if (strcmp(backend, "cuda") != 0) return q_fail(Q_EINVAL, "memory fit: unknown backend '%s'", backend);
#ifdef QUILL_HAVE_CUDA
    cuda_device_info info;
    char err[256];
    if (cuda_device_query(device, &info, err, sizeof err) != 0) return q_fail(Q_ECUDA, "memory fit: %s", err);
    *free_bytes = (int64_t)info.free_bytes;
    *total_bytes = (int64_t)info.total_bytes;
    *source = "cudaMemGetInfo";
    return Q_OK;
#else
    (void)device;
    return q_fail(Q_EUNSUPPORTED, "memory fit: this build has no CUDA backend");
#endif
}

static int skipped(const char *name) {
    return strstr(name, "visual.") || strstr(name, "vision_tower") || !strncmp(name, "mtp.", 4) ||
           strstr(name, ".mtp.");
}

qstatus memfit_weights_bytes(const char *dir, const char *backend, int64_t *out, int64_t *sketch) {
    st_set *set = NULL;
    Q_TRY(st_open_dir(dir, &set));
    int64_t sum = 0;
    const st_tensor *head = NULL, *embed = NULL;
    for (int i = 0; i < st_count(set); i++) {
        const st_tensor *t = st_at(set, i);
        if (skipped(t->name)) continue;
        sum += (int64_t)t->n_bytes;
        if (st_name_ends(t->name, "lm_head.weight")) head = t;
        if (st_name_ends(t->name, "embed_tokens.weight")) embed = t;
    }
    if (!head) head = embed; /* tied */
    int64_t sk = 0;
    if (backend && !strcmp(backend, "cuda") && head && head->dtype == ST_BF16 && head->n_dims == 2)
        sk = qwen35_head_sketch_bytes(head->shape[0], head->shape[1]);
    sum += sk;
    if (sketch) *sketch = sk;
    st_close(set);
    *out = sum;
    return Q_OK;
}

int memfit_dequant_copies(const qwen35_config *cfg, const char *backend) {
    const qquant_config *q = &cfg->quant;
    if (!q->enabled) return 0;
    int folds = backend && !strcmp(backend, "cuda");
    /* the fold takes K (the projections' inputs) in tiles of 64 */
    const int64_t ks[] = {cfg->hidden, cfg->intermediate, (int64_t)cfg->lin_n_v_heads * cfg->lin_v_dim,
                          (int64_t)cfg->n_heads * cfg->head_dim};
    for (int i = 0; i < 4; i++) folds = folds && ks[i] % 64 == 0;
#ifdef QUILL_HAVE_CUDA
    folds = folds && cuda_prefill_folds(q->bits, q->group);
    for (int i = 0; folds && i < q->n_overrides; i++)
        if (!q->overrides[i].disabled) folds = cuda_prefill_folds(q->overrides[i].bits, q->overrides[i].group);
#else
    folds = 0;
#endif
    return !folds;
}

/* What CUDA's kernels hold besides the model's scratch, as upper bounds (counted on every backend, as
 * the attention partials above): the prefill GEMM's bf16 hi/lo copies of a chunk's activations and, where
 * `copies`, of the largest call's 4-bit weights dequantized (cuda_gemm.cu) and its 32 MiB cuBLASLt workspace; the chunked
 * gated delta rule's window (cuda_gdn_chunked.cu, 128 MiB); the decode matmul's split-K partials (at
 * most 16 slices of n_parallel rows of the widest non-head matrix, or the head's slices of the output
 * rows, one buffer for both; the head's slices are short enough that 4 tiles of staged bf16 rows fit
 * 100 KB, K/32 units over S <= 50, so S = 4 at hidden 4096: cuda_gemv_plan.cuh gemv_tc_split) and its
 * rows split for more than 4 rows (~4 bytes per row and input). Growing buffers keep 1.5x headroom. */
static int64_t cuda_kernel_scratch(const qwen35_config *c, int n_parallel, int chunk, int copies) {
    int64_t wide = c->intermediate, k_max = c->intermediate > c->hidden ? c->intermediate : c->hidden;
    const int64_t q = 2LL * c->n_heads * c->head_dim;
    const int64_t qkv = qwen35_conv_dim(c);
    if (q > wide) wide = q;
    if (qkv > wide) wide = qkv;
    /* the prompt GEMM dequantizes a call's weights side by side: the largest call is MLP gate + up, the GDN
     * in-projections (q, k, v, z, a, b) or attention's q, k, v (backend/cuda/cuda_gemm.cu, wg_prefill) */
    const int64_t zdim = (int64_t)c->lin_n_v_heads * c->lin_v_dim, kv = 2LL * c->n_kv_heads * c->head_dim;
    int64_t group = 2LL * c->intermediate;
    if (qkv + zdim + 2LL * c->lin_n_v_heads > group) group = qkv + zdim + 2LL * c->lin_n_v_heads;
    if (q + kv > group) group = q + kv;
    const int64_t deq = copies ? 4 * group * c->hidden : 0;
    const int64_t gemm = (4 * (int64_t)chunk * k_max + deq) * 3 / 2 + ((int64_t)32 << 20);
    const int64_t gdn = ((int64_t)128 << 20) * 3 / 2;
    int64_t head_s = 1;
    while (head_s < 16 && (c->hidden / 32 + head_s - 1) / head_s > 50) head_s *= 2;
    const int64_t out_rows = n_parallel + 1; /* the decode rows and a prompt's last row */
    const int64_t part_body = 16LL * n_parallel * wide, part_head = head_s * out_rows * c->vocab_size;
    const int64_t part = part_body > part_head ? part_body : part_head; /* one buffer, the largest call's */
    const int64_t gemv = (part * 4 + (out_rows + 3) * k_max * 4 + (out_rows + 3) * k_max / 16) * 3 / 2;
    return gemm + gdn + gemv;
}

/* The bytes n_ctx x n_parallel need with every other term of p fixed. */
static int64_t need_for(const qwen35_config *cfg, int64_t weights, const qmemfit_params *p, int n_ctx,
                        int n_parallel, int64_t *gdn, int64_t *scratch, int64_t *kv_rows, int64_t *pc) {
    *gdn = (int64_t)n_parallel * qwen35_gdn_state_bytes(cfg);
    *scratch = qwen35_scratch_bytes(cfg, n_parallel + (p->prefill_chunk > 0 ? p->prefill_chunk : 512));
    /* CUDA's split decode attention keeps (max, sum, output) per decode row, head and 256-position
     * range (ATT_SPLIT), grown with 1.5x headroom (backend/cuda/cuda_attention.cu); counted on every backend */
    *scratch += (int64_t)n_parallel * (n_ctx / 256 + 1) * cfg->n_heads * (cfg->head_dim + 2) * 4 * 3 / 2;
    const int chunk = p->prefill_chunk > 0 ? p->prefill_chunk : 512;
    *scratch += cuda_kernel_scratch(cfg, n_parallel, chunk, !p->no_dequant_copies);
    *kv_rows = (int64_t)n_parallel * n_ctx; /* admission never lets the slots hold more */
    if (p->kv_budget_rows > 0 && p->kv_budget_rows < *kv_rows) *kv_rows = p->kv_budget_rows;
    *pc = p->prompt_cache_gib > 0 ? (int64_t)(p->prompt_cache_gib * (double)GIB) : 0;
    return weights + *gdn + *scratch + *kv_rows * qwen35_kv_bytes_per_token(cfg) + *pc;
}

void memfit_compute(const qwen35_config *cfg, int64_t weights_bytes, const qmemfit_params *p,
                    int64_t free_bytes, int64_t total_bytes, const char *source, qmemfit *f) {
    memset(f, 0, sizeof *f);
    int64_t gdn, scratch, kv_rows, pc;
    f->weights = weights_bytes;
    f->need = need_for(cfg, weights_bytes, p, p->n_ctx, p->n_parallel, &gdn, &scratch, &kv_rows, &pc);
    f->gdn_per_slot = qwen35_gdn_state_bytes(cfg);
    f->gdn = gdn;
    f->scratch = scratch;
    f->kv_per_row = qwen35_kv_bytes_per_token(cfg);
    f->kv_budget_rows = kv_rows;
    f->kv = kv_rows * f->kv_per_row;
    f->prompt_cache = pc;
    f->free = free_bytes;
    f->total = total_bytes;
    f->source = source ? source : "?";
    if (p->reserve_gib >= 0) f->reserve = (int64_t)(p->reserve_gib * (double)GIB);
    else f->reserve = total_bytes / 10 > 2 * GIB ? total_bytes / 10 : 2 * GIB;
    f->usable = free_bytes > f->reserve ? free_bytes - f->reserve : 0;
    f->fits = f->need <= f->usable;
    /* The advice is for the default budget (n_parallel * n_ctx rows), the one --context and
     * --parallel move; need_for is monotonic in both, so bisect on it. */
    qmemfit_params d = *p;
    d.kv_budget_rows = 0;
    int lo = 0, hi = 1 << 24;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (need_for(cfg, weights_bytes, &d, mid, p->n_parallel, &gdn, &scratch, &kv_rows, &pc) <= f->usable) lo = mid;
        else hi = mid - 1;
    }
    f->max_ctx = lo >= 256 ? lo / 256 * 256 : lo / 16 * 16;
    lo = 0, hi = 1 << 16;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (need_for(cfg, weights_bytes, &d, p->n_ctx, mid, &gdn, &scratch, &kv_rows, &pc) <= f->usable) lo = mid;
        else hi = mid - 1;
    }
    f->max_parallel = lo;
}

static void add(char *buf, size_t cap, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void add(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf && *len < cap ? buf + *len : NULL, buf && *len < cap ? cap - *len : 0, fmt, ap);
    va_end(ap);
    if (n > 0) *len += (size_t)n;
}

static double gib(int64_t b) { return (double)b / (double)GIB; }

size_t memfit_table(const qmemfit *f, const qmemfit_params *p, char *buf, size_t cap) {
    size_t len = 0;
    if (buf && cap) buf[0] = '\0';
    add(buf, cap, &len, "memory fit (--context %d, --parallel %d)\n", p->n_ctx, p->n_parallel);
    char label[96];
    const int rows = p->n_parallel + (p->prefill_chunk > 0 ? p->prefill_chunk : 512);
    add(buf, cap, &len, "  %-44s %10.3f GiB\n", "weights", gib(f->weights));
    snprintf(label, sizeof label, "GDN states (%d x %.3f MiB)", p->n_parallel, (double)f->gdn_per_slot / (1 << 20));
    add(buf, cap, &len, "  %-44s %10.3f GiB\n", label, gib(f->gdn));
    snprintf(label, sizeof label, "scratch (%d-row rounds)", rows);
    add(buf, cap, &len, "  %-44s %10.3f GiB\n", label, gib(f->scratch));
    snprintf(label, sizeof label, "K/V budget (%lld rows x %.1f KiB)", (long long)f->kv_budget_rows,
             (double)f->kv_per_row / 1024);
    add(buf, cap, &len, "  %-44s %10.3f GiB\n", label, gib(f->kv));
    add(buf, cap, &len, "  %-44s %10.3f GiB\n", "prompt cache", gib(f->prompt_cache));
    add(buf, cap, &len, "  %-44s %10.3f GiB\n", "needed", gib(f->need));
    add(buf, cap, &len, "  free (%s) %.3f GiB of %.3f GiB, less reserve %.3f GiB = usable %.3f GiB\n",
        f->source, gib(f->free), gib(f->total), gib(f->reserve), gib(f->usable));
    if (f->fits) {
        add(buf, cap, &len, "  fits, %.3f GiB to spare\n", gib(f->usable - f->need));
    } else {
        add(buf, cap, &len, "  DOES NOT FIT: %.3f GiB short\n", gib(f->need - f->usable));
        if (f->max_ctx > 0) add(buf, cap, &len, "  largest --context at --parallel %d: %d\n", p->n_parallel, f->max_ctx);
        else add(buf, cap, &len, "  no --context fits at --parallel %d\n", p->n_parallel);
        if (f->max_parallel > 0) add(buf, cap, &len, "  largest --parallel at --context %d: %d\n", p->n_ctx, f->max_parallel);
        else add(buf, cap, &len, "  no --parallel fits at --context %d\n", p->n_ctx);
    }
    return len;
}
