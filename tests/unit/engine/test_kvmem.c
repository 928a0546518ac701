/* test_kvmem.c: grow-as-used K/V regions on the CPU backend (engine/kvmem.c), no model.
 * - growth keeps the base address and the rows already written (no copy), maps whole pages;
 * - shrinking gives the pages back (mincore: no longer resident) and keeps the first rows;
 * - a mapping that fails in the middle of the regions (the test hook) leaves every region at the
 *   rows it had, and the next growth works;
 * - a backend without vm ops is refused; bad sizes are refused. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/backend.h"
#include "engine/kvmem.h"
#include "harness.h"

#define ROW 256 /* bytes per row: 64 floats, like the fixture model's n_kv 2 x head_dim 32 */

static size_t page(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* Resident pages of [p, p + bytes). */
static size_t resident(void *p, size_t bytes) {
    size_t n = (bytes + page() - 1) / page(), count = 0;
    unsigned char *vec = malloc(n ? n : 1);
    assert_non_null(vec);
    assert_int_equal(mincore(p, bytes, vec), 0);
    for (size_t i = 0; i < n; i++) count += vec[i] & 1;
    free(vec);
    return count;
}

static void fill(kvmem *k, int from, int to, unsigned char tag) {
    for (int r = 0; r < k->n_regions; r++) memset((char *)k->base[r] + (size_t)from * ROW, tag + r, (size_t)(to - from) * ROW);
}

static int holds(kvmem *k, int from, int to, unsigned char tag) {
    for (int r = 0; r < k->n_regions; r++)
        for (size_t b = (size_t)from * ROW; b < (size_t)to * ROW; b++)
            if (((unsigned char *)k->base[r])[b] != (unsigned char)(tag + r)) return 0;
    return 1;
}

static void test_grow_shrink(void **state) {
    (void)state;
    qbackend *be = NULL;
    assert_ok(cpu_backend_create(1, &be));
    kvmem k;
    assert_ok(kvmem_init(&k, be, 3, ROW, 4096, 16));
    assert_int_equal(k.rows, 16);
    assert_int_equal(kvmem_mapped_bytes(&k), 3 * 16 * ROW);
    void *base0 = k.base[0];
    fill(&k, 0, 16, 0x10);
    assert_ok(kvmem_resize(&k, 100)); /* grow: same address, first rows intact */
    assert_ptr_equal(k.base[0], base0);
    assert_int_equal(k.rows, 100);
    assert_true(holds(&k, 0, 16, 0x10));
    assert_int_equal(kvmem_mapped_bytes(&k), 3 * (int64_t)((100 * ROW + page() - 1) / page() * page()));
    fill(&k, 16, 100, 0x40);
    assert_ok(kvmem_resize(&k, 1000));
    fill(&k, 100, 1000, 0x70);
    assert_true(holds(&k, 16, 100, 0x40));
    assert_true(resident(k.base[1], 1000 * ROW) >= 1000 * ROW / page());
    assert_true(kvmem_check(&k));
    assert_ok(kvmem_resize(&k, 16)); /* give back: only the first extent stays */
    assert_int_equal(k.rows, 16);
    assert_int_equal(k.n_ext, 1);
    assert_int_equal(kvmem_mapped_bytes(&k), 3 * 16 * ROW);
    assert_true(holds(&k, 0, 16, 0x10));
    assert_int_equal(resident((char *)k.base[1] + 16 * ROW, (1000 - 16) * ROW), 0);
    assert_ok(kvmem_resize(&k, 40)); /* grows again: fresh pages read as zeros */
    for (size_t b = 16 * ROW; b < 40 * ROW; b++) assert_int_equal(((unsigned char *)k.base[2])[b], 0);
    kvmem_fini(&k);
    kvmem_fini(&k); /* a zeroed kvmem is fine */
    be->ops->destroy(be);
}

static void test_forced_failure(void **state) {
    (void)state;
    qbackend *be = NULL;
    assert_ok(cpu_backend_create(1, &be));
    kvmem k;
    assert_ok(kvmem_init(&k, be, 4, ROW, 4096, 16));
    fill(&k, 0, 16, 0x20);
    kvmem_test_fail_after(2); /* regions 0 and 1 map, region 2 fails */
    qstatus st = kvmem_resize(&k, 500);
    assert_int_equal(st, Q_ENOMEM);
    assert_non_null(strstr(q_lasterr(), "test hook"));
    assert_non_null(strstr(q_lasterr(), "500 rows"));
    assert_int_equal(k.rows, 16);
    assert_int_equal(k.n_ext, 1);
    assert_int_equal(kvmem_mapped_bytes(&k), 4 * 16 * ROW);
    assert_int_equal(resident((char *)k.base[0] + 16 * ROW, 480 * ROW), 0); /* undone in region 0 */
    assert_true(holds(&k, 0, 16, 0x20));
    assert_ok(kvmem_resize(&k, 500)); /* the hook fires once */
    fill(&k, 16, 500, 0x30);
    assert_true(holds(&k, 0, 16, 0x20));
    kvmem_test_fail_after(0);
    assert_int_equal(kvmem_resize(&k, 4096), Q_ENOMEM);
    assert_int_equal(k.rows, 500);
    assert_true(holds(&k, 16, 500, 0x30));
    kvmem_test_fail_after(-1);
    assert_ok(kvmem_resize(&k, 4096)); /* the whole reservation */
    assert_int_equal(kvmem_resize(&k, 4097), Q_EINVAL);
    kvmem_fini(&k);
    be->ops->destroy(be);
}

static void test_refusals(void **state) {
    (void)state;
    qbackend *be = NULL;
    assert_ok(cpu_backend_create(1, &be));
    kvmem k;
    assert_int_equal(kvmem_init(&k, be, 0, ROW, 64, 16), Q_EINVAL);
    assert_int_equal(kvmem_init(&k, be, 2, ROW, 64, 65), Q_EINVAL);
    qbackend_ops no_vm = *be->ops; /* a backend that cannot map on demand */
    no_vm.vm_reserve = NULL;
    const qbackend_ops *saved = be->ops;
    be->ops = &no_vm;
    assert_int_equal(kvmem_init(&k, be, 2, ROW, 64, 16), Q_EUNSUPPORTED);
    assert_non_null(strstr(q_lasterr(), "kv_grow"));
    be->ops = saved;
    be->ops->destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grow_shrink),
        cmocka_unit_test(test_forced_failure),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
