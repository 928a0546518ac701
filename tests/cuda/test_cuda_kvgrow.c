/* test_cuda_kvgrow.c: grow-as-used K/V on the GPU (backend/cuda/cuda_vm.cu, engine/kvmem.c), the CUDA
 * half of tests/unit/engine/test_kvgrow.c and test_kvmem.c. Skips (exit 77) without a GPU; written
 * without one (CI compiles it), to be run on the GPU machine:
 *   cmake --build build-cuda --target cuda_test_cuda_kvgrow && build-cuda/cuda_test_cuda_kvgrow
 * 1. vm ops: reserve, map two extents, data written through the first survives mapping the second,
 *    one kernel (add) runs across the extent boundary, cudaMemGetInfo moves by the bytes mapped and
 *    back after unmapping;
 * 2. kvmem on the GPU: growth, a forced failure in the middle of the regions (undone), give-back;
 * 3. EXACT(grow) through the CUDA backend: the engine's tokens with kv_grow 0 and 1024 are equal,
 *    with a 9000-token prompt so the slot maps more than one 2 MiB granule per region. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device.h"
#include "engine/engine.h"
#include "engine/kvmem.h"
#include "util/hash.h"
#include "test_alloc.h"

static int n_fail;
#define CHECK(cond)                                                         \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "FAIL %s:%d: %s (%s)\n", __FILE__, __LINE__, #cond, q_lasterr()); \
            n_fail++;                                                       \
        }                                                                   \
    } while (0)

static int64_t free_bytes(void) {
    cuda_device_info info;
    char err[256];
    return cuda_device_query(0, &info, err, sizeof err) == 0 ? (int64_t)info.free_bytes : -1;
}

static void vm_ops(qbackend *gpu) {
    void *base = NULL;
    size_t g = 0;
    CHECK(gpu->ops->vm_reserve(gpu, (size_t)64 << 20, &base, &g) == Q_OK);
    if (!base) return;
    printf("granule %zu bytes\n", g);
    int64_t f0 = free_bytes();
    CHECK(gpu->ops->vm_map(gpu, base, 0, 2 * g) == Q_OK);
    size_t n = 2 * g / sizeof(float);
    float *h = xmalloc(4 * g), *hv = xmalloc(2 * g), *ones = NULL;
    for (size_t i = 0; i < n; i++) h[i] = (float)(i % 1000);
    CHECK(gpu->ops->upload(gpu, base, h, 2 * g) == Q_OK);
    CHECK(gpu->ops->vm_map(gpu, base, 2 * g, 4 * g) == Q_OK);
    int64_t f1 = free_bytes();
    printf("free %lld -> %lld after mapping %zu\n", (long long)f0, (long long)f1, 4 * g);
    CHECK(f0 - f1 >= (int64_t)(4 * g));
    CHECK(gpu->ops->alloc(gpu, 2 * g, (void **)&ones) == Q_OK);
    for (size_t i = 0; i < n; i++) hv[i] = 1.0f;
    CHECK(gpu->ops->upload(gpu, ones, hv, 2 * g) == Q_OK);
    CHECK(gpu->ops->zero(gpu, (char *)base + 2 * g, 2 * g) == Q_OK);
    CHECK(gpu->ops->add(gpu, (float *)((char *)base + g), ones, (int64_t)n) == Q_OK); /* across the boundary */
    CHECK(gpu->ops->download(gpu, h, base, 4 * g) == Q_OK);
    int bad = 0;
    for (size_t i = 0; i < 2 * n; i++) {
        float want = i < n ? (float)(i % 1000) : 0.0f;
        if (i >= n / 2 && i < n / 2 + n) want += 1.0f;
        bad += h[i] != want;
    }
    CHECK(bad == 0);
    CHECK(gpu->ops->vm_unmap(gpu, base, 2 * g, 4 * g) == Q_OK);
    CHECK(gpu->ops->vm_unmap(gpu, base, 0, 2 * g) == Q_OK);
    gpu->ops->free(gpu, ones);
    int64_t f2 = free_bytes();
    printf("free after unmapping: %lld\n", (long long)f2);
    CHECK(f2 >= f0 - (int64_t)g); /* back (allowing for the runtime's own pools) */
    gpu->ops->vm_release(gpu, base, (size_t)64 << 20);
    free(h);
    free(hv);
}

