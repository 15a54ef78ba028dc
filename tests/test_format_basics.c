/* tests/test_format_basics.c — format properties and hand-worked roundings. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>

#include "precision/format.h"

static void test_properties(void **state)
{
    (void)state;
    assert_true(prec_format_get(PREC_E4M3)->max_finite == 448.0);
    assert_true(prec_format_get(PREC_E5M2)->max_finite == 57344.0);
    assert_true(prec_format_get(PREC_FP16)->max_finite == 65504.0);
    assert_true(prec_format_get(PREC_BF16)->unit_roundoff == 0x1p-8);
    prec_format f;
    assert_int_equal(prec_format_parse("bfloat16", &f), 0);
    assert_int_equal(f, PREC_BF16);
    assert_int_equal(prec_format_parse("fp7", &f), -1);
}

static void test_hand_rounding(void **state)
{
    (void)state;
    /* 1 + 2^-11 is a tie in fp16: to even gives 1; 1 + 3*2^-11 ties up to 1 + 2^-9 */
    assert_true(prec_rne(1.0 + 0x1p-11, PREC_FP16) == 1.0);
    assert_true(prec_rne(1.0 + 3 * 0x1p-11, PREC_FP16) == 1.0 + 0x1p-9);
    /* e4m3: 464 is the tie between 448 and 480 (=NaN) -> even 448; 470 overflows */
    assert_true(prec_rne(464.0, PREC_E4M3) == 448.0);
    assert_true(isnan(prec_rne(470.0, PREC_E4M3)));
    prec_rounding sat = {PREC_RNE, PREC_OVF_SATURATE, false};
    assert_true(prec_round(1e6, PREC_E4M3, sat, 0) == 448.0);
    /* directed: 1 - tiny rounded down in bf16 lands on the finer grid below 1 */
    prec_rounding rd = {PREC_RD, PREC_OVF_IEEE, false};
    assert_true(prec_round2(1.0, -0x1p-60, PREC_BF16, rd, 0) == 1.0 - 0x1p-8);
    assert_true(prec_decode(0x7e, PREC_E4M3) == 448.0);
    assert_true(prec_encode(448.0, PREC_E4M3) == 0x7e);
    assert_true(prec_encode(-0.0, PREC_FP16) == 0x8000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_properties),
        cmocka_unit_test(test_hand_rounding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
