/* tests/test_exact.c — the exact accumulator against MPFR.
 *
 * The reference is MPFR's exact sum (mpfr_sum at 4400 bits, more than the
 * 2^-2148 .. 2^2112 span of any sum of products of doubles), rounded with
 * mpfr_get_d, which rounds correctly in every mode, subnormal range
 * included.  Every check has a twin with a planted bug (a dropped term, the
 * wrong rounding mode) that must fail the same comparison. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mpfr.h>

#include "precision/rng.h"
#include "reference/exact.h"
#include "tests/test_util.h"

#define EXACT_PREC 4400

static const mpfr_rnd_t mpfr_modes[4] = {MPFR_RNDN, MPFR_RNDZ, MPFR_RNDU, MPFR_RNDD};
static const prec_round_mode our_modes[4] = {PREC_RNE, PREC_RZ, PREC_RU, PREC_RD};

/* out = sum x_i y_i exactly (y == NULL: sum x_i). */
static void mpfr_exact_dot(mpfr_t out, const double *x, const double *y, size_t n)
{
    mpfr_t *terms = malloc(n * sizeof *terms);
    mpfr_ptr *ptrs = malloc(n * sizeof *ptrs);
    for (size_t i = 0; i < n; i++) {
        mpfr_init2(terms[i], 106);
        mpfr_set_d(terms[i], x[i], MPFR_RNDN);
        if (y) mpfr_mul_d(terms[i], terms[i], y[i], MPFR_RNDN); /* 53 x 53 bits: exact */
        ptrs[i] = terms[i];
    }
    mpfr_set_prec(out, EXACT_PREC);
    mpfr_sum(out, ptrs, n, MPFR_RNDN); /* exact at this precision */
    for (size_t i = 0; i < n; i++) mpfr_clear(terms[i]);
    free(terms);
    free(ptrs);
}

static int same_double(double a, double b)
{
    return (isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b)) || (a == 0 && b == 0);
}

/* The check: our accumulator, rounded in mode k, equals MPFR's.  With
 * drop_term the accumulator leaves out term 0 (planted bug); with
 * wrong_mode it rounds toward zero whatever k asks (planted bug).
 * Returns the number of mismatches over the four modes and the exact value. */
static int check_dot(const double *x, const double *y, size_t n, int drop_term, int wrong_mode, int use_array)
{
    mpfr_t ref, ours;
    mpfr_init2(ref, EXACT_PREC);
    mpfr_init2(ours, 64);
    mpfr_exact_dot(ref, x, y, n);
    exact_acc a;
    exact_acc_init(&a);
    size_t first = drop_term ? 1 : 0;
    if (y) {
        for (size_t i = first; i < n; i++) exact_acc_add_product(&a, x[i], y[i]);
    } else if (use_array) {
        exact_acc_add_array(&a, x + first, n - first);
    } else {
        for (size_t i = first; i < n; i++) exact_acc_add(&a, x[i]);
    }
    int bad = 0;
    for (int k = 0; k < 4; k++) {
        double want = mpfr_get_d(ref, mpfr_modes[k]);
        double got = exact_acc_round(&a, wrong_mode ? PREC_RZ : our_modes[k]);
        if (!same_double(want, got)) bad++;
    }
    exact_acc_get_mpfr(&a, ours);
    if (mpfr_cmp(ours, ref) != 0) bad++;
    mpfr_clears(ref, ours, (mpfr_ptr)0);
    return bad;
}

/* A double with a random exponent in [lo, hi] (subnormals when lo < -1022). */
static double wide_random(prec_rng *r, int lo, int hi)
{
    double m = 1.0 + prec_rng_uniform(r);
    int e = lo + (int)(prec_rng_next(r) % (uint64_t)(hi - lo + 1));
    double v = ldexp(m, e);
    return (prec_rng_next(r) & 1) ? -v : v;
}

/* Random data of several kinds; returns n. */
static size_t make_case(prec_rng *r, int kind, double *x, double *y, size_t cap)
{
    size_t n = 1 + prec_rng_next(r) % cap;
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case 0: /* whole double range, subnormals included */
            x[i] = wide_random(r, -1074, 1023);
            y[i] = wide_random(r, -1074, 1023);
            break;
        case 1: /* moderate range */
            x[i] = prec_rng_normal(r);
            y[i] = prec_rng_normal(r);
            break;
        case 2: /* subnormals and the smallest normals only */
            x[i] = wide_random(r, -1074, -1020);
            y[i] = wide_random(r, -60, 10);
            break;
        default: /* heavy cancellation: pairs +v, -v, plus small noise */
            x[i] = (i % 2 == 0) ? wide_random(r, 0, 900) : -x[i - 1];
            if (i % 7 == 3) x[i] = wide_random(r, -1074, -900);
            y[i] = 1.0;
            break;
        }
    }
    return n;
}

