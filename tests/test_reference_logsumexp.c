/* tests/test_reference_logsumexp.c — log-sum-exp against hand-worked values,
 * the identities lse(x + c) = lse(x) + c and lse([x, x]) = lse(x) + log 2,
 * a plain 1024-bit MPFR evaluation, and the backward against central finite
 * differences of that evaluation; with planted-bug twins. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>

#include "reference/logsumexp.h"
#include "tests/test_reference_util.h"
#include "tests/test_util.h"

#define HI_PREC 1024

/* out = log sum exp(x_j + (j == k ? h : 0)) at HI_PREC (h = 0: plain lse). */
static void plain_lse(mpfr_ptr out, long n, const double *x, long k, mpfr_srcptr h)
{
    mpfr_t t;
    mpfr_init2(t, HI_PREC);
    mpfr_set_prec(out, HI_PREC);
    mpfr_set_zero(out, 1);
    for (long j = 0; j < n; j++) {
        mpfr_set_d(t, x[j], MPFR_RNDN);
        if (j == k) mpfr_add(t, t, h, MPFR_RNDN);
        mpfr_exp(t, t, MPFR_RNDN);
        mpfr_add(out, out, t, MPFR_RNDN);
    }
    mpfr_log(out, out, MPFR_RNDN);
    mpfr_clear(t);
}

static void test_hand_values(void **state)
{
    (void)state;
    ref_ctx ctx = REF_CTX_DEFAULT;
    double x[2] = {0.0, 1.0}, lse;
    ref_logsumexp_forward(&ctx, 1, 2, x, &lse);
    assert_true(lse == 1.313261687518222834048995494967855641915); /* log(1 + e) */
    double masked[2] = {-INFINITY, 3.0};
    ref_logsumexp_forward(&ctx, 1, 2, masked, &lse);
    assert_true(lse == 3.0);
    double none[2] = {-INFINITY, -INFINITY};
    ref_logsumexp_forward(&ctx, 1, 2, none, &lse);
    assert_true(lse == -INFINITY);
    double big[2] = {1000.0, 1000.0}; /* no overflow: log 2 + 1000 */
    ref_logsumexp_forward(&ctx, 1, 2, big, &lse);
    assert_true(lse == 1000.69314718055994530941723212145817656807550013436);
    double dlse = 2.0, dx[2];
    ref_logsumexp_backward(&ctx, 1, 2, big, &dlse, dx);
    assert_true(dx[0] == 1.0 && dx[1] == 1.0);
}

/* Both identities hold exactly for exact values; the computed ones are each
 * within u64 of their exact values, so
 *   |lse(x + c) - lse(x) - c| <= u64 (|lse(x + c)| + |lse(x)|)   (x + c exact)
 *   |lse([x, x]) - lse(x) - log 2| <= u64 (|lse([x, x])| + |lse(x)|) + 2^-1000. */
static bool identities_hold(ref_bug bug, uint64_t seed)
{
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    enum { n = 200 };
    double x[n], xc[n], xx[2 * n], l, lc, lxx;
    /* multiples of 2^-30 in (-40, 40): x + c is exact for integer c */
    for (int j = 0; j < n; j++) x[j] = ldexp(round(ldexp(8.0 * prec_rng_normal(&rng), 30)), -30);
    /* the largest term last: a planted bug that drops the last term then moves
     * lse by at least e^max / sum >= 1/n, far above the identities' slack, on
     * every seed (a small last term could hide the bug below u64) */
    int jmax = 0;
    for (int j = 1; j < n; j++)
        if (x[j] > x[jmax]) jmax = j;
    double tmp = x[n - 1];
    x[n - 1] = x[jmax];
    x[jmax] = tmp;
    double c = (double)((long)(prec_rng_next(&rng) % 201) - 100);
    for (int j = 0; j < n; j++) {
        xc[j] = x[j] + c;
        xx[j] = xx[n + j] = x[j];
    }
    ref_ctx ctx = REF_CTX_DEFAULT;
    ctx.bug = bug;
    ref_logsumexp_forward(&ctx, 1, n, x, &l);
    ref_logsumexp_forward(&ctx, 1, n, xc, &lc);
    ref_logsumexp_forward(&ctx, 1, 2 * n, xx, &lxx);
    mpfr_t d;
    mpfr_init2(d, 300);
    mpfr_set_d(d, lc, MPFR_RNDN);
    mpfr_sub_d(d, d, l, MPFR_RNDN);
    mpfr_sub_d(d, d, c, MPFR_RNDN); /* exact: three doubles within 2^250 of each other */
    bool shift_ok = fabs(mpfr_get_d(d, MPFR_RNDA)) <= U64 * (fabs(lc) + fabs(l));
    mpfr_const_log2(d, MPFR_RNDN);
    mpfr_neg(d, d, MPFR_RNDN);
    mpfr_add_d(d, d, lxx, MPFR_RNDN);
    mpfr_sub_d(d, d, l, MPFR_RNDN);
    bool dup_ok = fabs(mpfr_get_d(d, MPFR_RNDA)) <= U64 * (fabs(lxx) + fabs(l)) + 0x1p-250;
    mpfr_clear(d);
    return shift_ok && dup_ok;
}

