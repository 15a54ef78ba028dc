/* tests/test_registry.c — the op table's contract (kernels/registry.h): every
 * op named once, with paths, an fp8 note, a default variant and unique
 * variant names; look-ups by name.  (That every op has a check is
 * tests/test_check_harness.c's.) */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <ctype.h>
#include <string.h>

#include "kernels/registry.h"

static int well_formed_name(const char *s)
{
    if (!s || !*s) return 0;
    for (; *s; s++)
        if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_')) return 0;
    return 1;
}

static void test_every_op_is_complete(void **state)
{
    (void)state;
    int n = 0;
    const kop *const *ops = kregistry_ops(&n);
    assert_true(n > 0);
    for (int i = 0; i < n; i++) {
        const kop *op = ops[i];
        print_message("op %s: %d variants\n", op->name, op->n_variants);
        assert_true(well_formed_name(op->name));
        assert_non_null(op->summary);
        assert_true(strlen(op->summary) > 10);
        assert_non_null(op->fp8_note);
        assert_true(strlen(op->fp8_note) > 10);
        assert_true((op->paths & KPATHS_ALL) != 0);
        assert_int_equal(op->paths & ~KPATHS_ALL, 0);
        assert_true(op->n_variants >= 1);
        assert_non_null(op->variants);
        for (int v = 0; v < op->n_variants; v++) {
            assert_true(well_formed_name(op->variants[v].name));
            assert_non_null(op->variants[v].summary);
            assert_true(strlen(op->variants[v].summary) > 10);
            for (int w = 0; w < v; w++) assert_string_not_equal(op->variants[v].name, op->variants[w].name);
            assert_int_equal(kregistry_variant(op, op->variants[v].name), v);
        }
        for (int j = 0; j < i; j++) assert_string_not_equal(op->name, ops[j]->name);
        assert_ptr_equal(kregistry_find(op->name), op);
    }
    assert_null(ops[n]); /* the table ends with NULL */
}

static void test_lookups(void **state)
{
    (void)state;
    assert_null(kregistry_find("no_such_op"));
    assert_null(kregistry_find(NULL));
    int n = 0;
    const kop *const *ops = kregistry_ops(&n);
    const kop *op = ops[0];
    assert_int_equal(kregistry_variant(op, "no_such_variant"), -1);
    char buf[4096];
    kregistry_op_names(buf, sizeof buf);
    for (int i = 0; i < n; i++) assert_non_null(strstr(buf, ops[i]->name));
    kregistry_variant_names(op, buf, sizeof buf);
    assert_non_null(strstr(buf, op->variants[0].name));
    kregistry_path_names(op, buf, sizeof buf);
    for (int p = 0; p < KPATH_COUNT; p++)
        assert_int_equal(strstr(buf, kpath_name((kpath)p)) != NULL, kop_has_path(op, (kpath)p));
    /* a tiny buffer truncates without overrunning */
    char tiny[5];
    kregistry_op_names(tiny, sizeof tiny);
    assert_true(strlen(tiny) < sizeof tiny);
    assert_false(kop_has_path(op, KPATH_COUNT));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_op_is_complete),
        cmocka_unit_test(test_lookups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
