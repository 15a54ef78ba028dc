/* tests/test_bounds.c — every algorithm's error is within its worst-case
 * bound on random data, in every format and rounding mode that has a bound;
 * the same check fails for a dropped term, a wrong rounding mode and an
 * off-by-one block; the per-kernel dot and row-reduction bounds hold for an
 * emulated kernel and fail for its planted bugs.
 *
 * The error |computed - exact| is itself computed exactly (superaccumulator,
 * rounded up), so the check "error <= bound" has no tolerance of its own. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "precision/bounds.h"
#include "precision/sum.h"
#include "reference/exact.h"
#include "tests/test_util.h"

/* |computed - sum x_i|, exact, rounded up. */
static double sum_error(const double *x, size_t n, double computed)
{
    exact_acc a;
    exact_acc_init(&a);
    exact_acc_add_array(&a, x, n);
    exact_acc_add(&a, -computed);
    int sign = exact_acc_sign(&a);
    return sign >= 0 ? exact_acc_round(&a, PREC_RU) : -exact_acc_round(&a, PREC_RD);
}

/* |computed - sum x_i y_i|, exact, rounded up. */
static double dot_error(const double *x, const double *y, size_t n, double computed)
{
    exact_acc a;
    exact_acc_init(&a);
    for (size_t i = 0; i < n; i++) exact_acc_add_product(&a, x[i], y[i]);
    exact_acc_add(&a, -computed);
    int sign = exact_acc_sign(&a);
    return sign >= 0 ? exact_acc_round(&a, PREC_RU) : -exact_acc_round(&a, PREC_RD);
}

/* THE check for sums: error of `computed` against the exact sum of x, within
 * the worst-case bound of cfg (as computed from the data).  A NaN bound
 * (none exists) counts as a pass only when asked to skip it. */
static bool within_sum_bound(const prec_sum_config *cfg, const double *x, size_t n, double computed)
{
    double bound = prec_sum_bound(cfg, n, exact_sum_abs(x, n), fabs(exact_sum(x, n)));
    return sum_error(x, n, computed) <= bound;
}

/* Positive uniform or zero-mean normal data, already values of `fmt`. */
static void make_data(prec_rng *r, double *x, size_t n, int kind, prec_format fmt)
{
    for (size_t i = 0; i < n; i++) x[i] = kind == 0 ? prec_rng_uniform(r) : prec_rng_normal(r);
    prec_round_array(x, x, n, fmt, PREC_ROUNDING_RNE, NULL);
}

static size_t random_n(prec_rng *r, size_t max)
{
    /* log-uniform in [2, max] */
    double t = prec_rng_uniform(r);
    size_t n = (size_t)exp(log(2.0) + t * (log((double)max) - log(2.0)));
    return n < 2 ? 2 : n;
}

static void test_gamma_and_probability(void **state)
{
    (void)state;
    assert_true(prec_gamma(10, 0x1p-11) == 10 * 0x1p-11 / (1 - 10 * 0x1p-11));
    assert_true(isinf(prec_gamma(2048, 0x1p-11)));
    assert_true(prec_gamma(0, 0.1) == 0.0);
    assert_true(prec_bound_unit(PREC_BF16, PREC_RNE) == 0x1p-8);
    assert_true(prec_bound_unit(PREC_BF16, PREC_SR) == 0x1p-7);
    /* lambda from the failure probability and back */
    double u = 0x1p-24, lambda = prec_prob_lambda(1e6, 1e-6, u);
    assert_true(fabs(prec_prob_fail(1e6, lambda, u) - 1e-6) < 1e-12);
    /* gamma~ is first order lambda sqrt(p) u */
    double gt = prec_gamma_tilde(1e6, 1.0, u);
    assert_true(fabs(gt - 1e3 * u) < 1e-3 * 1e3 * u);
    /* depths */
    prec_sum_config c = prec_sum_config_default(PREC_FP32);
    c.algo = PREC_SUM_PAIRWISE;
    assert_true(prec_sum_depth(&c, 1024) == 10 && prec_sum_depth(&c, 1025) == 11);
    c.algo = PREC_SUM_BLOCKED;
    c.block = 32;
    assert_true(prec_sum_depth(&c, 1000) == 31 + 31); /* 32 blocks */
    assert_true(prec_sum_depth(&c, 10) == 9);
    assert_int_equal(prec_prob_status_of(PREC_RZ), PREC_PROB_NONE);
    assert_true(isnan(prec_sum_prob_bound(&(prec_sum_config){.algo = PREC_SUM_RECURSIVE, .acc = PREC_FP32,
                                                             .rounding = {PREC_RU, PREC_OVF_IEEE, false}},
                                          10, 1.0, 1.0, 1e-3)));
}