static void test_random_sums_and_dots(void **state)
{
    (void)state;
    prec_rng r;
    prec_rng_seed(&r, test_seed("exact_random"));
    enum { CAP = 3000 };
    double *x = malloc(CAP * sizeof *x), *y = malloc(CAP * sizeof *y);
    for (int trial = 0; trial < 160; trial++) {
        int kind = trial % 4;
        size_t n = make_case(&r, kind, x, y, trial % 8 == 0 ? CAP : 40);
        assert_int_equal(check_dot(x, NULL, n, 0, 0, 0), 0);
        assert_int_equal(check_dot(x, NULL, n, 0, 0, 1), 0);
        if (kind != 3) assert_int_equal(check_dot(x, y, n, 0, 0, 0), 0);
    }
    free(x);
    free(y);
}

/* The array fast path peels three 42-bit levels; terms far below a block's
 * largest take the slow path.  Mix both inside blocks of 1024. */
static void test_array_path_mixed_ranges(void **state)
{
    (void)state;
    prec_rng r;
    prec_rng_seed(&r, test_seed("exact_array_mixed"));
    enum { N = 5000 };
    double *x = malloc(N * sizeof *x);
    for (int trial = 0; trial < 6; trial++) {
        for (size_t i = 0; i < N; i++) {
            int spread = 20 + 40 * trial; /* 20 .. 220 bits below the top */
            x[i] = wide_random(&r, -spread, 0);
            if (prec_rng_next(&r) % 97 == 0) x[i] = ldexp(x[i], -700); /* far below */
        }
        size_t n = N - (size_t)trial; /* not a multiple of 4 or of the block */
        assert_int_equal(check_dot(x, NULL, n, 0, 0, 1), 0);
    }
    /* one sign, all near the block's largest: the lane sums use their headroom */
    for (size_t i = 0; i < N; i++) x[i] = fabs(wide_random(&r, -1, 0));
    assert_int_equal(check_dot(x, NULL, N, 0, 0, 1), 0);
    free(x);
}

static void test_hard_cases(void **state)
{
    (void)state;
    /* headroom above DBL_MAX: the big terms cancel, the tiny one survives */
    double a[] = {DBL_MAX, DBL_MAX, 0x1p-1074, -DBL_MAX, -DBL_MAX};
    assert_true(exact_sum(a, 5) == 0x1p-1074);
    /* products at both ends of the range */
    exact_acc acc;
    exact_acc_init(&acc);
    exact_acc_add_product(&acc, DBL_MAX, DBL_MAX);
    exact_acc_add_product(&acc, 0x1p-1074, 0x1p-1074); /* 2^-2148 */
    exact_acc_add_product(&acc, -DBL_MAX, DBL_MAX);
    assert_true(exact_acc_round(&acc, PREC_RNE) == 0.0);
    assert_true(exact_acc_round(&acc, PREC_RU) == 0x1p-1074);
    assert_true(exact_acc_round(&acc, PREC_RD) == 0.0);
    assert_int_equal(exact_acc_sign(&acc), 1);
    /* overflow: IEEE to inf, toward zero to DBL_MAX */
    double big[] = {DBL_MAX, DBL_MAX};
    exact_acc_init(&acc);
    exact_acc_add_array(&acc, big, 2);
    assert_true(isinf(exact_acc_round(&acc, PREC_RNE)));
    assert_true(exact_acc_round(&acc, PREC_RZ) == DBL_MAX);
    assert_true(exact_acc_round(&acc, PREC_RD) == DBL_MAX);
    /* the halfway point between DBL_MAX and 2^1024 rounds to inf (even) */
    double half_up[] = {DBL_MAX, 0x1p970};
    assert_true(isinf(exact_sum(half_up, 2)));
    double just_below[] = {DBL_MAX, 0x1p970, -0x1p-1074};
    assert_true(exact_sum(just_below, 3) == DBL_MAX);
    /* ties to even, decided by a bit 1000 binades below */
    double tie[] = {1.0, 0x1p-53};
    assert_true(exact_sum(tie, 2) == 1.0);
    double tie_broken[] = {1.0, 0x1p-53, 0x1p-1000};
    assert_true(exact_sum(tie_broken, 3) == 1.0 + 0x1p-52);
    /* non-finite terms */
    double inf_terms[] = {1.0, INFINITY, -5.0};
    assert_true(exact_sum(inf_terms, 3) == INFINITY);
    double both_inf[] = {INFINITY, -INFINITY};
    assert_true(isnan(exact_sum(both_inf, 2)));
    double nan_term[] = {1.0, NAN};
    assert_true(isnan(exact_sum(nan_term, 2)));
    double zero_times_inf_x[] = {0.0}, zero_times_inf_y[] = {INFINITY};
    assert_true(isnan(exact_dot(zero_times_inf_x, zero_times_inf_y, 1)));
    /* the sum of an empty array is +0; x + (-x) is +0 */
    assert_true(exact_sum(NULL, 0) == 0.0 && !signbit(exact_sum(NULL, 0)));
    /* fp32 entry points: 0.1f * 3 added exactly, no double rounding */
    float f[] = {0.1f, 0.1f, 0.1f};
    assert_true(exact_sum_f32(f, 3) == 3.0 * (double)0.1f);
    float g[] = {3.0f, -2.0f}, h[] = {0.5f, 0.25f};
    assert_true(exact_dot_f32(g, h, 2) == 1.0);
    assert_true(exact_dot_abs_f32(g, h, 2) == 2.0);
}

