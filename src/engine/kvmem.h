/* kvmem.h: one slot's K/V memory, grown as the stream uses it and given back when it ends (DESIGN.md
 * "Grow-as-used K/V without copies"). A kvmem is a set of regions (K and V of every attention layer
 * of the slot), each an address range reserved once at the context's size through the backend's
 * vm_* ops; memory is mapped into a prefix of every region at once, so all of a slot's layers always
 * hold the same rows, kernels see one contiguous K/V per layer, and growth copies nothing.
 * Not here: when to grow and by how much (slot.c), who may grow at all (the budget, engine.c). */
#ifndef QUILL_KVMEM_H
#define QUILL_KVMEM_H

#include <stddef.h>
#include <stdint.h>

#include "../backend/backend.h"

typedef struct kvmem {
    qbackend *be;          /* borrowed */
    int n_regions;         /* e.g. 2 per attention layer */
    void **base;           /* [n_regions] backend addresses of the reserved ranges (owned) */
    size_t row_bytes;      /* bytes of one row (position) in one region */
    size_t reserve_bytes;  /* per region: max_rows * row_bytes, rounded up to the granule */
    size_t granule;        /* the backend's mapping unit */
    int max_rows;          /* rows the reservation holds (the context) */
    int rows;              /* rows usable now, in every region */
    size_t *ext;           /* [cap_ext] ends (bytes) of the mapped extents, ascending; one per
                              vm_map, shared by every region (they move together) */
    int n_ext, cap_ext;
} kvmem;

/* Reserves n_regions ranges of max_rows rows of row_bytes each and maps first_rows rows in each.
 * On failure nothing is left reserved or mapped. Free with kvmem_fini (takes a zeroed kvmem). */
qstatus kvmem_init(kvmem *k, qbackend *be, int n_regions, size_t row_bytes, int max_rows, int first_rows);
void kvmem_fini(kvmem *k);

/* Makes `rows` (0..max_rows) rows usable in every region. Growing maps one new extent per region
 * (rows already held keep their memory and contents); shrinking unmaps whole extents from the end,
 * down to the last extent that holds `rows`, and waits for pending backend work first.
 * Growth that fails in any region is undone in the others: every region stays at the rows it had,
 * and the error (Q_ENOMEM naming the rows and bytes) is returned. A failed shrink leaves rows at
 * what every region still maps. Never called from two threads at once. */
qstatus kvmem_resize(kvmem *k, int rows);

/* Bytes mapped now over all regions (granule-rounded, so >= rows * row_bytes * n_regions). */
int64_t kvmem_mapped_bytes(const kvmem *k);

/* Nonzero when k's invariants hold (kvmem.c; for assert and tests). */
int kvmem_check(const kvmem *k);

/* Test hook: after n more successful vm_map calls (by any kvmem of the process), the next one fails
 * with Q_ENOMEM, once; n < 0 turns it off. The engine also reads QUILL_TEST_KV_FAIL_AFTER at
 * engine_create. */
void kvmem_test_fail_after(int n);

#endif