static void kvmem_gpu(qbackend *gpu) {
    kvmem k;
    const size_t row = 64 << 10; /* 32 rows per 2 MiB granule */
    CHECK(kvmem_init(&k, gpu, 4, row, 1024, 16) == Q_OK);
    if (!k.base) return;
    CHECK(kvmem_mapped_bytes(&k) == 4 * (int64_t)k.granule);
    CHECK(kvmem_resize(&k, 100) == Q_OK);
    CHECK(k.rows == 100 && kvmem_check(&k));
    kvmem_test_fail_after(2);
    CHECK(kvmem_resize(&k, 500) == Q_ENOMEM);
    CHECK(k.rows == 100 && kvmem_check(&k));
    kvmem_test_fail_after(-1);
    CHECK(kvmem_resize(&k, 1024) == Q_OK);
    CHECK(kvmem_resize(&k, 16) == Q_OK);
    CHECK(k.n_ext == 1 && kvmem_mapped_bytes(&k) == 4 * (int64_t)k.granule);
    kvmem_fini(&k);
}

static uint64_t engine_hash(qwen35_model *m, int kv_grow, const int32_t *prompt, int n_prompt) {
    qengine_params p = engine_params_default();
    p.n_parallel = 2;
    p.n_ctx = 16384;
    p.kv_grow = kv_grow;
    qengine *eng = NULL;
    if (engine_create(m, &p, &eng) != Q_OK) {
        CHECK(0);
        return 0;
    }
    qreq_params rp = {.prompt = prompt, .n_prompt = n_prompt, .max_tokens = 24, .ignore_eos = 1,
                      .sampling = qsampling_default()};
    qreq *r = NULL;
    CHECK(engine_submit(eng, &rp, &r) == Q_OK);
    int32_t got[24];
    int n = 0;
    qfinish fin = QFINISH_NONE;
    while (r && fin == QFINISH_NONE) n += engine_next(r, n, got + n, 24 - n, 60000, &fin);
    CHECK(fin == QFINISH_LENGTH && n == 24);
    qengine_memory mem;
    engine_get_memory(eng, &mem, NULL, NULL, 0);
    printf("kv_grow %d: K/V peak %lld bytes\n", kv_grow, (long long)mem.kv_peak_bytes);
    engine_release(r);
    engine_destroy(eng);
    return q_hash_tokens(got, (size_t)n);
}

int main(void) {
    if (cuda_device_count() == 0) {
        printf("no GPU: skipped\n");
        return 77;
    }
    qbackend *gpu = NULL;
    if (cuda_backend_create(0, &gpu) != Q_OK) {
        fprintf(stderr, "%s\n", q_lasterr());
        return 1;
    }
    vm_ops(gpu);
    kvmem_gpu(gpu);
    qwen35_model *m = NULL;
    if (qwen35_open(QUILL_SOURCE_DIR "/tests/fixtures/models/gqa4-v2k", gpu, &m) != Q_OK) {
        fprintf(stderr, "%s\n", q_lasterr());
        return 1;
    }
    enum { N = 9000 };
    int32_t *prompt = xmalloc(N * sizeof *prompt);
    unsigned s = 7;
    for (int i = 0; i < N; i++) {
        s = s * 1103515245u + 12345u;
        prompt[i] = (int32_t)((s >> 8) % (unsigned)m->cfg.vocab_size);
    }
    uint64_t a = engine_hash(m, 0, prompt, N), b = engine_hash(m, 1024, prompt, N);
    printf("tokens: no grow %016llx, grow 1024 %016llx\n", (unsigned long long)a, (unsigned long long)b);
    CHECK(a == b);
    free(prompt);
    qwen35_close(m);
    gpu->ops->destroy(gpu);
    printf("%s\n", n_fail ? "FAILED" : "ok");
    return n_fail ? 1 : 0;
}
