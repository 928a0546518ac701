/* kvmem.c: grow-as-used K/V regions of one slot (kvmem.h).
 * Invariants, checked by kvmem_check: (1) 0 <= rows <= max_rows; (2) the mapped bytes of every region
 * are ext[n_ext-1] (0 when n_ext == 0), with ext strictly ascending, granule-aligned and at most
 * reserve_bytes; (3) rows * row_bytes <= mapped bytes: every usable row is mapped in every region.
 * EXACT(grow): growth maps new memory after the bytes already mapped and never moves, copies or
 * rewrites what is there; the kernels read only rows < n_past, which growth never touches, so a
 * stream's tokens do not depend on when or whether it grew (tests/unit/engine/test_kvgrow.c).
 * Not here: the growth policy (slot.c), the budget (engine.c). */
#include "kvmem.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdlib.h>

static atomic_int fail_after = -1; /* the test hook: maps left before one fails; < 0 off */

void kvmem_test_fail_after(int n) {
    atomic_store(&fail_after, n < 0 ? -1 : n);
}

/* vm_map through the test hook. */
static qstatus map(kvmem *k, int r, size_t from, size_t to) {
    int left = atomic_load(&fail_after);
    while (left >= 0 && !atomic_compare_exchange_weak(&fail_after, &left, left - 1)) {}
    if (left == 0) return q_fail(Q_ENOMEM, "K/V map of %zu bytes failed (test hook)", to - from);
    return k->be->ops->vm_map(k->be, k->base[r], from, to);
}

static size_t mapped(const kvmem *k) {
    return k->n_ext > 0 ? k->ext[k->n_ext - 1] : 0;
}

int kvmem_check(const kvmem *k) {
    if (k->rows < 0 || k->rows > k->max_rows) return 0;
    for (int i = 0; i < k->n_ext; i++)
        if (k->ext[i] % k->granule || k->ext[i] > k->reserve_bytes || (i > 0 && k->ext[i] <= k->ext[i - 1]))
            return 0;
    return (size_t)k->rows * k->row_bytes <= mapped(k);
}

void kvmem_fini(kvmem *k) {
    if (!k) return;
    if (k->base) {
        (void)kvmem_resize(k, 0); /* unmaps every extent */
        for (int r = 0; r < k->n_regions; r++) k->be->ops->vm_release(k->be, k->base[r], k->reserve_bytes);
    }
    free(k->base);
    free(k->ext);
    *k = (kvmem){0};
}

qstatus kvmem_init(kvmem *k, qbackend *be, int n_regions, size_t row_bytes, int max_rows, int first_rows) {
    *k = (kvmem){0};
    if (!be->ops->vm_reserve || !be->ops->vm_map || !be->ops->vm_unmap || !be->ops->vm_release)
        return q_fail(Q_EUNSUPPORTED, "kv_grow: the %s backend cannot map memory on demand", be->ops->name);
    if (n_regions < 1 || row_bytes == 0 || max_rows < 1 || first_rows < 0 || first_rows > max_rows ||
        (size_t)max_rows > SIZE_MAX / row_bytes)
        return q_fail(Q_EINVAL, "kvmem: %d regions of %d rows of %zu bytes, first %d", n_regions, max_rows,
                      row_bytes, first_rows);
    k->be = be;
    k->row_bytes = row_bytes;
    k->max_rows = max_rows;
    k->base = calloc((size_t)n_regions, sizeof *k->base);
    if (!k->base) return q_fail(Q_ENOMEM, "kvmem: out of memory");
    qstatus st = Q_OK;
    for (int r = 0; r < n_regions && st == Q_OK; r++) {
        size_t g = 0;
        st = be->ops->vm_reserve(be, (size_t)max_rows * row_bytes, &k->base[r], &g);
        if (st != Q_OK) break;
        k->n_regions = r + 1;
        if (r == 0) {
            k->granule = g;
            k->reserve_bytes = ((size_t)max_rows * row_bytes + g - 1) / g * g;
        } else if (g != k->granule) {
            st = q_fail(Q_EINVAL, "kvmem: granule changed from %zu to %zu", k->granule, g);
        }
    }
    /* at most one extent per granule: growth never needs to allocate the list */
    if (st == Q_OK) {
        k->cap_ext = (int)(k->reserve_bytes / k->granule < 1 << 20 ? k->reserve_bytes / k->granule : 1 << 20);
        k->ext = malloc((size_t)k->cap_ext * sizeof *k->ext);
        if (!k->ext) st = q_fail(Q_ENOMEM, "kvmem: out of memory for %d extents", k->cap_ext);
    }
    if (st == Q_OK) st = kvmem_resize(k, first_rows);
    if (st != Q_OK) {
        kvmem_fini(k);
        return q_wrap(st, "K/V regions for %d rows", max_rows);
    }
    return Q_OK;
}

/* Unmaps the last extent of every region. On failure the regions before the failing one have lost
 * it too: the extent is dropped from the list and rows cut to what every region still maps. */
static qstatus pop_extent(kvmem *k) {
    size_t to = k->ext[k->n_ext - 1], from = k->n_ext > 1 ? k->ext[k->n_ext - 2] : 0;
    qstatus st = Q_OK;
    for (int r = 0; r < k->n_regions && st == Q_OK; r++) st = k->be->ops->vm_unmap(k->be, k->base[r], from, to);
    k->n_ext--;
    if ((size_t)k->rows * k->row_bytes > from) k->rows = (int)(from / k->row_bytes);
    return st;
}

qstatus kvmem_resize(kvmem *k, int rows) {
    if (rows < 0 || rows > k->max_rows)
        return q_fail(Q_EINVAL, "kvmem: %d rows outside 0..%d", rows, k->max_rows);
    const size_t need = (size_t)rows * k->row_bytes;
    if (need <= mapped(k)) { /* shrink (or nothing to map): give back whole extents above need */
        while (k->n_ext > 0 && (k->n_ext > 1 ? k->ext[k->n_ext - 2] : 0) >= need) {
            qstatus st = pop_extent(k);
            if (st != Q_OK) return q_wrap(st, "giving back K/V rows down to %d", rows);
        }
        k->rows = rows;
        assert(kvmem_check(k));
        return Q_OK;
    }
    if (k->n_ext == k->cap_ext) return q_fail(Q_EFULL, "kvmem: %d extents in use", k->n_ext);
    size_t from = mapped(k), to = (need + k->granule - 1) / k->granule * k->granule;
    if (to > k->reserve_bytes) to = k->reserve_bytes;
    for (int r = 0; r < k->n_regions; r++) {
        qstatus st = map(k, r, from, to);
        if (st == Q_OK) continue;
        for (int u = 0; u < r; u++) (void)k->be->ops->vm_unmap(k->be, k->base[u], from, to); /* undo */
        return q_wrap(st, "growing K/V to %d rows (%zu more bytes in each of %d regions)", rows, to - from,
                      k->n_regions);
    }
    k->ext[k->n_ext++] = to;
    k->rows = rows;
    assert(kvmem_check(k));
    return Q_OK;
}

int64_t kvmem_mapped_bytes(const kvmem *k) {
    return (int64_t)mapped(k) * k->n_regions;
}
