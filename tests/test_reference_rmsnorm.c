/* tests/test_reference_rmsnorm.c — RMSNorm (with and without gain) against
 * hand-worked values, the identity mean(y^2) = 1 (no gain, eps = 0), a plain
 * 2048-bit MPFR evaluation (forward bit-exact), and the backward (dx,
 * dgamma) against central finite differences of it; with planted-bug twins. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>

#include "reference/rmsnorm.h"
#include "tests/test_reference_util.h"
#include "tests/test_util.h"

#define HI_PREC 2048

/* Plain MPFR forward of one row, x[k] shifted by h (k >= 0):
 * y_j = gamma_j x_j / sqrt(mean(x^2) + eps). */
static void plain_row(long n, const double *x, const double *gamma, double eps, long k,
                      mpfr_srcptr h, mpfr_t *y, double *rstd)
{
    mpfr_t ms, t;
    mpfr_inits2(HI_PREC, ms, t, (mpfr_ptr)0);
    mpfr_set_zero(ms, 1);
    for (long j = 0; j < n; j++) {
        mpfr_set_d(y[j], x[j], MPFR_RNDN);
        if (j == k) mpfr_add(y[j], y[j], h, MPFR_RNDN);
        mpfr_sqr(t, y[j], MPFR_RNDN);
        mpfr_add(ms, ms, t, MPFR_RNDN);
    }
    mpfr_div_si(ms, ms, n, MPFR_RNDN);
    mpfr_add_d(ms, ms, eps, MPFR_RNDN);
    mpfr_rec_sqrt(ms, ms, MPFR_RNDN);
    if (rstd) *rstd = mpfr_get_d(ms, MPFR_RNDN);
    for (long j = 0; j < n; j++) {
        mpfr_mul(y[j], y[j], ms, MPFR_RNDN);
        if (gamma) mpfr_mul_d(y[j], y[j], gamma[j], MPFR_RNDN);
    }
    mpfr_clears(ms, t, (mpfr_ptr)0);
}

static void test_hand_values(void **state)
{
    (void)state;
    ref_ctx ctx = REF_CTX_DEFAULT;
    /* [3, 4]: mean(x^2) = 12.5, rstd = 1/sqrt(12.5) */
    double x[2] = {3, 4}, y[2], rstd;
    ref_rmsnorm_forward(&ctx, 1, 2, x, NULL, 0.0, y, &rstd);
    assert_true(rstd == 0.2828427124746190097603377448419396157139);
    assert_true(y[0] == 0.8485281374238570292810132345258188471418);
    assert_true(y[1] == 1.131370849898476039041350979367758462856);
    /* gain [1, -0.5] and eps = 3.5: mean(x^2) + eps = 16, rstd = 1/4 */
    double g[2] = {1, -0.5};
    ref_rmsnorm_forward(&ctx, 1, 2, x, g, 3.5, y, &rstd);
    assert_true(rstd == 0.25 && y[0] == 0.75 && y[1] == -0.5);
    /* backward of y = x rstd for x = [3, 4], dy = [1, 0], eps = 3.5:
     * dx = rstd dy - rstd^3 x mean(dy x) = [1/4 - 3 * 3/2 / 64, -4 * 3/2 / 64] */
    double dy[2] = {1, 0}, dx[2];
    ref_rmsnorm_backward(&ctx, 1, 2, x, NULL, dy, 3.5, dx, NULL);
    assert_true(dx[0] == 0.25 - 4.5 / 64 && dx[1] == -6.0 / 64);
    assert_int_equal(ctx.unproven, 0);
}

/* mean(y^2) = 1 for the exact y (no gain, eps = 0); y_j = Y_j (1 + d_j),
 * |d_j| <= u64, so |sum y^2 - n| <= (2 u64 + u64^2) sum y^2. */
static bool second_moment_holds(ref_bug bug, uint64_t seed, long n)
{
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    double *x = calloc((size_t)n, sizeof *x), *y = calloc((size_t)n, sizeof *y);
    double *sq = calloc((size_t)(2 * n), sizeof *sq);
    random_normal(&rng, x, n, 0.5, 3.0);
    ref_ctx ctx = REF_CTX_DEFAULT;
    ctx.bug = bug;
    ref_rmsnorm_forward(&ctx, 1, n, x, NULL, 0.0, y, NULL);
    for (long j = 0; j < n; j++) { /* y_j^2 exactly as hi + lo */
        sq[2 * j] = y[j] * y[j];
        sq[2 * j + 1] = fma(y[j], y[j], -sq[2 * j]);
    }
    mpfr_t s;
    mpfr_init2(s, 64);
    sum_exactly(s, 2 * n, sq);
    double bound = (2 * U64 + U64 * U64) * mpfr_get_d(s, MPFR_RNDU) * (1 + 0x1p-50);
    mpfr_sub_si(s, s, n, MPFR_RNDN);
    bool ok = fabs(mpfr_get_d(s, MPFR_RNDA)) <= bound;
    mpfr_clear(s);
    free(x);
    free(y);
    free(sq);
    return ok;
}

static void test_second_moment(void **state)
{
    (void)state;
    uint64_t seed = test_seed("rmsnorm_second_moment");
    const long widths[] = {1, 7, 768, 16384};
    for (int w = 0; w < 4; w++) {
        assert_true(second_moment_holds(REF_BUG_NONE, seed + w, widths[w]));
        if (widths[w] > 1) assert_false(second_moment_holds(REF_BUG_DROP_TERM, seed + w, widths[w]));
    }
}

/* Forward and rstd bit-equal to the plain values rounded; dx within half an
 * ulp of central differences of L = sum dy_j y_j (h = 2^-600 of the
 * input's scale); dgamma_j = sum_r dy_rj (x rstd)_rj within half an ulp of
 * the plain value.  gain selects the gain or no-gain form. */
