/* tests/test_reference_softmax.c — the softmax reference against hand-worked
 * values, an independent plain-MPFR evaluation at 1024 bits (bit-exact: both
 * are correctly rounded), and the identities sum(y) = 1 and
 * sum(dx) = s (1 - sum(y)); each check has a planted-bug twin that fails it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>

#include "precision/rng.h"
#include "reference/softmax.h"
#include "tests/test_reference_util.h"
#include "tests/test_util.h"

#define HI_PREC 1024

static void random_row(prec_rng *rng, double *x, long n, double scale)
{
    random_normal(rng, x, n, 0.0, scale);
}

/* Plain MPFR at 1024 bits: exp(x_j - m) / sum, rounded to double.  Its error
 * (~n 2^-1020 relative) cannot change a rounding unless the exact value is
 * that close to a midpoint. */
static void plain_softmax(long n, const double *x, double *y)
{
    double m = -INFINITY;
    for (long j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
    mpfr_t s, t;
    mpfr_inits2(HI_PREC, s, t, (mpfr_ptr)0);
    mpfr_set_zero(s, 1);
    for (long j = 0; j < n; j++) {
        mpfr_set_d(t, x[j], MPFR_RNDN);
        mpfr_sub_d(t, t, m, MPFR_RNDN);
        mpfr_exp(t, t, MPFR_RNDN);
        mpfr_add(s, s, t, MPFR_RNDN);
    }
    for (long j = 0; j < n; j++) {
        mpfr_set_d(t, x[j], MPFR_RNDN);
        mpfr_sub_d(t, t, m, MPFR_RNDN);
        mpfr_exp(t, t, MPFR_RNDN);
        mpfr_div(t, t, s, MPFR_RNDN);
        y[j] = mpfr_get_d(t, MPFR_RNDN);
    }
    mpfr_clears(s, t, (mpfr_ptr)0);
}

static void test_hand_values(void **state)
{
    (void)state;
    ref_ctx ctx = REF_CTX_DEFAULT;
    double x[2] = {0.0, 1.0}, y[2];
    ref_softmax_forward(&ctx, 1, 2, x, y);
    /* 1/(1+e) and e/(1+e) to 40 digits (the compiler rounds the literals correctly) */
    assert_true(y[0] == 0.2689414213699951207488407581781637256349);
    assert_true(y[1] == 0.7310585786300048792511592418218362743651);

    double masked[3] = {5.0, -INFINITY, 5.0}, ym[3];
    ref_softmax_forward(&ctx, 1, 3, masked, ym);
    assert_true(ym[0] == 0.5 && ym[1] == 0.0 && ym[2] == 0.5);

    double thirds[3] = {-7.25, -7.25, -7.25}, yt[3];
    ref_softmax_forward(&ctx, 1, 3, thirds, yt);
    assert_true(yt[0] == 1.0 / 3.0 && yt[2] == 1.0 / 3.0); /* 1/3 in double is correctly rounded */

    double all_masked[2] = {-INFINITY, -INFINITY}, with_nan[2] = {1.0, NAN}, yn[2];
    ref_softmax_forward(&ctx, 1, 2, all_masked, yn);
    assert_true(isnan(yn[0]) && isnan(yn[1]));
    ref_softmax_forward(&ctx, 1, 2, with_nan, yn);
    assert_true(isnan(yn[0]) && isnan(yn[1]));
    assert_int_equal(ctx.unproven, 0);
}

/* Number of outputs that differ from the plain 1024-bit evaluation. */
static long mismatches_vs_plain(ref_bug bug, uint64_t seed)
{
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    const long rows = 4, cols = 97;
    double x[4 * 97], y[4 * 97], yp[97];
    random_row(&rng, x, rows * cols, 4.0);
    ref_ctx ctx = REF_CTX_DEFAULT;
    ctx.bug = bug;
    poison(y, rows * cols);
    ref_softmax_forward(&ctx, rows, cols, x, y);
    long bad = 0;
    for (long r = 0; r < rows; r++) {
        plain_softmax(cols, x + r * cols, yp);
        for (long j = 0; j < cols; j++) bad += y[r * cols + j] != yp[j];
    }
    assert_int_equal(ctx.unproven, 0);
    return bad;
}

static void test_correctly_rounded(void **state)
{
    (void)state;
    uint64_t seed = test_seed("softmax_correctly_rounded");
    assert_int_equal(mismatches_vs_plain(REF_BUG_NONE, seed), 0);
    /* twin: rounding toward zero must show (each output is rounded away from
     * zero by RN with probability ~1/2, so 388 outputs cannot all escape) */
    assert_true(mismatches_vs_plain(REF_BUG_TRUNCATE, seed) > 0);
}

/* |sum(y) - 1| <= u64 sum(y): each y_j is within u64 y_j of its exact value,
 * and the exact values sum to 1.  Returns whether the row passes. */
static bool sum_identity_holds(ref_bug bug, uint64_t seed, long cols)
{
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    double *x = calloc((size_t)cols, sizeof *x), *y = calloc((size_t)cols, sizeof *y);
    random_row(&rng, x, cols, 3.0);
    ref_ctx ctx = REF_CTX_DEFAULT;
    ctx.bug = bug;
    ref_softmax_forward(&ctx, 1, cols, x, y);
    mpfr_t s;
    mpfr_init2(s, 64);
    sum_exactly(s, cols, y);
    double bound = U64 * mpfr_get_d(s, MPFR_RNDU);
    mpfr_sub_ui(s, s, 1, MPFR_RNDN); /* exact at 4400 bits */
    bool ok = fabs(mpfr_get_d(s, MPFR_RNDA)) <= bound;
    mpfr_clear(s);
    free(x);
    free(y);
    return ok;
}

static void test_sums_to_one(void **state)
{
    (void)state;
    uint64_t seed = test_seed("softmax_sums_to_one");
    long widths[] = {1, 2, 31, 1024, 4099};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        assert_true(sum_identity_holds(REF_BUG_NONE, seed + i, widths[i]));
    for (size_t i = 1; i < sizeof widths / sizeof widths[0]; i++)
        assert_false(sum_identity_holds(REF_BUG_DROP_TERM, seed + i, widths[i]));
}

/* Backward: sum_j dx_j = s (1 - sum_j y_j) exactly, s = sum_j y_j dy_j; each
 * dx_j is within u64 |dx_j| of its exact value, so the computed sum is within
 * u64 sum|dx_j| of s (1 - sum y). */
static bool backward_identity_holds(ref_bug bug, uint64_t seed)
{
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    enum { n = 300 };
    double x[n], y[n], dy[n], dx[n], absdx[n];
    random_row(&rng, x, n, 2.0);
    random_row(&rng, dy, n, 1.0);
    poison(y, n), poison(dx, n);
    ref_ctx ctx = REF_CTX_DEFAULT;
    ref_softmax_forward(&ctx, 1, n, x, y);
    ctx.bug = bug;
    ref_softmax_backward(&ctx, 1, n, y, dy, dx);
    for (int j = 0; j < n; j++) absdx[j] = fabs(dx[j]);

    mpfr_t sum_dx, sum_y, s, expect, t;
    mpfr_inits2(64, sum_dx, sum_y, s, expect, t, (mpfr_ptr)0);
    sum_exactly(sum_dx, n, dx);
    sum_exactly(sum_y, n, y);
    /* s exactly: products of doubles are exact at 106 bits */
    mpfr_t *terms = malloc(n * sizeof *terms);
    mpfr_ptr ptrs[n];
    for (int j = 0; j < n; j++) {
        mpfr_init2(terms[j], 106);
        mpfr_set_d(terms[j], y[j], MPFR_RNDN);
        mpfr_mul_d(terms[j], terms[j], dy[j], MPFR_RNDN);
        ptrs[j] = terms[j];
    }
    mpfr_set_prec(s, 4400);
    mpfr_sum(s, ptrs, n, MPFR_RNDN);
    mpfr_set_prec(expect, 9000);
    mpfr_set_prec(t, 4400); /* 1 - sum_y exactly */
    mpfr_ui_sub(t, 1, sum_y, MPFR_RNDN);
    mpfr_mul(expect, s, t, MPFR_RNDN);
    mpfr_sub(expect, sum_dx, expect, MPFR_RNDN);
    sum_exactly(t, n, absdx);
    bool ok = fabs(mpfr_get_d(expect, MPFR_RNDA)) <= U64 * mpfr_get_d(t, MPFR_RNDU);
    for (int j = 0; j < n; j++) mpfr_clear(terms[j]);
    free(terms);
    mpfr_clears(sum_dx, sum_y, s, expect, t, (mpfr_ptr)0);
    return ok;
}

static void test_backward_identity(void **state)
{
    (void)state;
    uint64_t seed = test_seed("softmax_backward_identity");
    assert_true(backward_identity_holds(REF_BUG_NONE, seed));
    assert_false(backward_identity_holds(REF_BUG_DROP_TERM, seed));
}

/* A fixed-precision pass that is too short for the rounding must count the
 * outputs it could not prove instead of hiding them. */
static void test_unproven_counted(void **state)
{
    (void)state;
    ref_ctx ctx = REF_CTX_DEFAULT;
    ctx.prec = ctx.max_prec = 64; /* ~10 bits of slack after the sum's radius */
    enum { n = 4096 };
    static double x[n], y[n];
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("softmax_unproven_counted"));
    random_row(&rng, x, n, 1.0);
    ref_softmax_forward(&ctx, 1, n, x, y);
    assert_true(ctx.unproven > 0);
    assert_int_equal(ctx.escalations, 0);
    ref_ctx full = REF_CTX_DEFAULT;
    full.prec = 64; /* same start, escalation allowed: everything proven */
    ref_softmax_forward(&full, 1, n, x, y);
    assert_int_equal(full.unproven, 0);
    assert_true(full.escalations > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_values),
        cmocka_unit_test(test_correctly_rounded),
        cmocka_unit_test(test_sums_to_one),
        cmocka_unit_test(test_backward_identity),
        cmocka_unit_test(test_unproven_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
