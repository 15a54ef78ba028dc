/* tests/test_sum.c — the summation algorithms on hand-worked fp16 cases, the
 * hardware fast paths against the emulation, stochastic rounding's
 * determinism and its escape from stagnation, and the dot product with and
 * without FMA. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>

#include "precision/sum.h"
#include "reference/exact.h"
#include "tests/test_util.h"

static double sum_with(prec_sum_algo algo, prec_format acc, size_t block, const double *x, size_t n)
{
    prec_sum_config c = prec_sum_config_default(acc);
    c.algo = algo;
    c.block = block;
    return prec_sum(x, n, &c, NULL);
}

/* fp16: 1 + 2^-11 is a tie that rounds back to 1, so adding 2^-11 to 1
 * stagnates; the algorithms differ in whether they recover the lost bits. */
static void test_hand_worked_fp16(void **state)
{
    (void)state;
    const double h = 0x1p-11;
    double three[] = {1.0, h, h};
    assert_true(sum_with(PREC_SUM_RECURSIVE, PREC_FP16, 0, three, 3) == 1.0);
    assert_true(sum_with(PREC_SUM_KAHAN, PREC_FP16, 0, three, 3) == 1.0 + 0x1p-10);
    assert_true(sum_with(PREC_SUM_NEUMAIER, PREC_FP16, 0, three, 3) == 1.0 + 0x1p-10);
    double four[] = {1.0, 0.0, h, h};
    assert_true(sum_with(PREC_SUM_PAIRWISE, PREC_FP16, 0, four, 4) == 1.0 + 0x1p-10);
    assert_true(sum_with(PREC_SUM_RECURSIVE, PREC_FP16, 0, four, 4) == 1.0);
    double blocks[] = {1.0, h, h, h};
    assert_true(sum_with(PREC_SUM_BLOCKED, PREC_FP16, 2, blocks, 4) == 1.0 + 0x1p-10);
    /* wide: 1 + 3*2^-11 exact in fp32, then one fp16 rounding: a tie, to the
     * even neighbour 1 + 2^-9 */
    assert_true(sum_with(PREC_SUM_WIDE, PREC_FP16, 0, blocks, 4) == 1.0 + 0x1p-9);
    /* n = 1 rounds the addend into the accumulator; n = 0 is +0 */
    double third[] = {1.0 / 3.0};
    assert_true(sum_with(PREC_SUM_RECURSIVE, PREC_BF16, 0, third, 1) == prec_rne(1.0 / 3.0, PREC_BF16));
    assert_true(sum_with(PREC_SUM_PAIRWISE, PREC_FP32, 0, NULL, 0) == 0.0);
}

static void test_stats_count_stagnation(void **state)
{
    (void)state;
    enum { N = 10000 };
    double *x = malloc(N * sizeof *x);
    for (int i = 0; i < N; i++) x[i] = prec_rne(0.01, PREC_FP16);
    prec_sum_config c = prec_sum_config_default(PREC_FP16);
    prec_sum_stats st;
    double s = prec_sum(x, N, &c, &st);
    assert_int_equal(st.additions, N - 1);
    assert_true(st.stagnant > N / 2); /* 0.01 < half an ulp of 32 */
    assert_false(st.nonfinite);
    assert_true(s == 32.0);
    free(x);
}

/* The fp64 and fp32 round-to-nearest fast paths must agree bit for bit with
 * the emulation (forced by asking for saturation, which never triggers). */
static void test_fast_paths_match_emulation(void **state)
{
    (void)state;
    prec_rng r;
    prec_rng_seed(&r, test_seed("sum_fast_paths"));
    enum { N = 3000 };
    double *x = malloc(N * sizeof *x);
    prec_format fmts[] = {PREC_FP64, PREC_FP32};
    for (int trial = 0; trial < 6; trial++) {
        for (int i = 0; i < N; i++) {
            x[i] = prec_rng_normal(&r); /* the mantissa before the exponent, explicitly */
            x[i] *= ldexp(1.0, (int)(prec_rng_next(&r) % 40) - 20);
        }
        if (trial & 1) prec_round_array(x, x, N, PREC_FP32, PREC_ROUNDING_RNE, NULL);
        for (int f = 0; f < 2; f++) {
            for (int a = 0; a < PREC_SUM_NALGOS; a++) {
                prec_sum_config fast = prec_sum_config_default(fmts[f]);
                fast.algo = (prec_sum_algo)a;
                fast.wide = fmts[f];
                prec_sum_config slow = fast;
                slow.rounding.overflow = PREC_OVF_SATURATE;
                assert_true(prec_sum(x, N, &fast, NULL) == prec_sum(x, N, &slow, NULL));
            }
        }
    }
    free(x);
}