/* Every algorithm x accumulator format x rounding mode x data kind, random
 * n: within the worst-case bound.  Under SR the probabilistic bound is a
 * theorem too: checked at failure probability 1e-9. */
static void test_every_algorithm_within_bound(void **state)
{
    (void)state;
    prec_rng r, sr;
    prec_rng_seed(&r, test_seed("bounds_all"));
    prec_rng_seed(&sr, prec_rng_next(&r));
    enum { NMAX = 4000 };
    double *x = malloc(NMAX * sizeof *x);
    prec_format accs[] = {PREC_FP64, PREC_FP32, PREC_BF16, PREC_FP16, PREC_E4M3, PREC_E5M2};
    prec_format addends[] = {PREC_FP32, PREC_FP32, PREC_BF16, PREC_FP16, PREC_E4M3, PREC_E5M2};
    int checked = 0, finite = 0;
    for (int f = 0; f < 6; f++) {
        for (int a = 0; a < PREC_SUM_NALGOS; a++) {
            for (int m = 0; m < PREC_NROUNDS; m++) {
                for (int rep = 0; rep < 12; rep++) {
                    int kind = rep % 2;
                    size_t n = random_n(&r, accs[f] == PREC_FP64 || accs[f] == PREC_FP32 ? NMAX : 200);
                    prec_sum_config c = prec_sum_config_default(accs[f]);
                    c.algo = (prec_sum_algo)a;
                    c.addend = addends[rep % 3 == 2 ? 1 : f]; /* sometimes wider addends than acc */
                    c.rounding.mode = (prec_round_mode)m;
                    c.rng = &sr;
                    c.block = 1 + prec_rng_next(&r) % 64;
                    make_data(&r, x, n, kind, c.addend);
                    prec_sum_stats st;
                    double s = prec_sum(x, n, &c, &st);
                    if (st.nonfinite) continue; /* bounds assume no overflow */
                    double sum_abs = exact_sum_abs(x, n), abs_exact = fabs(exact_sum(x, n));
                    double bound = prec_sum_bound(&c, n, sum_abs, abs_exact);
                    if (isnan(bound)) { /* compensated sums outside round to nearest */
                        assert_true(a == PREC_SUM_KAHAN || a == PREC_SUM_NEUMAIER);
                        assert_true(m != PREC_RNE);
                        continue;
                    }
                    double err = sum_error(x, n, s);
                    if (!(err <= bound))
                        fail_msg("%s acc=%s addend=%s round=%s n=%zu: error %g > bound %g",
                                 prec_sum_algo_name(c.algo), prec_format_name(c.acc),
                                 prec_format_name(c.addend), prec_round_mode_name(c.rounding.mode), n, err,
                                 bound);
                    checked++;
                    finite += isfinite(bound);
                    if (m == PREC_SR) {
                        double pb = prec_sum_prob_bound(&c, n, sum_abs, abs_exact, 1e-9);
                        assert_true(err <= pb);
                    }
                }
            }
        }
    }
    print_message("checked %d sums, %d with a finite bound\n", checked, finite);
    assert_true(finite > 400);
    free(x);
}

/* Planted bug 1: one term dropped.  fp64 and fp32 (where n u is small, the
 * bound is far below the smallest term in [0.5, 1)): every algorithm fails. */