static long mismatches(ref_bug bug, uint64_t seed, bool gain)
{
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    enum { rows = 3, n = 24 };
    const double eps = (double)1e-6f;
    double x[rows * n], g[n], dy[rows * n], y[rows * n], rstd[rows], dx[rows * n], dg[n];
    random_normal(&rng, x, rows * n, 0.3, 2.0);
    random_normal(&rng, g, n, 1.0, 0.5);
    random_normal(&rng, dy, rows * n, 0.0, 1.0);
    const double *gamma = gain ? g : NULL;
    poison(y, rows * n), poison(rstd, rows), poison(dx, rows * n), poison(dg, n);
    ref_ctx ctx = REF_CTX_DEFAULT;
    ctx.bug = bug;
    ref_rmsnorm_forward(&ctx, rows, n, x, gamma, eps, y, rstd);
    ref_rmsnorm_backward(&ctx, rows, n, x, gamma, dy, eps, dx, gain ? dg : NULL);

    long bad = 0;
    mpfr_t yp[n], ym[n], dg_hi[n], h, L, t;
    for (int j = 0; j < n; j++) {
        mpfr_init2(yp[j], HI_PREC);
        mpfr_init2(ym[j], HI_PREC);
        mpfr_init2(dg_hi[j], HI_PREC);
        mpfr_set_zero(dg_hi[j], 1);
    }
    mpfr_inits2(HI_PREC, h, L, t, (mpfr_ptr)0);
    for (int r = 0; r < rows; r++) {
        const double *xr = x + r * n, *dyr = dy + r * n;
        double rstd_hi;
        mpfr_set_zero(h, 1);
        plain_row(n, xr, gamma, eps, -1, h, yp, &rstd_hi);
        for (int j = 0; j < n; j++) bad += !is_nearest_double(y[r * n + j], yp[j]);
        bad += rstd[r] != rstd_hi;
        plain_row(n, xr, NULL, eps, -1, h, yp, NULL);
        for (int j = 0; j < n; j++) {
            mpfr_mul_d(t, yp[j], dyr[j], MPFR_RNDN);
            mpfr_add(dg_hi[j], dg_hi[j], t, MPFR_RNDN);
        }
        for (int k = 0; k < n; k++) {
            mpfr_set_d(h, fabs(xr[k]) > 1 ? fabs(xr[k]) : 1, MPFR_RNDN);
            mpfr_mul_2si(h, h, -600, MPFR_RNDN);
            plain_row(n, xr, gamma, eps, k, h, yp, NULL);
            mpfr_neg(h, h, MPFR_RNDN);
            plain_row(n, xr, gamma, eps, k, h, ym, NULL);
            mpfr_set_zero(L, 1);
            for (int j = 0; j < n; j++) {
                mpfr_sub(t, yp[j], ym[j], MPFR_RNDN);
                mpfr_mul_d(t, t, dyr[j], MPFR_RNDN);
                mpfr_add(L, L, t, MPFR_RNDN);
            }
            mpfr_div(L, L, h, MPFR_RNDN);
            mpfr_div_si(L, L, -2, MPFR_RNDN); /* h was negated */
            bad += !within_half_ulp(dx[r * n + k], L, 0x1p-500);
        }
    }
    for (int j = 0; j < n; j++) {
        if (gain) bad += !within_half_ulp(dg[j], dg_hi[j], 0x1p-1000);
        mpfr_clears(yp[j], ym[j], dg_hi[j], (mpfr_ptr)0);
    }
    mpfr_clears(h, L, t, (mpfr_ptr)0);
    assert_int_equal(ctx.unproven, 0);
    return bad;
}

static void test_against_plain_mpfr(void **state)
{
    (void)state;
    uint64_t seed = test_seed("rmsnorm_against_plain_mpfr");
    for (int gain = 0; gain <= 1; gain++) {
        assert_int_equal(mismatches(REF_BUG_NONE, seed + gain, gain), 0);
        assert_true(mismatches(REF_BUG_TRUNCATE, seed + gain, gain) > 0);
        assert_true(mismatches(REF_BUG_DROP_TERM, seed + gain, gain) > 0);
    }
}

/* Rows that a narrow format rounded to the same values share their
 * statistics; where their dy cancel, dgamma is exactly 0, which the
 * reference must prove (ref_group_rows) rather than leave as a ball around
 * 0 that no precision decides.  Returns whether every column came out
 * exactly 0 and proven. */
static bool cancelling_rows_give_exact_zero(ref_bug bug, uint64_t seed)
{
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    enum { n = 16 };
    double x[4 * n], dy[4 * n], g[n], dg[n];
    cancelling_rows(&rng, n, x, g, dy);
    poison(dg, n);
    ref_ctx ctx = REF_CTX_DEFAULT;
    ctx.bug = bug;
    ref_rmsnorm_backward(&ctx, 4, n, x, g, dy, (double)1e-5f, NULL, dg);
    bool all_zero = true;
    for (int j = 0; j < n; j++) all_zero = all_zero && dg[j] == 0.0;
    return all_zero && ctx.unproven == 0;
}

static void test_identical_rows_exact_zero(void **state)
{
    (void)state;
    uint64_t seed = test_seed("rmsnorm_identical_rows_exact_zero");
    assert_true(cancelling_rows_give_exact_zero(REF_BUG_NONE, seed));
    assert_false(cancelling_rows_give_exact_zero(REF_BUG_DROP_TERM, seed)); /* the last row's dy no longer cancels */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_values),
        cmocka_unit_test(test_second_moment),
        cmocka_unit_test(test_against_plain_mpfr),
        cmocka_unit_test(test_identical_rows_exact_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