/* Rounding into a narrow format from the exact value, not from its double:
 * 1 + 2^-24 + 2^-80 is just above the fp32 tie 1 + 2^-24, so RNE goes up,
 * while rounding the double 1 + 2^-24 (the tie itself) would go to 1. */
static void test_round_to_formats(void **state)
{
    (void)state;
    double v[] = {1.0, 0x1p-24, 0x1p-80};
    exact_acc a;
    exact_acc_init(&a);
    exact_acc_add_array(&a, v, 3);
    assert_true(exact_acc_round_to(&a, PREC_FP32, PREC_ROUNDING_RNE, 0) == 1.0 + 0x1p-23);
    prec_rounding rz = {PREC_RZ, PREC_OVF_IEEE, false};
    assert_true(exact_acc_round_to(&a, PREC_FP32, rz, 0) == 1.0);
    double w[] = {1.0, -0x1p-80};
    exact_acc_init(&a);
    exact_acc_add_array(&a, w, 2);
    prec_rounding rd = {PREC_RD, PREC_OVF_IEEE, false};
    assert_true(exact_acc_round_to(&a, PREC_BF16, rd, 0) == 1.0 - 0x1p-8);
    assert_true(exact_acc_round_to(&a, PREC_BF16, PREC_ROUNDING_RNE, 0) == 1.0);
    /* random exact values vs prec_round2 on MPFR's (hi, lo) */
    prec_rng r;
    prec_rng_seed(&r, test_seed("exact_round_to"));
    for (int trial = 0; trial < 300; trial++) {
        double x[8];
        for (int i = 0; i < 8; i++) x[i] = wide_random(&r, -40, 4);
        mpfr_t ref, rest;
        mpfr_inits2(EXACT_PREC, ref, rest, (mpfr_ptr)0);
        mpfr_exact_dot(ref, x, NULL, 8);
        double hi = mpfr_get_d(ref, MPFR_RNDN);
        mpfr_sub_d(rest, ref, hi, MPFR_RNDN);
        double lo = mpfr_get_d(rest, MPFR_RNDN);
        exact_acc_init(&a);
        exact_acc_add_array(&a, x, 8);
        for (int f = PREC_FP32; f < PREC_NFORMATS; f++) {
            for (int m = 0; m < PREC_SR; m++) {
                prec_rounding rr = {(prec_round_mode)m, PREC_OVF_IEEE, false};
                double want = prec_round2(hi, lo, (prec_format)f, rr, 0);
                assert_true(same_double(exact_acc_round_to(&a, (prec_format)f, rr, 0), want));
            }
        }
        mpfr_clears(ref, rest, (mpfr_ptr)0);
    }
}

/* Planted-bug twins: the same MPFR comparison must catch a dropped term
 * and a wrong rounding mode. */
static void test_planted_bugs_fail(void **state)
{
    (void)state;
    prec_rng r;
    prec_rng_seed(&r, test_seed("exact_planted"));
    double x[64], y[64];
    int dropped_caught = 0, mode_caught = 0, trials = 40;
    for (int t = 0; t < trials; t++) {
        size_t n;
        do n = make_case(&r, 1, x, y, 64); /* two terms at least, all of them drawn */
        while (n < 2);
        if (check_dot(x, NULL, n, 1, 0, t & 1) > 0) dropped_caught++;
        if (check_dot(x, y, n, 0, 1, 0) > 0) mode_caught++;
    }
    /* a dropped nonzero term always changes the exact value (get_mpfr check);
     * RZ differs from RN, RU or RD on every inexact sum */
    assert_int_equal(dropped_caught, trials);
    assert_int_equal(mode_caught, trials);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_sums_and_dots),
        cmocka_unit_test(test_array_path_mixed_ranges),
        cmocka_unit_test(test_hard_cases),
        cmocka_unit_test(test_round_to_formats),
        cmocka_unit_test(test_planted_bugs_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
