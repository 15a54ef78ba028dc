/* tests/test_format_sr.c — stochastic rounding is unbiased.
 *
 * For an input x between neighbours down < x < up of the format (down, up
 * from the MPFR reference in RZ and away-from-zero), SR must pick up with
 * probability P = (x - down)/(up - down).  Over N draws with fresh random
 * bits the count of ups K is Binomial(N, P); Bernstein's inequality gives
 *     Pr(|K - N P| >= s) <= 2 exp(-s^2 / (2 (N P (1-P) + s/3))),
 * so with L = ln(2/delta), s = L/3 + sqrt(L^2/9 + 2 N P (1-P) L) bounds a
 * correct SR's deviation except with probability delta.  We use
 * delta = 1e-9 per check; with under 1000 checks a correct implementation
 * fails this binary with probability below 1e-6.  (s is about 6.5 standard
 * deviations of the Bernoulli count.)  The mean of the rounded values then
 * equals x within s/N ulps, which is what is asserted.
 *
 * Positions within an ulp: 1/64, 0.1, 1/4, 1/3, 1/2, 0.7, 0.9, 63/64, at
 * random normal values, in the subnormal range, just under max finite, both
 * signs, every format; and the two-part inputs (hi + lo) of prec_round2 and
 * of prec_add/prec_mul/prec_fma where lo moves P.
 * Planted twins: SR from only the top 3 random bits (cheap hardware SR) and
 * SR that ignores lo must fail the same check. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>

#include "precision/rng.h"
#include "tests/test_format_mpfr.h"
#include "tests/test_util.h"

#define DRAWS 100000
#define DELTA 1e-9

static const prec_rounding sr_ieee = {PREC_SR, PREC_OVF_IEEE, false};

/* An SR rounder of the exact hi + lo, fed 64 random bits per call. */
typedef double (*sr_fn)(double hi, double lo, prec_format f, uint64_t bits);

static double sr_under_test(double hi, double lo, prec_format f, uint64_t bits)
{
    return prec_round2(hi, lo, f, sr_ieee, bits);
}

static double bernstein_slack(double n, double p)
{
    double L = log(2.0 / DELTA);
    return L / 3 + sqrt(L * L / 9 + 2 * n * p * (1 - p) * L);
}

/* One check: draws SR of hi + lo; returns true when the count of ups lies
 * within the Bernstein bound of N P.  P from the MPFR neighbours. */
static double worst_mean_err_ulps; /* largest |mean - x| seen, in ulps */

static bool check_unbiased(sr_fn sr, double hi, double lo, prec_format f, prec_rng *rng, bool quiet)
{
    const ref_spec *s = &ref_specs[f];
    prec_rounding rz = {PREC_RZ, PREC_OVF_IEEE, false};
    prec_rounding away = {hi < 0 ? PREC_RD : PREC_RU, PREC_OVF_IEEE, false};
    double down = ref_round2(hi, lo, s, rz), up = ref_round2(hi, lo, s, away);
    /* P = (|x| - |down|) / (|up| - |down|) with x = hi + lo (double is ample) */
    double p = ((fabs(hi) - fabs(down)) + fabs(lo) * (signbit(lo) == signbit(hi) ? 1 : -1)) /
               (fabs(up) - fabs(down));
    if (!(up != down)) {
        if (!quiet) printf("  %s: %a + %a is a value of the format, nothing to test\n", prec_format_name(f), hi, lo);
        return false;
    }
    long ups = 0;
    for (long i = 0; i < DRAWS; i++) {
        double v = sr(hi, lo, f, prec_rng_next(rng));
        if (v == up) ups++;
        else if (v != down) {
            if (!quiet) printf("  SR(%a + %a) in %s gave %a, not %a or %a\n", hi, lo, prec_format_name(f), v, down, up);
            return false;
        }
    }
    /* every draw is down or up, so mean - x = (ups/N - P) (up - down) exactly:
     * the count bound is the mean bound, in ulps */
    double mean_err_ulps = (double)ups / DRAWS - p;
    if (fabs(mean_err_ulps) > worst_mean_err_ulps) worst_mean_err_ulps = fabs(mean_err_ulps);
    double slack = bernstein_slack(DRAWS, p);
    bool ok = fabs((double)ups - DRAWS * p) <= slack;
    if (!ok && !quiet)
        printf("  %s SR(%a + %a): %ld ups of %d, expected %.1f +- %.1f (mean off by %.4f ulp)\n",
               prec_format_name(f), hi, lo, ups, DRAWS, DRAWS * p, slack, mean_err_ulps);
    return ok;
}

static const double positions[] = {1.0 / 64, 0.1, 0.25, 1.0 / 3, 0.5, 0.7, 0.9, 63.0 / 64};
#define NPOS (sizeof positions / sizeof positions[0])

