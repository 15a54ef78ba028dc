/* tests/test_metrics.c — error metrics.
 *   - prec_ulp_distance against an independent count: every value of fp16,
 *     bf16, e4m3 and e5m2 decoded, sorted, +-0 merged; the distance between
 *     two values is the difference of their positions in that list, and a
 *     point t of the way between neighbours sits at position i + t.
 *   - prec_normwise_rel_err(_max) against MPFR at 256 bits on random vectors
 *     at scales 1, 2^+-1000 (squares overflow/underflow double), within
 *     (n + 10) 2^-52 relative, a bound on the scaled sum of squares' rounding.
 *   - hand-worked values and the documented edge cases (zero reference, NaN,
 *     infinities, signed zeros) of every metric.
 * Planted twins: "ulp distance" as |x - ref| / ulp(ref) and a norm without
 * scaling must fail the same checks. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <mpfr.h>
#include <stdio.h>
#include <stdlib.h>

#include "precision/metrics.h"
#include "precision/rng.h"
#include "tests/test_util.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorted distinct finite values of f (formats of at most 16 bits). */
static double *sorted_values(prec_format f, size_t *n)
{
    int width = prec_format_get(f)->storage_bits;
    double *v = malloc(((size_t)1 << width) * sizeof *v);
    assert_non_null(v);
    size_t k = 0;
    for (uint64_t b = 0; b < (1ull << width); b++) {
        double x = prec_decode(b, f);
        if (isfinite(x) && !(x == 0.0 && signbit(x))) v[k++] = x; /* one zero */
    }
    qsort(v, k, sizeof *v, cmp_double);
    *n = k;
    return v;
}

typedef double (*distance_fn)(double x, double ref, prec_format f);

/* Mismatches of dist against list positions on random pairs (values and
 * points between neighbours). */
static long check_distance(distance_fn dist, prec_format f, prec_rng *rng, size_t pairs, bool quiet)
{
    size_t n;
    double *v = sorted_values(f, &n);
    long bad = 0;
    for (size_t k = 0; k < pairs; k++) {
        size_t i = prec_rng_next(rng) % n, j = prec_rng_next(rng) % n;
        double t = (k % 2 && i + 1 < n) ? 0.25 * (double)(prec_rng_next(rng) % 4) : 0.0;
        double x = v[i] + t * (v[i + (t > 0)] - v[i]); /* exact: few bits */
        double want = fabs((double)i + t - (double)j);
        double got = dist(x, v[j], f);
        if (!(fabs(got - want) <= 1e-12 * (1 + want))) {
            if (!quiet && bad < 5)
                printf("  %s distance(%a, %a) = %.6g, counted %.6g\n", prec_format_name(f), x, v[j], got, want);
            bad++;
        }
    }
    free(v);
    return bad;
}

static void test_ulp_distance_counts(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_ulp_distance_counts"));
    const prec_format fs[] = {PREC_FP16, PREC_BF16, PREC_E4M3, PREC_E5M2};
    long checked = 0;
    for (size_t k = 0; k < 4; k++) {
        assert_int_equal(check_distance(prec_ulp_distance, fs[k], &rng, 200000, false), 0);
        checked += 200000;
    }
    printf("ulp distance: %ld pairs match the enumerated count\n", checked);
    /* wide formats: neighbours are 1 apart across binades and through zero */
    assert_true(prec_ulp_distance(1.0, nextafter(1.0, 0.0), PREC_FP64) == 1.0);
    assert_true(prec_ulp_distance(0x1p-1074, -0x1p-1074, PREC_FP64) == 2.0);
    assert_true(prec_ulp_distance(0x1.fffffffffffffp+1023, -0x1.fffffffffffffp+1023, PREC_FP64) ==
                2.0 * (double)0x7fefffffffffffffull);
    assert_true(prec_ulp_distance(1.0, 1.0 + 0x1p-23, PREC_FP32) == 1.0);
    assert_true(prec_ulp_distance(1.0, 1.0 + 0x1p-24, PREC_FP32) == 0.5);
    assert_true(prec_ulp_distance(1.0, 1.0 + 0x1p-10, PREC_TF32) == 1.0);
    assert_true(prec_ulp_distance(0.0, -0.0, PREC_FP16) == 0.0);
    /* past max finite the top binade's grid continues */
    assert_true(prec_ulp_distance(448.0, 480.0, PREC_E4M3) == 1.0);
    assert_true(prec_ulp_distance(65504.0, 65536.0, PREC_FP16) == 1.0);
    assert_true(isinf(prec_ulp_distance(INFINITY, 1.0, PREC_FP16)));
    assert_true(prec_ulp_distance(-INFINITY, -INFINITY, PREC_FP16) == 0.0);
    assert_true(isnan(prec_ulp_distance(NAN, 1.0, PREC_FP16)));
}

