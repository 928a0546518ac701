/* cpu_vm.c: the CPU backend's grow-as-used memory (backend.h vm_*): address space reserved with
 * mmap(PROT_NONE), memory mapped in by mprotect(PROT_READ|PROT_WRITE) (the kernel backs the pages on
 * first touch) and given back by madvise(MADV_DONTNEED) + mprotect(PROT_NONE), so RSS follows what is
 * mapped and the base address never moves. CUDA twin: backend/cuda/cuda_vm.cu.
 * Invariants: (1) every range passed in is granule-aligned (the page size) and inside the region;
 * (2) a range given back reads as zeros if it is ever mapped again (anonymous private memory).
 * Non-goals: huge pages, NUMA placement. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu_internal.h"

static size_t page_bytes(void) {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

static qstatus check_range(void *base, size_t from, size_t to, const char *op) {
    size_t g = page_bytes();
    if (!base || from > to || from % g || to % g)
        return q_fail(Q_EINVAL, "cpu %s: bad range [%zu, %zu) of region %p (page %zu)", op, from, to, base, g);
    return Q_OK;
}

qstatus cpu_vm_reserve(qbackend *be, size_t bytes, void **base, size_t *granule) {
    (void)be;
    size_t g = page_bytes();
    if (!base || !granule || bytes == 0 || bytes > SIZE_MAX - g)
        return q_fail(Q_EINVAL, "cpu vm_reserve: bad request for %zu bytes", bytes);
    size_t len = (bytes + g - 1) / g * g;
    void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return q_fail(Q_ENOMEM, "cpu vm_reserve: mmap of %zu bytes of address space: %s", len, strerror(errno));
    *base = p;
    *granule = g;
    return Q_OK;
}

qstatus cpu_vm_map(qbackend *be, void *base, size_t from, size_t to) {
    (void)be;
    Q_TRY(check_range(base, from, to, "vm_map"));
    if (from == to) return Q_OK;
    if (mprotect((char *)base + from, to - from, PROT_READ | PROT_WRITE) != 0)
        return q_fail(Q_ENOMEM, "cpu vm_map: mprotect of %zu bytes: %s", to - from, strerror(errno));
    return Q_OK;
}

qstatus cpu_vm_unmap(qbackend *be, void *base, size_t from, size_t to) {
    (void)be;
    Q_TRY(check_range(base, from, to, "vm_unmap"));
    if (from == to) return Q_OK;
    char *p = (char *)base + from;
    if (madvise(p, to - from, MADV_DONTNEED) != 0)
        return q_fail(Q_ENOMEM, "cpu vm_unmap: madvise of %zu bytes: %s", to - from, strerror(errno));
    if (mprotect(p, to - from, PROT_NONE) != 0)
        return q_fail(Q_ENOMEM, "cpu vm_unmap: mprotect of %zu bytes: %s", to - from, strerror(errno));
    return Q_OK;
}

void cpu_vm_release(qbackend *be, void *base, size_t bytes) {
    (void)be;
    if (!base || bytes == 0) return;
    size_t g = page_bytes();
    munmap(base, (bytes + g - 1) / g * g);
}
