/* tests/test_reference_layernorm.c — LayerNorm against hand-worked values,
 * the identities mean(y) = 0 and mean(y^2) = 1 (no gain, eps = 0) on rows
 * with mean/std up to 1e8, a plain 2048-bit MPFR evaluation (forward
 * bit-exact), and the backward (dx, dgamma, dbeta) against central finite
 * differences of that evaluation; with planted-bug twins. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>

#include "reference/layernorm.h"
#include "tests/test_reference_util.h"
#include "tests/test_util.h"

#define HI_PREC 2048

/* Independent plain-MPFR forward of one row at HI_PREC, with x[k] (k >= 0)
 * shifted by h: y_j = gamma_j (x_j - mu) / sqrt(var + eps) + beta_j. */
static void plain_row(long n, const double *x, const double *gamma, const double *beta,
                      double eps, long k, mpfr_srcptr h, mpfr_t *y, double *mean, double *rstd)
{
    mpfr_t mu, var, t;
    mpfr_inits2(HI_PREC, mu, var, t, (mpfr_ptr)0);
    mpfr_set_zero(mu, 1);
    for (long j = 0; j < n; j++) {
        mpfr_set_d(y[j], x[j], MPFR_RNDN);
        if (j == k) mpfr_add(y[j], y[j], h, MPFR_RNDN);
        mpfr_add(mu, mu, y[j], MPFR_RNDN);
    }
    mpfr_div_si(mu, mu, n, MPFR_RNDN);
    mpfr_set_zero(var, 1);
    for (long j = 0; j < n; j++) {
        mpfr_sub(y[j], y[j], mu, MPFR_RNDN);
        mpfr_sqr(t, y[j], MPFR_RNDN);
        mpfr_add(var, var, t, MPFR_RNDN);
    }
    mpfr_div_si(var, var, n, MPFR_RNDN);
    mpfr_add_d(var, var, eps, MPFR_RNDN);
    mpfr_rec_sqrt(var, var, MPFR_RNDN);
    if (mean) *mean = mpfr_get_d(mu, MPFR_RNDN);
    if (rstd) *rstd = mpfr_get_d(var, MPFR_RNDN);
    for (long j = 0; j < n; j++) {
        mpfr_mul(y[j], y[j], var, MPFR_RNDN);
        if (gamma) mpfr_mul_d(y[j], y[j], gamma[j], MPFR_RNDN);
        if (beta) mpfr_add_d(y[j], y[j], beta[j], MPFR_RNDN);
    }
    mpfr_clears(mu, var, t, (mpfr_ptr)0);
}

static void test_hand_values(void **state)
{
    (void)state;
    ref_ctx ctx = REF_CTX_DEFAULT;
    double x[4] = {1, 2, 3, 4}, y[4], mean, rstd;
    ref_layernorm_forward(&ctx, 1, 4, x, NULL, NULL, 0.0, y, &mean, &rstd);
    /* mu = 2.5, var = 1.25, rstd = 1/sqrt(1.25), y = (x - 2.5) rstd */
    assert_true(mean == 2.5);
    assert_true(rstd == 0.8944271909999158785636694674925104941762);
    assert_true(y[0] == -1.341640786499873817845504201238765741264);
    assert_true(y[1] == -0.4472135954999579392818347337462552470881);
    assert_true(y[2] == 0.4472135954999579392818347337462552470881);
    assert_true(y[3] == 1.341640786499873817845504201238765741264);
    /* gain 2, bias 1, eps = 2.75: var + eps = 4, rstd = 1/2, y = x - 1.5 */
    double g[4] = {2, 2, 2, 2}, b[4] = {1, 1, 1, 1};
    ref_layernorm_forward(&ctx, 1, 4, x, g, b, 2.75, y, NULL, &rstd);
    assert_true(rstd == 0.5);
    assert_true(y[0] == -0.5 && y[1] == 0.5 && y[2] == 1.5 && y[3] == 2.5);
    /* constant row: xhat = 0, y = beta */
    double c[3] = {7, 7, 7}, yc[3];
    ref_layernorm_forward(&ctx, 1, 3, c, NULL, b, 1e-5, yc, NULL, NULL);
    assert_true(yc[0] == 1.0 && yc[2] == 1.0);
    assert_int_equal(ctx.unproven, 0);
}