static void test_dropped_term_fails(void **state)
{
    (void)state;
    prec_rng r;
    prec_rng_seed(&r, test_seed("bounds_drop"));
    double x[1000];
    prec_format accs[] = {PREC_FP64, PREC_FP32};
    for (int f = 0; f < 2; f++) {
        for (int a = 0; a < PREC_SUM_NALGOS; a++) {
            for (int rep = 0; rep < 5; rep++) {
                size_t n = random_n(&r, 1000);
                for (size_t i = 0; i < n; i++) x[i] = prec_rne(0.5 + 0.5 * prec_rng_uniform(&r), PREC_FP32);
                prec_sum_config c = prec_sum_config_default(accs[f]);
                c.algo = (prec_sum_algo)a;
                c.addend = PREC_FP32;
                size_t drop = prec_rng_next(&r) % n;
                double tmp = x[drop];
                x[drop] = 0.0; /* the buggy loop skips it */
                double buggy = prec_sum(x, n, &c, NULL);
                x[drop] = tmp;
                assert_true(within_sum_bound(&c, x, n, prec_sum(x, n, &c, NULL)));
                assert_false(within_sum_bound(&c, x, n, buggy));
            }
        }
    }
}

/* Planted bug 2: the accumulator rounds toward zero (or up) while the bound
 * is the one for round to nearest.  At small n the nearest-rounding bound is
 * tight (n = 2: u |x1 + x2|), and a directed rounding of a sum just above a
 * power of two errs by almost 2u: over random trials the check must fail at
 * least once.  Kahan is exempt: its bound 2u sum |x_i| leaves room for one
 * directed rounding, so no data can tell. */
static void test_wrong_rounding_fails(void **state)
{
    (void)state;
    prec_rng r;
    prec_rng_seed(&r, test_seed("bounds_wrong_mode"));
    prec_format accs[] = {PREC_FP32, PREC_BF16, PREC_FP16};
    for (int f = 0; f < 3; f++) {
        for (int a = 0; a < PREC_SUM_NALGOS; a++) {
            if (a == PREC_SUM_KAHAN) continue;
            int caught = 0;
            for (int trial = 0; trial < 400 && !caught; trial++) {
                size_t n = 2 + prec_rng_next(&r) % 3;
                double x[4];
                int p = prec_format_get(accs[f])->precision;
                for (size_t i = 0; i < n; i++) { /* magnitudes spread over p + 4 binades */
                    const int e = -(int)(prec_rng_next(&r) % (uint64_t)(p + 5)); /* before the mantissa, explicitly */
                    x[i] = prec_rne(ldexp(1.0 + prec_rng_uniform(&r), e), accs[f]);
                }
                prec_sum_config right = prec_sum_config_default(accs[f]);
                right.algo = (prec_sum_algo)a;
                right.wide = PREC_FP32;
                if (a == PREC_SUM_WIDE && accs[f] == PREC_FP32) right.wide = PREC_FP64;
                prec_sum_config wrong = right;
                wrong.rounding.mode = trial % 2 ? PREC_RZ : PREC_RU;
                assert_true(within_sum_bound(&right, x, n, prec_sum(x, n, &right, NULL)));
                if (!within_sum_bound(&right, x, n, prec_sum(x, n, &wrong, NULL))) caught = 1;
            }
            if (!caught) fail_msg("wrong rounding not caught: %s %s", prec_sum_algo_name((prec_sum_algo)a),
                                  prec_format_name(accs[f]));
        }
    }
}

/* Blocked summation assembled from recursive sums of blocks [start, end)
 * and a recursive sum of the block sums; `overlap` plants the off-by-one
 * (each block reads one term past its end, so boundary terms count twice). */
static double blocked_by_hand(const double *x, size_t n, size_t b, prec_format acc, int overlap)
{
    prec_sum_config rec = prec_sum_config_default(acc);
    double *sums = malloc(((n + b - 1) / b) * sizeof *sums);
    size_t nb = 0;
    for (size_t start = 0; start < n; start += b) {
        size_t len = n - start < b ? n - start : b;
        if (overlap && start + len < n) len++;
        sums[nb++] = len == 1 ? x[start] : prec_sum(x + start, len, &rec, NULL);
    }
    double s = nb == 1 ? sums[0] : prec_sum(sums, nb, &rec, NULL);
    free(sums);
    return s;
}

/* Planted bug 3: off-by-one block boundary.  The hand-assembled blocked sum
 * is bit-identical to prec_sum's; with the overlap it fails the check. */
