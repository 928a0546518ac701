/* cuda_vm.cu: the CUDA backend's grow-as-used memory (backend.h vm_*) through the driver's virtual
 * memory management (entry points fetched through the runtime, see drv_load): cuMemAddressReserve
 * once per region; each vm_map is one cuMemCreate of the
 * range's size, cuMemMap at its offset, cuMemSetAccess (read/write for this device) and cuMemRelease
 * of the handle (the mapping keeps the memory alive until cuMemUnmap); vm_unmap is cuMemUnmap of one
 * earlier vm_map's range, after the backend's stream has drained. CPU twin: backend/cpu/cpu_vm.c.
 * Checked on the H200 (DESIGN.md): granularity 2 MiB; mapping moves cudaMemGetInfo by the bytes
 * mapped; about 60 us per granule, so the engine grows in steps of many granules.
 * Invariants: (1) offsets and sizes are multiples of the granule (cuMemGetAllocationGranularity,
 * minimum, for a pinned device allocation on this backend's device); (2) a failed vm_map leaves
 * nothing new mapped and no handle alive. Untested in CI (no GPU there): tests/cuda/ is where a
 * device run checks it. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_common.cuh"

/* The driver entry points, fetched through the runtime (cudaGetDriverEntryPointByVersion) rather than
 * linked: linking libcuda.so.1 would stop the binary from even starting where no driver is
 * installed (CI, CPU-only machines), where today it starts and picks the CPU backend. */
typedef struct drv_table {
    PFN_cuGetErrorString_v6000 GetErrorString;
    PFN_cuMemGetAllocationGranularity_v10020 MemGetAllocationGranularity;
    PFN_cuMemAddressReserve_v10020 MemAddressReserve;
    PFN_cuMemAddressFree_v10020 MemAddressFree;
    PFN_cuMemCreate_v10020 MemCreate;
    PFN_cuMemMap_v10020 MemMap;
    PFN_cuMemSetAccess_v10020 MemSetAccess;
    PFN_cuMemUnmap_v10020 MemUnmap;
    PFN_cuMemRelease_v10020 MemRelease;
    int ok;
    char missing[64];
} drv_table;

static drv_table drv_load(void) {
    drv_table t;
    memset(&t, 0, sizeof t);
    struct { const char *name; void **fn; } want[] = {
        {"cuGetErrorString", (void **)&t.GetErrorString},
        {"cuMemGetAllocationGranularity", (void **)&t.MemGetAllocationGranularity},
        {"cuMemAddressReserve", (void **)&t.MemAddressReserve},
        {"cuMemAddressFree", (void **)&t.MemAddressFree},
        {"cuMemCreate", (void **)&t.MemCreate},
        {"cuMemMap", (void **)&t.MemMap},
        {"cuMemSetAccess", (void **)&t.MemSetAccess},
        {"cuMemUnmap", (void **)&t.MemUnmap},
        {"cuMemRelease", (void **)&t.MemRelease},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        cudaError_t e = cudaGetDriverEntryPointByVersion(want[i].name, want[i].fn, 12000, cudaEnableDefault, &q);
        if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !*want[i].fn) {
            cudaGetLastError();
            snprintf(t.missing, sizeof t.missing, "%s", want[i].name);
            return t;
        }
    }
    t.ok = 1;
    return t;
}

/* The table, loaded once (a function-local static: initialised once even with several threads). */
static qstatus drv(const drv_table **out) {
    static const drv_table t = drv_load();
    if (!t.ok) return q_fail(Q_ECUDA, "cuda vm: the driver has no %s (CUDA 12 or later needed)", t.missing);
    *out = &t;
    return Q_OK;
}

/* Driver calls: a failure names the call and the driver's message. */
static qstatus drv_fail(const drv_table *d, CUresult r, const char *call, qstatus st) {
    const char *msg = NULL;
    if (d->GetErrorString(r, &msg) != CUDA_SUCCESS || !msg) msg = "unknown error";
    return q_fail(st, "cuda vm: %s: %s (%d)", call, msg, (int)r);
}

/* Makes the backend's device (its primary context) current on the calling thread: the engine thread
 * that grows K/V is not the thread that created the backend. */
static qstatus use_device(qbackend *be, CUmemAllocationProp *prop) {
    int dev = ((cuda_state *)be->impl)->device;
    CU_TRY(cudaSetDevice(dev), "vm: set device");
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = dev;
    return Q_OK;
}