static void test_scalar_metrics(void **state)
{
    (void)state;
    assert_true(prec_abs_err(1.5, 1.0) == 0.5);
    assert_true(prec_abs_err(-0.0, 0.0) == 0.0);
    assert_true(isinf(prec_abs_err(INFINITY, 1.0)));
    assert_true(prec_abs_err(INFINITY, INFINITY) == 0.0);
    assert_true(isinf(prec_abs_err(INFINITY, -INFINITY)));
    assert_true(isnan(prec_abs_err(NAN, 1.0)));
    assert_true(prec_rel_err(1.5, 1.0) == 0.5);
    assert_true(prec_rel_err(-3.0, -2.0) == 0.5);
    assert_true(prec_rel_err(0.0, 0.0) == 0.0);
    assert_true(isinf(prec_rel_err(1e-300, 0.0)));
    assert_true(prec_rel_err(0x1.fffffffffffffp+1023, -0x1.fffffffffffffp+1023) == 2.0); /* diff overflows */
    assert_true(isinf(prec_rel_err(1.0, INFINITY)));
    assert_true(isnan(prec_rel_err(1.0, NAN)));
    assert_true(prec_ulp_error(1.0 + 3 * 0x1p-10, 1.0, PREC_FP16) == 3.0);
    assert_true(prec_ulp_error(1.0, 1.0 - 0x1p-11, PREC_FP16) == 1.0); /* ulp of the binade below 1 */
    assert_true(prec_ulp_error(3 * 0x1p-24, 0.0, PREC_FP16) == 3.0);  /* ulp(0) = min subnormal */
    /* correct bits: -log2 rel, clamped to [0, p] */
    assert_true(prec_correct_bits(1.0 + 0x1p-10, 1.0, PREC_FP32) == 10.0);
    assert_true(prec_correct_bits(1.0, 1.0, PREC_BF16) == 8.0);
    assert_true(prec_correct_bits(1.0 + 0x1p-20, 1.0, PREC_BF16) == 8.0);
    assert_true(prec_correct_bits(3.0, 1.0, PREC_FP32) == 0.0);
    assert_true(prec_correct_bits(1.0, 0.0, PREC_FP32) == 0.0);
    assert_true(prec_correct_bits(0.0, 0.0, PREC_FP32) == 24.0);
    assert_true(prec_correct_bits(NAN, 1.0, PREC_FP32) == 0.0);
    assert_true(prec_correct_bits(INFINITY, 1.0, PREC_FP32) == 0.0);
    assert_true(isnan(prec_correct_bits(1.0, NAN, PREC_FP32)));
}

typedef double (*norm_fn)(const double *x, const double *ref, size_t n);

/* ||x - ref||_2 / ||ref||_2 and the max-norm ratio in MPFR at 256 bits. */
static void mpfr_norms(const double *x, const double *ref, size_t n, double *two, double *mx)
{
    mpfr_t d, sd, sr, t, md, mr;
    mpfr_inits2(256, d, sd, sr, t, md, mr, (mpfr_ptr)0);
    mpfr_set_zero(sd, 1);
    mpfr_set_zero(sr, 1);
    mpfr_set_zero(md, 1);
    mpfr_set_zero(mr, 1);
    for (size_t i = 0; i < n; i++) {
        mpfr_set_d(d, x[i], MPFR_RNDN);
        mpfr_sub_d(d, d, ref[i], MPFR_RNDN); /* exact at 256 bits for these inputs */
        mpfr_abs(d, d, MPFR_RNDN);
        mpfr_max(md, md, d, MPFR_RNDN);
        mpfr_sqr(t, d, MPFR_RNDN);
        mpfr_add(sd, sd, t, MPFR_RNDN);
        mpfr_set_d(t, fabs(ref[i]), MPFR_RNDN);
        mpfr_max(mr, mr, t, MPFR_RNDN);
        mpfr_sqr(t, t, MPFR_RNDN);
        mpfr_add(sr, sr, t, MPFR_RNDN);
    }
    mpfr_div(t, sd, sr, MPFR_RNDN);
    mpfr_sqrt(t, t, MPFR_RNDN);
    *two = mpfr_get_d(t, MPFR_RNDN);
    mpfr_div(t, md, mr, MPFR_RNDN);
    *mx = mpfr_get_d(t, MPFR_RNDN);
    mpfr_clears(d, sd, sr, t, md, mr, (mpfr_ptr)0);
}