/* mean(y) = 0 and mean(y^2) = 1 exactly for the exact y (no gain, eps = 0);
 * with y_j = Y_j (1 + d_j), |d_j| <= u64:
 *   |sum y| <= u64 sum |y|,   |sum y^2 - n| <= (2 u64 + u64^2) sum y^2. */
static bool moments_hold(ref_bug bug, uint64_t seed, long n, double mean_over_std)
{
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    double *x = calloc((size_t)n, sizeof *x), *y = calloc((size_t)n, sizeof *y);
    double *v = calloc((size_t)n, sizeof *v);
    random_normal(&rng, x, n, mean_over_std, 1.0);
    ref_ctx ctx = REF_CTX_DEFAULT;
    ctx.bug = bug;
    ref_layernorm_forward(&ctx, 1, n, x, NULL, NULL, 0.0, y, NULL, NULL);
    mpfr_t s, a;
    mpfr_inits2(64, s, a, (mpfr_ptr)0);
    for (long j = 0; j < n; j++) v[j] = fabs(y[j]);
    sum_exactly(s, n, y);
    sum_exactly(a, n, v);
    bool ok = fabs(mpfr_get_d(s, MPFR_RNDA)) <= U64 * mpfr_get_d(a, MPFR_RNDU);
    /* squares: y_j^2 exactly as sums of two doubles (hi + lo by fma) */
    double *sq = calloc((size_t)(2 * n), sizeof *sq);
    for (long j = 0; j < n; j++) {
        sq[2 * j] = y[j] * y[j];
        sq[2 * j + 1] = fma(y[j], y[j], -sq[2 * j]);
    }
    sum_exactly(s, 2 * n, sq);
    double bound = (2 * U64 + U64 * U64) * mpfr_get_d(s, MPFR_RNDU) * (1 + 0x1p-50);
    mpfr_sub_si(s, s, n, MPFR_RNDN); /* exact at 4400 bits */
    ok = ok && fabs(mpfr_get_d(s, MPFR_RNDA)) <= bound;
    assert_int_equal(ctx.unproven, 0);
    mpfr_clears(s, a, (mpfr_ptr)0);
    free(x);
    free(y);
    free(v);
    free(sq);
    return ok;
}

static void test_moments(void **state)
{
    (void)state;
    uint64_t seed = test_seed("layernorm_moments");
    const double ratios[] = {0.0, 1e2, 1e4, 1e8};
    const long widths[] = {2, 33, 1024, 4096};
    for (int i = 0; i < 4; i++)
        for (int w = 0; w < 4; w++) {
            assert_true(moments_hold(REF_BUG_NONE, seed + 4 * i + w, widths[w], ratios[i]));
            if (widths[w] > 2)
                assert_false(moments_hold(REF_BUG_DROP_TERM, seed + 4 * i + w, widths[w], ratios[i]));
        }
}

/* Forward, mean, rstd, dgamma and dbeta equal (or are within half an ulp of)
 * the plain 2048-bit values; dx is within half an ulp of the central
 * difference of L = sum_j dy_j y_j (h = 2^-600 of the input's scale, error
 * O(h^2)).  Returns the number of mismatching outputs. */