static void test_identities(void **state)
{
    (void)state;
    uint64_t seed = test_seed("logsumexp_identities");
    for (int i = 0; i < 4; i++) assert_true(identities_hold(REF_BUG_NONE, seed + i));
    assert_false(identities_hold(REF_BUG_DROP_TERM, seed)); /* lse([x,x]) breaks */
}

/* Forward equals the plain 1024-bit value rounded; backward is within half
 * an ulp of the central difference dlse (lse(x + h e_k) - lse(x - h e_k)) / 2h,
 * h = 2^-300, whose error is O(h^2) = 2^-600 relative.  Returns mismatches. */
static long mismatches(ref_bug bug, uint64_t seed)
{
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    enum { rows = 3, n = 40 };
    double x[rows * n], lse[rows], dlse[rows], dx[rows * n];
    random_normal(&rng, x, rows * n, 0.0, 3.0);
    random_normal(&rng, dlse, rows, 0.0, 1.0);
    for (int i = 0; i < rows * n; i++) dx[i] = NAN;
    ref_ctx ctx = REF_CTX_DEFAULT;
    ctx.bug = bug;
    ref_logsumexp_forward(&ctx, rows, n, x, lse);
    ref_logsumexp_backward(&ctx, rows, n, x, dlse, dx);
    long bad = 0;
    mpfr_t hi, lo, h;
    mpfr_inits2(HI_PREC, hi, lo, h, (mpfr_ptr)0);
    for (int r = 0; r < rows; r++) {
        mpfr_set_zero(h, 1);
        plain_lse(hi, n, x + r * n, -1, h);
        bad += !is_nearest_double(lse[r], hi);
        for (int k = 0; k < n; k++) {
            mpfr_set_ui_2exp(h, 1, -300, MPFR_RNDN);
            plain_lse(hi, n, x + r * n, k, h);
            mpfr_neg(h, h, MPFR_RNDN);
            plain_lse(lo, n, x + r * n, k, h);
            mpfr_sub(hi, hi, lo, MPFR_RNDN);
            mpfr_mul_2si(hi, hi, 299, MPFR_RNDN); /* / 2h */
            mpfr_mul_d(hi, hi, dlse[r], MPFR_RNDN);
            bad += !within_half_ulp(dx[r * n + k], hi, 0x1p-550);
        }
    }
    mpfr_clears(hi, lo, h, (mpfr_ptr)0);
    return bad;
}

static void test_against_plain_mpfr(void **state)
{
    (void)state;
    uint64_t seed = test_seed("logsumexp_against_plain_mpfr");
    assert_int_equal(mismatches(REF_BUG_NONE, seed), 0);
    assert_true(mismatches(REF_BUG_TRUNCATE, seed) > 0);
    assert_true(mismatches(REF_BUG_DROP_TERM, seed) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_values),
        cmocka_unit_test(test_identities),
        cmocka_unit_test(test_against_plain_mpfr),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