static qstatus granule_of(const drv_table *d, const CUmemAllocationProp *prop, size_t *g) {
    CUresult r = d->MemGetAllocationGranularity(g, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS) return drv_fail(d, r, "cuMemGetAllocationGranularity", Q_ECUDA);
    if (*g == 0) return q_fail(Q_ECUDA, "cuda vm: granularity 0");
    return Q_OK;
}

extern "C" qstatus cuda_vm_reserve(qbackend *be, size_t bytes, void **base, size_t *granule) {
    CUmemAllocationProp prop;
    size_t g = 0;
    const drv_table *d = NULL;
    if (!base || !granule || bytes == 0) return q_fail(Q_EINVAL, "cuda vm_reserve: bad request for %zu bytes", bytes);
    Q_TRY(drv(&d));
    Q_TRY(use_device(be, &prop));
    Q_TRY(granule_of(d, &prop, &g));
    if (bytes > SIZE_MAX - g) return q_fail(Q_EINVAL, "cuda vm_reserve: %zu bytes is too large", bytes);
    size_t len = (bytes + g - 1) / g * g;
    CUdeviceptr p = 0;
    CUresult r = d->MemAddressReserve(&p, len, 0, 0, 0);
    if (r != CUDA_SUCCESS) return drv_fail(d, r, "cuMemAddressReserve", Q_ENOMEM);
    *base = (void *)p;
    *granule = g;
    return Q_OK;
}

extern "C" qstatus cuda_vm_map(qbackend *be, void *base, size_t from, size_t to) {
    CUmemAllocationProp prop;
    size_t g = 0;
    const drv_table *d = NULL;
    Q_TRY(drv(&d));
    Q_TRY(use_device(be, &prop));
    Q_TRY(granule_of(d, &prop, &g));
    if (!base || from > to || from % g || to % g)
        return q_fail(Q_EINVAL, "cuda vm_map: bad range [%zu, %zu) (granule %zu)", from, to, g);
    if (from == to) return Q_OK;
    const size_t len = to - from;
    const CUdeviceptr at = (CUdeviceptr)base + from;
    CUmemGenericAllocationHandle h = 0;
    CUresult r = d->MemCreate(&h, len, &prop, 0);
    if (r != CUDA_SUCCESS) return drv_fail(d, r, "cuMemCreate", Q_ENOMEM);
    r = d->MemMap(at, len, 0, h, 0);
    if (r != CUDA_SUCCESS) {
        d->MemRelease(h);
        return drv_fail(d, r, "cuMemMap", Q_ECUDA);
    }
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof acc);
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = d->MemSetAccess(at, len, &acc, 1);
    if (r != CUDA_SUCCESS) {
        d->MemUnmap(at, len);
        d->MemRelease(h);
        return drv_fail(d, r, "cuMemSetAccess", Q_ECUDA);
    }
    r = d->MemRelease(h); /* the mapping holds the memory from here until cuMemUnmap */
    if (r != CUDA_SUCCESS) {
        d->MemUnmap(at, len);
        d->MemRelease(h); /* once unmapped, the release may go through: leave no handle alive */
        return drv_fail(d, r, "cuMemRelease", Q_ECUDA);
    }
    return Q_OK;
}

extern "C" qstatus cuda_vm_unmap(qbackend *be, void *base, size_t from, size_t to) {
    CUmemAllocationProp prop;
    const drv_table *d = NULL;
    Q_TRY(drv(&d));
    Q_TRY(use_device(be, &prop));
    if (!base || from > to) return q_fail(Q_EINVAL, "cuda vm_unmap: bad range [%zu, %zu)", from, to);
    if (from == to) return Q_OK;
    CU_TRY(cudaStreamSynchronize(cu_stream(be)), "vm_unmap: drain"); /* no kernel may still read it */
    CUresult r = d->MemUnmap((CUdeviceptr)base + from, to - from);
    if (r != CUDA_SUCCESS) return drv_fail(d, r, "cuMemUnmap", Q_ECUDA);
    return Q_OK;
}

extern "C" void cuda_vm_release(qbackend *be, void *base, size_t bytes) {
    CUmemAllocationProp prop;
    size_t g = 0;
    const drv_table *d = NULL;
    if (!base || bytes == 0) return;
    if (drv(&d) != Q_OK || use_device(be, &prop) != Q_OK || granule_of(d, &prop, &g) != Q_OK) return;
    CUresult r = d->MemAddressFree((CUdeviceptr)base, (bytes + g - 1) / g * g);
    if (r != CUDA_SUCCESS) {
        const char *msg = NULL;
        d->GetErrorString(r, &msg);
        fprintf(stderr, "quill: cuda vm: cuMemAddressFree: %s\n", msg ? msg : "unknown error");
    }
}