static long mismatches(ref_bug bug, uint64_t seed, double mean_over_std)
{
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    enum { rows = 3, n = 24 };
    const double eps = (double)1e-5f;
    double x[rows * n], g[n], b[n], dy[rows * n], y[rows * n], mean[rows], rstd[rows];
    double dx[rows * n], dg[n], db[n];
    random_normal(&rng, x, rows * n, mean_over_std, 1.0);
    random_normal(&rng, g, n, 1.0, 0.5);
    random_normal(&rng, b, n, 0.0, 0.5);
    random_normal(&rng, dy, rows * n, 0.0, 1.0);
    poison(y, rows * n), poison(mean, rows), poison(rstd, rows);
    poison(dx, rows * n), poison(dg, n), poison(db, n);
    ref_ctx ctx = REF_CTX_DEFAULT;
    ctx.bug = bug;
    ref_layernorm_forward(&ctx, rows, n, x, g, b, eps, y, mean, rstd);
    ref_layernorm_backward(&ctx, rows, n, x, g, dy, eps, dx, dg, db);

    long bad = 0;
    mpfr_t yp[n], ym[n], h, L, t;
    for (int j = 0; j < n; j++) {
        mpfr_init2(yp[j], HI_PREC);
        mpfr_init2(ym[j], HI_PREC);
    }
    mpfr_inits2(HI_PREC, h, L, t, (mpfr_ptr)0);
    mpfr_t dgamma_fd[n];
    for (int j = 0; j < n; j++) {
        mpfr_init2(dgamma_fd[j], HI_PREC);
        mpfr_set_zero(dgamma_fd[j], 1);
    }
    for (int r = 0; r < rows; r++) {
        const double *xr = x + r * n, *dyr = dy + r * n;
        mpfr_set_zero(h, 1);
        double mean_hi, rstd_hi;
        plain_row(n, xr, g, b, eps, -1, h, yp, &mean_hi, &rstd_hi);
        for (int j = 0; j < n; j++) bad += !is_nearest_double(y[r * n + j], yp[j]);
        bad += mean[r] != mean_hi;
        bad += rstd[r] != rstd_hi;
        /* dgamma_j = sum_r dy_rj xhat_rj, xhat from the plain forward without gain */
        plain_row(n, xr, NULL, NULL, eps, -1, h, yp, NULL, NULL);
        for (int j = 0; j < n; j++) {
            mpfr_mul_d(t, yp[j], dyr[j], MPFR_RNDN);
            mpfr_add(dgamma_fd[j], dgamma_fd[j], t, MPFR_RNDN);
        }
        for (int k = 0; k < n; k++) {
            double scale = fabs(xr[k]) > 1 ? fabs(xr[k]) : 1;
            mpfr_set_d(h, scale, MPFR_RNDN);
            mpfr_mul_2si(h, h, -600, MPFR_RNDN);
            plain_row(n, xr, g, b, eps, k, h, yp, NULL, NULL);
            mpfr_neg(h, h, MPFR_RNDN);
            plain_row(n, xr, g, b, eps, k, h, ym, NULL, NULL);
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
        bad += !within_half_ulp(dg[j], dgamma_fd[j], 0x1p-1000);
        mpfr_set_zero(t, 1); /* dbeta: three doubles add exactly at HI_PREC */
        for (int r = 0; r < rows; r++) mpfr_add_d(t, t, dy[r * n + j], MPFR_RNDN);
        bad += !is_nearest_double(db[j], t);
        mpfr_clear(dgamma_fd[j]);
    }
    mpfr_clears(h, L, t, (mpfr_ptr)0);
    for (int j = 0; j < n; j++) {
        mpfr_clear(yp[j]);
        mpfr_clear(ym[j]);
    }
    assert_int_equal(ctx.unproven, 0);
    return bad;
}

static void test_against_plain_mpfr(void **state)
{
    (void)state;
    uint64_t seed = test_seed("layernorm_against_plain_mpfr");
    assert_int_equal(mismatches(REF_BUG_NONE, seed, 0.0), 0);
    assert_int_equal(mismatches(REF_BUG_NONE, seed + 1, 1e4), 0);
    assert_true(mismatches(REF_BUG_TRUNCATE, seed, 0.0) > 0);
    assert_true(mismatches(REF_BUG_DROP_TERM, seed, 0.0) > 0);
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
    ref_layernorm_backward(&ctx, 4, n, x, g, dy, (double)1e-5f, NULL, dg, NULL);
    bool all_zero = true;
    for (int j = 0; j < n; j++) all_zero = all_zero && dg[j] == 0.0;
    return all_zero && ctx.unproven == 0;
}

static void test_identical_rows_exact_zero(void **state)
{
    (void)state;
    uint64_t seed = test_seed("layernorm_identical_rows_exact_zero");
    assert_true(cancelling_rows_give_exact_zero(REF_BUG_NONE, seed));
    assert_false(cancelling_rows_give_exact_zero(REF_BUG_DROP_TERM, seed)); /* the last row's dy no longer cancels */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_values),
        cmocka_unit_test(test_moments),
        cmocka_unit_test(test_against_plain_mpfr),
        cmocka_unit_test(test_identical_rows_exact_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