/* Run every (format, base, position, sign) check with sr; returns failures. */
static int run_position_checks(sr_fn sr, prec_rng *rng, bool quiet, int *checks)
{
    int failures = 0;
    for (int f = 0; f < PREC_NFORMATS; f++) {
        const prec_format_info *fi = prec_format_get((prec_format)f);
        const int e = (fi->emin + fi->emax) / 2 + (int)(prec_rng_next(rng) % 5) - 2; /* before the mantissa */
        double normal = prec_rne(ldexp(1.0 + prec_rng_uniform(rng), e), (prec_format)f);
        double subnormal = fi->min_subnormal * 3;
        double top = fi->max_finite - prec_ulp(fi->max_finite, (prec_format)f) *
                                          (fi->has_infinity ? 1 : 0.5); /* e4m3's top binade is short */
        top = prec_round(top, (prec_format)f, (prec_rounding){PREC_RZ, PREC_OVF_IEEE, false}, 0);
        const double bases[] = {normal, subnormal, top};
        for (size_t b = 0; b < 3; b++) {
            /* no double lies inside an fp64 subnormal ulp: test_sr_arith_mean
             * reaches that case through products */
            if (f == PREC_FP64 && b == 1) continue;
            double q = prec_ulp(bases[b], (prec_format)f);
            for (size_t k = 0; k < NPOS; k++) {
                for (int sign = 0; sign < 2; sign++) {
                    /* x = base + t q exactly, as hi + lo (fp64 needs the lo) */
                    double off = positions[k] * q, hi = bases[b] + off;
                    double lo = (bases[b] - hi) + off; /* exact: |off| < |base| or base tiny */
                    if (sign) { hi = -hi; lo = -lo; }
                    if (!check_unbiased(sr, hi, lo, (prec_format)f, rng, quiet)) failures++;
                    (*checks)++;
                }
            }
        }
    }
    return failures;
}

static void test_sr_unbiased_positions(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_sr_unbiased_positions"));
    int checks = 0;
    int failures = run_position_checks(sr_under_test, &rng, false, &checks);
    printf("SR: %d position checks x %d draws, %d outside the Bernstein bound (delta %.0e each); "
           "largest |mean - x| %.4f ulp\n", checks, DRAWS, failures, DELTA, worst_mean_err_ulps);
    assert_int_equal(failures, 0);
}

/* Two-part inputs where lo itself moves P by a measurable amount (fp64 and
 * fp32 targets; for narrower formats lo is far below what N draws resolve,
 * and the position checks cover them). */
static int run_lo_checks(sr_fn sr, prec_rng *rng, bool quiet, int *checks)
{
    const double his[] = {1.0, 1.5, -3.0, 0x1p-1000, 1.0 + 0x1p-23};
    const double los[] = {3 * 0x1p-60, -0x1p-55, 0x1p-54, -0x1.8p-54};
    int failures = 0;
    for (size_t i = 0; i < sizeof his / sizeof his[0]; i++) {
        for (size_t j = 0; j < sizeof los / sizeof los[0]; j++) {
            double lo = los[j] * ldexp(1.0, ilogb(his[i])); /* P in {3/128, 1/4, 1/2, 3/4}-ish */
            if (!check_unbiased(sr, his[i], lo, PREC_FP64, rng, quiet)) failures++;
            (*checks)++;
        }
    }
    /* fp32: x = 1 + t*2^-23 + lo with lo from a product's low part */
    for (size_t k = 0; k < NPOS; k++) {
        double hi = 1.0 + positions[k] * 0x1p-23;
        if (!check_unbiased(sr, hi, 0x1p-60, PREC_FP32, rng, quiet)) failures++;
        (*checks)++;
    }
    return failures;
}

static void test_sr_unbiased_with_lo(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_sr_unbiased_with_lo"));
    int checks = 0;
    int failures = run_lo_checks(sr_under_test, &rng, false, &checks);
    printf("SR with lo: %d checks x %d draws, %d outside the bound\n", checks, DRAWS, failures);
    assert_int_equal(failures, 0);
}

/* The arithmetic under SR: the mean of prec_add/prec_mul/prec_fma is the
 * exact result, within the bound (MPFR gives the exact value's neighbours). */