/* Mismatches of norm (2-norm ratio) against MPFR; the max-norm function
 * is checked alongside when check_max. */
static long check_norms(norm_fn norm, prec_rng *rng, bool check_max, bool quiet, long *checked)
{
    const int scales[] = {0, 1000, -1000, 500, -540};
    long bad = 0;
    for (size_t sc = 0; sc < 5; sc++) {
        for (int trial = 0; trial < 40; trial++) {
            size_t n = 1 + prec_rng_next(rng) % 300;
            double *x = malloc(n * sizeof *x), *ref = malloc(n * sizeof *ref);
            assert_non_null(x);
            assert_non_null(ref);
            for (size_t i = 0; i < n; i++) {
                ref[i] = ldexp(prec_rng_normal(rng), scales[sc]);
                x[i] = ref[i] * (1.0 + 1e-3 * prec_rng_normal(rng));
            }
            double two, mx;
            mpfr_norms(x, ref, n, &two, &mx);
            double tol = (double)(n + 10) * 0x1p-52; /* relative */
            double got = norm(x, ref, n);
            if (!(fabs(got - two) <= tol * two)) {
                if (!quiet && bad < 5) printf("  2-norm ratio at scale 2^%d: %a, MPFR %a\n", scales[sc], got, two);
                bad++;
            }
            if (check_max && !(fabs(prec_normwise_rel_err_max(x, ref, n) - mx) <= 0x1p-51 * mx)) bad++;
            (*checked)++;
            free(x);
            free(ref);
        }
    }
    return bad;
}

static void test_normwise(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_normwise"));
    long checked = 0;
    assert_int_equal(check_norms(prec_normwise_rel_err, &rng, true, false, &checked), 0);
    printf("normwise: %ld vectors match MPFR\n", checked);
    /* edge cases */
    const double z[2] = {0.0, -0.0}, one[2] = {1.0, 0.0}, nan_v[2] = {NAN, 1.0};
    const double inf_a[2] = {INFINITY, 1.0}, inf_b[2] = {INFINITY, 2.0};
    assert_true(prec_normwise_rel_err(z, z, 2) == 0.0);
    assert_true(isinf(prec_normwise_rel_err(one, z, 2)));
    assert_true(isnan(prec_normwise_rel_err(nan_v, one, 2)));
    assert_true(prec_normwise_rel_err(inf_b, inf_a, 2) == 1.0); /* shared inf left out */
    assert_true(isinf(prec_normwise_rel_err(inf_a, one, 2)));
    assert_true(prec_normwise_rel_err(one, one, 0) == 0.0);
    assert_true(prec_normwise_rel_err_max(inf_b, inf_a, 2) == 1.0);
}

/* Planted twins. */
static double norm_unscaled(const double *x, const double *ref, size_t n)
{
    double sd = 0, sr = 0;
    for (size_t i = 0; i < n; i++) {
        sd += (x[i] - ref[i]) * (x[i] - ref[i]);
        sr += ref[i] * ref[i];
    }
    return sqrt(sd / sr);
}

static void test_planted_metrics_are_caught(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_planted_metrics_are_caught"));
    long bad = 0;
    const prec_format fs[] = {PREC_FP16, PREC_BF16, PREC_E4M3, PREC_E5M2};
    for (size_t k = 0; k < 4; k++) bad += check_distance(prec_ulp_error, fs[k], &rng, 20000, true);
    printf("  planted ulp distance = |x - ref|/ulp(ref): %ld mismatches\n", bad);
    assert_true(bad > 0);
    long checked = 0;
    long nb = check_norms(norm_unscaled, &rng, false, true, &checked);
    printf("  planted unscaled 2-norm: %ld of %ld vectors mismatch\n", nb, checked);
    assert_true(nb > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ulp_distance_counts),
        cmocka_unit_test(test_scalar_metrics),
        cmocka_unit_test(test_normwise),
        cmocka_unit_test(test_planted_metrics_are_caught),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