static void test_off_by_one_block_fails(void **state)
{
    (void)state;
    prec_rng r;
    prec_rng_seed(&r, test_seed("bounds_block"));
    double x[2000];
    prec_format accs[] = {PREC_FP64, PREC_FP32, PREC_FP16};
    for (int f = 0; f < 3; f++) {
        for (int rep = 0; rep < 10; rep++) {
            size_t n = accs[f] == PREC_FP16 ? 3 + prec_rng_next(&r) % 10 : random_n(&r, 2000);
            size_t b = 2 + prec_rng_next(&r) % 31;
            if (b >= n) b = n - 1 > 1 ? n - 1 : 1;
            for (size_t i = 0; i < n; i++) x[i] = prec_rne(0.5 + 0.5 * prec_rng_uniform(&r), accs[f]);
            prec_sum_config c = prec_sum_config_default(accs[f]);
            c.algo = PREC_SUM_BLOCKED;
            c.block = b;
            double good = blocked_by_hand(x, n, b, accs[f], 0);
            assert_true(good == prec_sum(x, n, &c, NULL));
            assert_true(within_sum_bound(&c, x, n, good));
            if (n > b) assert_false(within_sum_bound(&c, x, n, blocked_by_hand(x, n, b, accs[f], 1)));
        }
    }
}

/* prec_dot within gamma_n sum |x_i y_i|, with and without FMA; its twins
 * (dropped term, truncating accumulator) fail. */
static void test_dot_bound(void **state)
{
    (void)state;
    prec_rng r;
    prec_rng_seed(&r, test_seed("bounds_dot"));
    double x[600], y[600];
    prec_format accs[] = {PREC_FP32, PREC_BF16, PREC_FP16};
    int mode_caught = 0;
    for (int f = 0; f < 3; f++) {
        for (int rep = 0; rep < 40; rep++) {
            size_t n = accs[f] == PREC_FP32 ? random_n(&r, 600) : 2 + prec_rng_next(&r) % 8;
            for (size_t i = 0; i < n; i++) {
                x[i] = prec_rne(0.5 + 0.5 * prec_rng_uniform(&r), accs[f]);
                y[i] = prec_rne(0.5 + 0.5 * prec_rng_uniform(&r), accs[f]);
            }
            prec_dot_config c = {accs[f], PREC_ROUNDING_RNE, rep % 2 == 1, NULL};
            double sap = exact_dot_abs(x, y, n);
            double bound = prec_dot_bound(&c, n, sap);
            assert_true(dot_error(x, y, n, prec_dot(x, y, n, &c)) <= bound);
            if (accs[f] == PREC_FP32)
                assert_false(dot_error(x, y, n, prec_dot(x + 1, y + 1, n - 1, &c)) <= bound);
        }
        /* wrong mode: at n = 1, 2 the bound is tight (gamma_1 |x y| for one
         * product) and a product just above a power of two rounded up errs
         * by almost 2u; magnitudes spread so that products are inexact */
        for (int rep = 0; rep < 200; rep++) {
            size_t n = 1 + prec_rng_next(&r) % 2;
            for (size_t i = 0; i < n; i++) {
                const int e = -(int)(prec_rng_next(&r) % 8); /* before the mantissa, explicitly */
                x[i] = prec_rne(ldexp(1.0 + prec_rng_uniform(&r), e), accs[f]);
                y[i] = prec_rne(1.0 + prec_rng_uniform(&r), accs[f]);
            }
            prec_dot_config c = {accs[f], PREC_ROUNDING_RNE, rep % 2 == 1, NULL};
            double bound = prec_dot_bound(&c, n, exact_dot_abs(x, y, n));
            assert_true(dot_error(x, y, n, prec_dot(x, y, n, &c)) <= bound);
            prec_dot_config wrong = c;
            wrong.rounding.mode = rep % 4 < 2 ? PREC_RU : PREC_RZ;
            if (!(dot_error(x, y, n, prec_dot(x, y, n, &wrong)) <= bound)) mode_caught++;
        }
        if (mode_caught == 0) fail_msg("wrong rounding not caught in the %s dot", prec_format_name(accs[f]));
        mode_caught = 0;
    }
}

/* An emulated GPU dot kernel: bf16 or fp8 inputs, products exact in fp32,
 * fp32 accumulation in blocks of 16 (a tensor-core-like order), output
 * rounded to bf16.  Within prec_bound_dot_kernel; a truncated output and a
 * dropped term fail it. */