static void test_sr_arith_mean(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_sr_arith_mean"));
    int checks = 0, failures = 0;
    for (int trial = 0; trial < 8; trial++) {
        prec_format f = trial % 2 ? PREC_BF16 : PREC_FP64;
        double a = prec_rne(1.0 + prec_rng_uniform(&rng), f), b = prec_rne(prec_rng_uniform(&rng) * 0x1p-5, f);
        double c = prec_rne(-prec_rng_uniform(&rng), f);
        if (trial >= 6) { /* products deep in the fp64 / bf16 subnormals */
            int e = f == PREC_FP64 ? -535 : -67;
            a = prec_rne(ldexp(1.0 + prec_rng_uniform(&rng), e), f);
            b = prec_rne(ldexp(1.0 + prec_rng_uniform(&rng), e), f);
            c = prec_rne(ldexp(1.0 + prec_rng_uniform(&rng), 2 * e + 1), f);
        }
        for (int op = 0; op < 3; op++) {
            /* the exact result in MPFR; its neighbours in the format; P */
            mpfr_t A, B, C, X, D, U;
            mpfr_inits2(53, A, B, C, (mpfr_ptr)0);
            mpfr_inits2(4400, X, D, U, (mpfr_ptr)0);
            mpfr_set_d(A, a, MPFR_RNDN);
            mpfr_set_d(B, b, MPFR_RNDN);
            mpfr_set_d(C, c, MPFR_RNDN);
            if (op == 0) mpfr_add(X, A, B, MPFR_RNDN);
            else if (op == 1) mpfr_mul(X, A, B, MPFR_RNDN);
            else mpfr_fma(X, A, B, C, MPFR_RNDN);
            const ref_spec *s = &ref_specs[f];
            bool neg = mpfr_sgn(X) < 0;
            mpfr_set(D, X, MPFR_RNDN);
            double down = ref_round_exact(D, s, (prec_rounding){PREC_RZ, PREC_OVF_IEEE, false});
            mpfr_set(U, X, MPFR_RNDN);
            double up = ref_round_exact(U, s, (prec_rounding){neg ? PREC_RD : PREC_RU, PREC_OVF_IEEE, false});
            mpfr_sub_d(X, X, down, MPFR_RNDN);              /* exact */
            mpfr_div_d(X, X, up - down, MPFR_RNDN);         /* P, correctly rounded */
            double p = mpfr_get_d(X, MPFR_RNDN);
            mpfr_clears(A, B, C, X, D, U, (mpfr_ptr)0);
            if (down == up) continue; /* exact: nothing to draw */
            long ups = 0;
            for (long i = 0; i < DRAWS; i++) {
                uint64_t bits = prec_rng_next(&rng);
                double v = op == 0 ? prec_add(a, b, f, sr_ieee, bits)
                         : op == 1 ? prec_mul(a, b, f, sr_ieee, bits)
                                   : prec_fma(a, b, c, f, sr_ieee, bits);
                assert_true(v == up || v == down);
                ups += v == up;
            }
            if (fabs((double)ups - DRAWS * p) > bernstein_slack(DRAWS, p)) {
                printf("  %s op %d (%a, %a, %a): %ld ups, expected %.1f\n", prec_format_name(f), op, a, b,
                       c, ups, DRAWS * p);
                failures++;
            }
            checks++;
        }
    }
    printf("SR arithmetic: %d checks x %d draws, %d outside the bound\n", checks, DRAWS, failures);
    assert_int_equal(failures, 0);
}

/* SR saturates or overflows, never anything else, past max finite. */
static void test_sr_overflow(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_sr_overflow"));
    prec_rounding sat = {PREC_SR, PREC_OVF_SATURATE, false};
    for (int i = 0; i < 1000; i++) {
        uint64_t bits = prec_rng_next(&rng);
        double e = prec_round(470.0, PREC_E4M3, sr_ieee, bits); /* between 448 and (480) */
        assert_true(e == 448.0 || isnan(e));
        assert_true(prec_round(470.0, PREC_E4M3, sat, bits) == 448.0);
        double h = prec_round(65520.0, PREC_FP16, sr_ieee, bits);
        assert_true(h == 65504.0 || isinf(h));
    }
}

/* Planted twins. */
static double sr_three_random_bits(double hi, double lo, prec_format f, uint64_t bits)
{
    return prec_round2(hi, lo, f, sr_ieee, bits & 0xe000000000000000ull);
}
static double sr_ignoring_lo(double hi, double lo, prec_format f, uint64_t bits)
{
    return prec_round2(hi, 0.0, f, sr_ieee, bits);
}

static void test_planted_sr_is_caught(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_planted_sr_is_caught"));
    int checks = 0;
    int f1 = run_position_checks(sr_three_random_bits, &rng, true, &checks);
    printf("  planted SR from 3 random bits: %d of %d checks fail\n", f1, checks);
    assert_true(f1 > 0);
    checks = 0;
    int f2 = run_lo_checks(sr_ignoring_lo, &rng, true, &checks);
    printf("  planted SR ignoring lo: %d of %d checks fail\n", f2, checks);
    assert_true(f2 > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sr_unbiased_positions),
        cmocka_unit_test(test_sr_unbiased_with_lo),
        cmocka_unit_test(test_sr_arith_mean),
        cmocka_unit_test(test_sr_overflow),
        cmocka_unit_test(test_planted_sr_is_caught),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