/* Same seed, same result; SR escapes the stagnation RNE falls into, and
 * its mean over repeated runs sits on the exact sum. */
static void test_stochastic_rounding(void **state)
{
    (void)state;
    enum { N = 10000, RUNS = 40 };
    double *x = malloc(N * sizeof *x);
    for (int i = 0; i < N; i++) x[i] = prec_rne(0.01, PREC_FP16);
    double exact = exact_sum(x, N);
    prec_sum_config c = prec_sum_config_default(PREC_FP16);
    c.rounding.mode = PREC_SR;
    prec_rng r1, r2;
    unsigned long long seed = test_seed("sum_sr");
    prec_rng_seed(&r1, seed);
    prec_rng_seed(&r2, seed);
    c.rng = &r1;
    double a = prec_sum(x, N, &c, NULL);
    c.rng = &r2;
    double b = prec_sum(x, N, &c, NULL);
    assert_true(a == b);
    /* every SR rounding error is below one ulp of the running sum (<= 2^-4
     * here, the sum staying below 128) and has mean zero given the past, so
     * the final error is a martingale with steps < 2^-4: Azuma gives
     * P(|err| > t) <= 2 exp(-t^2 / (2 N 2^-8)); t = 6 sqrt(N) 2^-4 makes
     * that 2e-8 per run */
    double t = 6.0 * sqrt((double)N) * 0x1p-4;
    double mean = 0;
    for (int k = 0; k < RUNS; k++) {
        double s = prec_sum(x, N, &c, NULL);
        assert_true(fabs(s - exact) <= t);
        mean += s / RUNS;
    }
    assert_true(fabs(mean - exact) <= t / sqrt((double)RUNS));
    c.rounding.mode = PREC_RNE;
    assert_true(fabs(prec_sum(x, N, &c, NULL) - exact) > 60.0); /* stagnates at 32 */
    free(x);
}

static void test_dot_fma(void **state)
{
    (void)state;
    /* fp16: (1 + 2^-10)^2 = 1 + 2^-9 + 2^-20; the product alone rounds to
     * 1 + 2^-9, which the FMA keeps exactly */
    double x[] = {-1.0 - 0x1p-9, 1.0 + 0x1p-10};
    double y[] = {1.0, 1.0 + 0x1p-10};
    prec_dot_config c = {PREC_FP16, PREC_ROUNDING_RNE, false, NULL};
    assert_true(prec_dot(x, y, 2, &c) == 0.0);
    c.fma = true;
    assert_true(prec_dot(x, y, 2, &c) == 0x1p-20);
    /* fp64 with FMA matches fma() */
    c.acc = PREC_FP64;
    double a[] = {0.1, 0.7}, b[] = {0.3, 0.9};
    assert_true(prec_dot(a, b, 2, &c) == fma(0.7, 0.9, 0.1 * 0.3));
}

static void test_names(void **state)
{
    (void)state;
    prec_sum_algo a;
    for (int i = 0; i < PREC_SUM_NALGOS; i++) {
        assert_int_equal(prec_sum_algo_parse(prec_sum_algo_name((prec_sum_algo)i), &a), 0);
        assert_int_equal(a, i);
    }
    assert_int_equal(prec_sum_algo_parse("bogus", &a), -1);
    assert_true(prec_format_contains(PREC_FP32, PREC_BF16));
    assert_true(prec_format_contains(PREC_FP16, PREC_E5M2));
    assert_true(prec_format_contains(PREC_FP16, PREC_E4M3));
    assert_false(prec_format_contains(PREC_FP16, PREC_BF16));
    assert_false(prec_format_contains(PREC_BF16, PREC_FP16));
    assert_false(prec_format_contains(PREC_E4M3, PREC_E5M2));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_worked_fp16),
        cmocka_unit_test(test_stats_count_stagnation),
        cmocka_unit_test(test_fast_paths_match_emulation),
        cmocka_unit_test(test_stochastic_rounding),
        cmocka_unit_test(test_dot_fma),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