static double emulated_kernel(const double *a, const double *b, size_t k, prec_format out, prec_round_mode out_mode,
                              size_t skip)
{
    double p[512];
    for (size_t i = 0; i < k; i++) p[i] = i == skip ? 0.0 : a[i] * b[i]; /* exact in double */
    prec_sum_config c = prec_sum_config_default(PREC_FP32);
    c.algo = PREC_SUM_BLOCKED;
    c.block = 16;
    double acc = prec_sum(p, k, &c, NULL);
    prec_rounding r = {out_mode, PREC_OVF_IEEE, false};
    return prec_round(acc, out, r, 0);
}

static void test_kernel_dot_bound(void **state)
{
    (void)state;
    prec_rng r;
    prec_rng_seed(&r, test_seed("bounds_kernel_dot"));
    double a[512], b[512];
    prec_format ins[] = {PREC_BF16, PREC_E4M3, PREC_FP16};
    int trunc_caught = 0;
    for (int f = 0; f < 3; f++) {
        for (int rep = 0; rep < 60; rep++) {
            size_t k = random_n(&r, 512);
            for (size_t i = 0; i < k; i++) {
                a[i] = prec_rne(prec_rng_normal(&r), ins[f]);
                b[i] = prec_rne(prec_rng_normal(&r), ins[f]);
            }
            prec_dot_kernel_model m = prec_dot_kernel_model_for((int)k, ins[f], PREC_FP32, PREC_BF16);
            assert_true(m.u_prod == 0.0);
            double sap = exact_dot_abs(a, b, k), y = exact_dot(a, b, k);
            double bound = prec_bound_dot_kernel(&m, sap, fabs(y));
            double good = emulated_kernel(a, b, k, PREC_BF16, PREC_RNE, (size_t)-1);
            assert_true(dot_error(a, b, k, good) <= bound);
            double truncated = emulated_kernel(a, b, k, PREC_BF16, PREC_RZ, (size_t)-1);
            if (!(dot_error(a, b, k, truncated) <= bound)) trunc_caught++;
            /* drop the largest product: fails whenever it exceeds the bound */
            size_t big = 0;
            for (size_t i = 1; i < k; i++)
                if (fabs(a[i] * b[i]) > fabs(a[big] * b[big])) big = i;
            if (fabs(a[big] * b[big]) > 2 * bound)
                assert_false(dot_error(a, b, k, emulated_kernel(a, b, k, PREC_BF16, PREC_RNE, big)) <= bound);
        }
    }
    assert_true(trunc_caught > 0);
}

/* Row reduction: sum of squares in fp32 with each square rounded (term
 * error u), any order; an fp16 accumulator claimed as fp32 fails. */
static void test_row_reduce_bound(void **state)
{
    (void)state;
    prec_rng r;
    prec_rng_seed(&r, test_seed("bounds_row"));
    double x[4096], sq[4096];
    int caught = 0;
    for (int rep = 0; rep < 20; rep++) {
        size_t n = random_n(&r, 4096);
        for (size_t i = 0; i < n; i++) {
            x[i] = prec_rne(prec_rng_normal(&r), PREC_BF16);
            sq[i] = prec_rne(x[i] * x[i], PREC_FP32);
        }
        double bound = prec_bound_row_reduce(n, 0x1p-24, 0x1p-24, exact_dot_abs(x, x, n));
        prec_sum_config c = prec_sum_config_default(PREC_FP32);
        c.algo = rep % 2 ? PREC_SUM_PAIRWISE : PREC_SUM_RECURSIVE;
        assert_true(dot_error(x, x, n, prec_sum(sq, n, &c, NULL)) <= bound);
        prec_sum_config bad = prec_sum_config_default(PREC_FP16);
        if (!(dot_error(x, x, n, prec_sum(sq, n, &bad, NULL)) <= bound)) caught++;
    }
    assert_true(caught > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gamma_and_probability),
        cmocka_unit_test(test_every_algorithm_within_bound),
        cmocka_unit_test(test_dropped_term_fails),
        cmocka_unit_test(test_wrong_rounding_fails),
        cmocka_unit_test(test_off_by_one_block_fails),
        cmocka_unit_test(test_dot_bound),
        cmocka_unit_test(test_kernel_dot_bound),
        cmocka_unit_test(test_row_reduce_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
