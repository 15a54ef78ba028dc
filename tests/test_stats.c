/* tests/test_stats.c — the statistics library (precision/stats.h).
 *
 * Known values (tests/test_stats_values.h, derived by
 * tests/stats_reference_values.py, sources stated there):
 *   - normal, t, F, incomplete beta CDFs and quantiles against mpmath at 40
 *     digits; quantile/CDF round trips at fresh random points;
 *   - one worked dataset (8 paired runs at loss ~1.4) through every test
 *     against scipy.stats, a Wilcoxon dataset with zeros and ties against
 *     enumeration of all sign patterns, the confidence sequence against
 *     Lai's mixture integrated numerically;
 *   - power and sample sizes against scipy's noncentral t and Owen's
 *     integral, and the normal formula for large n.
 * Simulated truth (fresh seed; ULPSCOPE_SEED replays), 10^4 replications
 * per property, with paired arms like real runs (loss 1.4, seed sd 0.006,
 * sd of differences 0.004, arms correlated 0.78):
 *   - false-positive rates of the paired t, Welch, Wilcoxon (exact, normal,
 *     with ties/zeros), Pitman-Morgan and F tests; CI coverage; TOST at the
 *     margin; Holm's family-wise error; the confidence sequence under
 *     optional stopping over 500 looks; the fixed-n verdict's error rates;
 *   - simulated power at the computed sample sizes.
 * Every rate is checked against an interval of +-5 binomial sd around its
 * target (one-sided where the truth is "at most" or "at least"): a correct
 * implementation fails one check with probability below 1e-6 (exact
 * binomial tails at 5 sd for 10^4 trials at 0.05: 1.2e-7 below, 6.9e-7
 * above; at 0.8: 3.6e-7 below), the 23 checks of a run together below 2e-5.
 * Planted twins that must FAIL the same checks: a one-sided p reported as
 * two-sided (false positives ~2 alpha), a z-quantile CI at n = 5 (coverage
 * ~0.88), Welch on paired correlated arms (power far below target),
 * "equivalent because not significant" at the margin, no Holm correction,
 * a fixed-n t test looked at after every run, and the one-pass variance. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "precision/rng.h"
#include "precision/stats.h"
#include "tests/test_stats_values.h"
#include "tests/test_util.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define SIMS 10000
#define ALPHA 0.05

/* Paired arms like real training runs: per-seed loss 1.4 + common part,
 * each arm adds its own noise; sd of one arm 0.006, of the difference 0.004. */
#define LOSS 1.4
#define SD_SEED 0.006
#define SD_DIFF 0.004

static void paired_arms(prec_rng *r, size_t n, double shift, double *base, double *cand)
{
    const double noise = SD_DIFF / sqrt(2.0), common = sqrt(SD_SEED * SD_SEED - noise * noise);
    for (size_t i = 0; i < n; i++) {
        double seed_effect = LOSS + common * prec_rng_normal(r);
        base[i] = seed_effect + noise * prec_rng_normal(r);
        cand[i] = seed_effect + shift + noise * prec_rng_normal(r);
    }
}

static void normal_sample(prec_rng *r, size_t n, double mean, double sd, double *x)
{
    for (size_t i = 0; i < n; i++) x[i] = mean + sd * prec_rng_normal(r);
}

static void differences(const double *base, const double *cand, size_t n, double *d)
{
    for (size_t i = 0; i < n; i++) d[i] = cand[i] - base[i];
}

/* ---- binomial checks ------------------------------------------------------------------ */

typedef enum { RATE_NEAR, RATE_AT_MOST, RATE_AT_LEAST } rate_kind;

/* k events in n trials against target p0 within 5 binomial sd (two-sided for
 * RATE_NEAR, one-sided otherwise); prints the measured rate either way. */
static bool rate_ok(const char *what, long k, long n, double p0, rate_kind kind)
{
    double rate = (double)k / (double)n, half = 5.0 * sqrt(p0 * (1.0 - p0) / (double)n);
    double lo = kind == RATE_AT_MOST ? 0.0 : p0 - half, hi = kind == RATE_AT_LEAST ? 1.0 : p0 + half;
    bool ok = rate >= lo && rate <= hi;
    printf("  %-64s %.4f (%ld/%ld), allowed [%.4f, %.4f]%s\n", what, rate, k, n, lo, hi,
           ok ? "" : "  <- fails");
    return ok;
}

/* ---- known values ---------------------------------------------------------------------- */

static double rel_err(double x, double ref) { return ref == 0.0 ? fabs(x) : fabs(x - ref) / fabs(ref); }

/* Largest relative error seen per function, printed once. */
static void worst_is_below(const char *what, double worst, double tol)
{
    printf("  %-40s worst relative error %.2e (allowed %.0e)\n", what, worst, tol);
    assert_true(worst <= tol);
}

static void test_distribution_values(void **state)
{
    (void)state;
    double w = 0.0;
    for (size_t i = 0; i < COUNT(normal_cdf_ref); i++) {
        double z = normal_cdf_ref[i][0];
        /* Phi(z) is conditioned ~z^2 in relative terms: erfc(z/sqrt2) moves
         * by 2 (z^2/2) eps for a rounding of its argument */
        w = fmax(w, rel_err(stats_normal_cdf(z), normal_cdf_ref[i][1]) / (1.0 + z * z));
    }
    worst_is_below("normal CDF (per 1 + z^2)", w, 4.0 * 0x1p-52);
    w = 0.0;
    for (size_t i = 0; i < COUNT(normal_quantile_ref); i++)
        w = fmax(w, rel_err(stats_normal_quantile(normal_quantile_ref[i][0]), normal_quantile_ref[i][1]));
    worst_is_below("normal quantile", w, 4.0 * 0x1p-52);

    const double tol = 1e-12;
    w = 0.0;
    for (size_t i = 0; i < COUNT(t_cdf_ref); i++) {
        double t = t_cdf_ref[i][0], df = t_cdf_ref[i][1], ref = t_cdf_ref[i][2];
        w = fmax(w, rel_err(stats_t_cdf(t, df), ref));
        w = fmax(w, rel_err(stats_t_two_sided_p(t, df), 2.0 * ref));
        /* the upper side is 1 - (lower tail): the lower tail's error, absolute */
        assert_true(fabs(stats_t_cdf(-t, df) - (1.0 - ref)) <= tol * ref + 0x1p-52);
    }
    worst_is_below("t CDF, df 0.5..1000", w, tol);
    w = 0.0;
    for (size_t i = 0; i < COUNT(t_cdf_big_df_ref); i++)
        w = fmax(w, rel_err(stats_t_cdf(t_cdf_big_df_ref[i][0], t_cdf_big_df_ref[i][1]), t_cdf_big_df_ref[i][2]));
    worst_is_below("t CDF, df 1e4..1e6", w, 1e-10);
    w = 0.0;
    for (size_t i = 0; i < COUNT(t_quantile_ref); i++)
        w = fmax(w, rel_err(stats_t_quantile(t_quantile_ref[i][0], t_quantile_ref[i][1]), t_quantile_ref[i][2]));
    worst_is_below("t quantile", w, tol);
    w = 0.0;
    for (size_t i = 0; i < COUNT(f_ref); i++) {
        const double *r = f_ref[i];
        w = fmax(w, rel_err(stats_f_cdf(r[0], r[1], r[2]), r[3]));
        w = fmax(w, rel_err(stats_f_sf(r[0], r[1], r[2]), r[4]));
    }
    worst_is_below("F CDF and upper tail", w, tol);
    w = 0.0;
    for (size_t i = 0; i < COUNT(f_quantile_ref); i++) {
        const double *r = f_quantile_ref[i];
        w = fmax(w, rel_err(stats_f_quantile(r[0], r[1], r[2]), r[3]));
    }
    worst_is_below("F quantile", w, tol);
    w = 0.0;
    for (size_t i = 0; i < COUNT(beta_ref); i++) {
        const double *r = beta_ref[i];
        w = fmax(w, rel_err(stats_beta_inc(r[0], r[1], r[2]), r[3]));
    }
    worst_is_below("incomplete beta", w, tol);

    /* documented edges */
    assert_true(stats_normal_quantile(0.0) == -INFINITY && stats_normal_quantile(1.0) == INFINITY);
    assert_true(stats_normal_quantile(0.5) == 0.0 && isnan(stats_normal_quantile(1.5)));
    assert_true(stats_t_quantile(0.5, 7) == 0.0 && isnan(stats_t_quantile(0.3, 0.0)));
    assert_true(stats_t_cdf(INFINITY, 3) == 1.0 && stats_t_cdf(-INFINITY, 3) == 0.0);
    assert_true(isnan(stats_t_cdf(NAN, 3)) && isnan(stats_f_cdf(1.0, -1.0, 2.0)));
    assert_true(stats_f_cdf(0.0, 3, 4) == 0.0 && stats_f_sf(0.0, 3, 4) == 1.0);
    assert_true(stats_t_cdf(1.3, INFINITY) == stats_normal_cdf(1.3));
    assert_true(stats_t_quantile(0.975, INFINITY) == stats_normal_quantile(0.975));
    assert_true(stats_beta_inc(2, 3, 0.0) == 0.0 && stats_beta_inc(2, 3, 1.0) == 1.0);
    /* closed forms: df = 1 is Cauchy, df = 2 has t = (2p - 1) / sqrt(2 p (1 - p)) */
    assert_true(rel_err(stats_t_quantile(0.9, 1), tan(M_PI * 0.4)) < tol);
    assert_true(rel_err(stats_t_quantile(0.1, 2), -0.8 / sqrt(0.18)) < tol);
}

/* Quantile and CDF invert each other at fresh random points. */
static void test_round_trips(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_round_trips"));
    double w = 0.0;
    for (int i = 0; i < 3000; i++) {
        double p = pow(10.0, -12.0 * prec_rng_uniform(&rng)); /* 1e-12 .. 1 */
        if (prec_rng_uniform(&rng) < 0.5) p = 1.0 - p;
        if (p <= 0.0 || p >= 1.0) continue;
        double q = fmin(p, 1.0 - p);
        double df = 0.5 + 1000.0 * prec_rng_uniform(&rng), d2 = 1.0 + 500.0 * prec_rng_uniform(&rng);
        double t = stats_t_quantile(p, df);
        w = fmax(w, fabs((p < 0.5 ? stats_t_cdf(t, df) : stats_t_cdf(-t, df)) - q) / q);
        double f = stats_f_quantile(p, df, d2);
        w = fmax(w, fabs((p < 0.5 ? stats_f_cdf(f, df, d2) : stats_f_sf(f, df, d2)) - q) / q);
        double z = stats_normal_quantile(p);
        w = fmax(w, fabs(stats_normal_cdf(p < 0.5 ? z : -z) - q) / q);
        double x = stats_beta_inc_inverse(0.5 * df, 0.5 * d2, q);
        w = fmax(w, fabs(stats_beta_inc(0.5 * df, 0.5 * d2, x) - q) / q);
    }
    /* CDF(quantile(p)) carries the CDF's error times the conditioning of
     * rounding the quantile to a double: for the tails here ~ 1e-13 */
    worst_is_below("CDF(quantile(p)) vs p, 3000 random", w, 1e-12);
}

/* ---- descriptive --------------------------------------------------------------------- */

/* The textbook one-pass variance, (sum x^2 - n mean^2) / (n - 1): the twin. */
static double naive_variance(const double *x, size_t n)
{
    double s = 0.0, s2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        s += x[i];
        s2 += x[i] * x[i];
    }
    return (s2 - s * s / (double)n) / (double)(n - 1);
}

static void test_descriptive(void **state)
{
    (void)state;
    /* [CGL83]'s example shifted far from 0: 1e9 + {4, 7, 13, 16} has mean
     * 1e9 + 10 and variance exactly 30 (all values exact in double) */
    const double shifted[] = {1e9 + 4, 1e9 + 7, 1e9 + 13, 1e9 + 16};
    assert_true(stats_mean(shifted, 4) == 1e9 + 10);
    assert_true(stats_variance(shifted, 4) == 30.0);
    assert_true(stats_sd(shifted, 4) == sqrt(30.0));
    double naive = naive_variance(shifted, 4);
    printf("  variance of 1e9 + {4,7,13,16}: two-pass %.17g, one-pass twin %.17g (exact 30)\n",
           stats_variance(shifted, 4), naive);
    assert_false(naive == 30.0); /* the twin fails the same check */
    /* losses: sd of the worked differences against numpy */
    double d[8];
    differences(base8, cand8, 8, d);
    assert_true(rel_err(stats_mean(d, 8), paired8_ref[4]) < 1e-12);
    assert_true(rel_err(stats_sd(d, 8), paired8_ref[5]) < 1e-12);
    /* correlation: exact lines and symmetry */
    const double x[] = {1.0, 2.0, 4.0, 8.0, 9.0}, up[] = {3.0, 5.0, 9.0, 17.0, 19.0}, down[] = {-1.0, -2.0, -4.0, -8.0, -9.0};
    assert_true(stats_correlation(x, up, 5) == 1.0 && stats_correlation(x, down, 5) == -1.0);
    assert_true(stats_correlation(base8, cand8, 8) == stats_correlation(cand8, base8, 8));
    assert_true(isnan(stats_correlation(x, (const double[]){2, 2, 2, 2, 2}, 5)));
    assert_true(isnan(stats_mean(x, 0)) && isnan(stats_variance(x, 1)));
}

/* ---- the worked dataset through every test -------------------------------------------- */

static void test_worked_dataset(void **state)
{
    (void)state;
    const double tol = 1e-10; /* scipy in double; the data differences carry ~1e-13 */
    double d[8];
    differences(base8, cand8, 8, d);
    stats_ttest t;
    assert_int_equal(stats_paired_t(d, 8, ALPHA, &t), STATS_OK);
    printf("  paired: t %.6f p %.6g CI [%.6g, %.6g]\n", t.t, t.p, t.ci_lo, t.ci_hi);
    assert_true(rel_err(t.t, paired8_ref[0]) < tol && rel_err(t.p, paired8_ref[1]) < tol);
    assert_true(rel_err(t.ci_lo, paired8_ref[2]) < tol && rel_err(t.ci_hi, paired8_ref[3]) < tol);
    assert_true(t.df == 7.0 && t.n == 8);

    assert_int_equal(stats_welch_t(base8, 8, cand8, 8, ALPHA, &t), STATS_OK);
    printf("  Welch: t %.6f df %.4f p %.6g\n", t.t, t.df, t.p);
    assert_true(rel_err(t.t, welch8_ref[0]) < tol && rel_err(t.df, welch8_ref[1]) < tol);
    assert_true(rel_err(t.p, welch8_ref[2]) < tol);
    assert_true(rel_err(t.ci_lo, welch8_ref[3]) < tol && rel_err(t.ci_hi, welch8_ref[4]) < tol);

    stats_wilcoxon wx;
    assert_int_equal(stats_wilcoxon_signed_rank(d, 8, &wx), STATS_OK);
    printf("  Wilcoxon: W+ %.1f p %.6g exact %d\n", wx.w_plus, wx.p, wx.exact);
    assert_true(wx.exact && rel_err(wx.p, wilcoxon8_ref[0]) < 1e-14);
    assert_true(fmin(wx.w_plus, 36.0 - wx.w_plus) == wilcoxon8_ref[1]);

    stats_var_test v;
    assert_int_equal(stats_pitman_morgan(base8, cand8, 8, ALPHA, &v), STATS_OK);
    printf("  Pitman-Morgan: ratio %.6f r %.6f t %.6f p %.6g CI [%.6g, %.6g]\n", v.ratio, v.r, v.statistic, v.p,
           v.ci_lo, v.ci_hi);
    assert_true(rel_err(v.ratio, pitman8_ref[0]) < tol && rel_err(v.r, pitman8_ref[1]) < tol);
    assert_true(rel_err(v.statistic, pitman8_ref[2]) < tol && rel_err(v.p, pitman8_ref[3]) < tol);
    /* the reference interval came from root-finding (brentq, xtol 1e-15) on the test */
    assert_true(rel_err(v.ci_lo, pitman8_ref[4]) < 1e-9 && rel_err(v.ci_hi, pitman8_ref[5]) < 1e-9);
    assert_int_equal(stats_f_test(base8, 8, cand8, 8, ALPHA, &v), STATS_OK);
    assert_true(rel_err(v.p, ftest8_ref[0]) < tol);
    assert_true(rel_err(v.ci_lo, ftest8_ref[1]) < tol && rel_err(v.ci_hi, ftest8_ref[2]) < tol);

    stats_tost e;
    assert_int_equal(stats_tost_paired(d, 8, 0.004, ALPHA, &e), STATS_OK);
    printf("  TOST at 0.004: p_lower %.6g p_upper %.6g 90%% CI [%.6g, %.6g] equivalent %d\n", e.p_lower, e.p_upper,
           e.ci_lo, e.ci_hi, e.equivalent);
    assert_true(rel_err(e.p_lower, tost8_ref[0]) < tol && rel_err(e.p_upper, tost8_ref[1]) < tol);
    assert_true(rel_err(e.ci_lo, tost8_ref[2]) < tol && rel_err(e.ci_hi, tost8_ref[3]) < tol);
    assert_true(e.p == fmax(e.p_lower, e.p_upper));
    assert_true(e.equivalent == (e.ci_lo > -0.004 && e.ci_hi < 0.004));

    stats_cs_state s;
    stats_cs cs;
    stats_cs_start(&s);
    for (int i = 0; i < 8; i++) assert_int_equal(stats_cs_add(&s, d[i]), STATS_OK);
    assert_int_equal(stats_cs_interval(&s, ALPHA, 1.0, &cs), STATS_OK);
    printf("  confidence sequence (rho 1) at n = 8: [%.9g, %.9g], numerical integration [%.9g, %.9g]\n", cs.lo,
           cs.hi, cs8_ref[0], cs8_ref[1]);
    assert_true(rel_err(cs.lo, cs8_ref[0]) < 1e-9 && rel_err(cs.hi, cs8_ref[1]) < 1e-9);
}

/* ---- Wilcoxon details ----------------------------------------------------------------- */

static void test_wilcoxon_ties_and_normal(void **state)
{
    (void)state;
    stats_wilcoxon w;
    assert_int_equal(stats_wilcoxon_signed_rank(wilcoxon_ties_d, COUNT(wilcoxon_ties_d), &w), STATS_OK);
    printf("  zeros and ties: W+ %.1f p %.9g (enumeration %.9g), zeros %zu tied %zu\n", w.w_plus, w.p,
           wilcoxon_ties_ref[1], w.n_zero, w.n_tied);
    assert_true(w.exact && w.w_plus == wilcoxon_ties_ref[0]);
    assert_true(rel_err(w.p, wilcoxon_ties_ref[1]) < 1e-14);
    assert_true(rel_err(w.null_mean, wilcoxon_ties_ref[2]) < 1e-15 && rel_err(w.null_sd, wilcoxon_ties_ref[3]) < 1e-15);
    assert_true(w.n_zero == 2 && w.n_tied == 8); /* |d| 0.001 x3, 0.002 x3, 0.003 x2 */

    assert_int_equal(stats_wilcoxon_signed_rank(wilcoxon60_d, COUNT(wilcoxon60_d), &w), STATS_OK);
    printf("  n = 60 normal approximation: W+ %.1f z %.6f p %.9g (formula %.9g, scipy %.9g)\n", w.w_plus, w.z, w.p,
           wilcoxon60_ref[2], wilcoxon60_ref[3]);
    assert_false(w.exact);
    assert_true(w.w_plus == wilcoxon60_ref[0] && rel_err(w.z, wilcoxon60_ref[1]) < 1e-12);
    assert_true(rel_err(w.p, wilcoxon60_ref[2]) < 1e-12);

    /* all zeros: nothing to test; symmetric sign flip gives the same p */
    const double zeros[5] = {0};
    assert_int_equal(stats_wilcoxon_signed_rank(zeros, 5, &w), STATS_OK);
    assert_true(w.p == 1.0 && w.n_zero == 5);
    double flipped[COUNT(wilcoxon_ties_d)];
    for (size_t i = 0; i < COUNT(flipped); i++) flipped[i] = -wilcoxon_ties_d[i];
    stats_wilcoxon wf;
    assert_int_equal(stats_wilcoxon_signed_rank(flipped, COUNT(flipped), &wf), STATS_OK);
    assert_true(wf.p == wilcoxon_ties_ref[1] || rel_err(wf.p, wilcoxon_ties_ref[1]) < 1e-14);
}

/* ---- Holm ------------------------------------------------------------------------------ */

static void test_holm_values(void **state)
{
    (void)state;
    /* by hand: sorted 0.005, 0.01, 0.03, 0.04, 0.2 times 5, 4, 3, 2, 1 =
     * 0.025, 0.04, 0.09, 0.08 -> 0.09 (monotone), 0.2 */
    const double p[] = {0.01, 0.04, 0.03, 0.005, 0.2};
    const double want[] = {0.04, 0.09, 0.09, 0.025, 0.2};
    double adj[5];
    assert_int_equal(stats_holm(p, 5, adj), STATS_OK);
    for (int i = 0; i < 5; i++) assert_true(fabs(adj[i] - want[i]) < 1e-15);
    /* capped at 1, ties, in place */
    double q[] = {0.5, 0.5, 0.001};
    assert_int_equal(stats_holm(q, 3, q), STATS_OK);
    assert_true(q[0] == 1.0 && q[1] == 1.0 && q[2] == 0.003);
    double one = 0.3;
    assert_int_equal(stats_holm(&one, 1, &one), STATS_OK);
    assert_true(one == 0.3);
}

/* ---- power and sample size --------------------------------------------------------------- */

static void test_power_values(void **state)
{
    (void)state;
    double w = 0.0;
    for (size_t i = 0; i < COUNT(power_t_ref); i++) {
        const double *r = power_t_ref[i];
        w = fmax(w, fabs(stats_power_paired_t((size_t)r[0], r[1], r[2], r[3]) - r[4]));
    }
    printf("  paired t power vs scipy nct: worst absolute error %.2e\n", w);
    assert_true(w < 1e-10);
    w = 0.0;
    for (size_t i = 0; i < COUNT(power_tost_ref); i++) {
        const double *r = power_tost_ref[i];
        w = fmax(w, fabs(stats_power_tost((size_t)r[0], r[1], r[2], r[3], r[4]) - r[5]));
    }
    printf("  TOST power vs Owen's integral: worst absolute error %.2e\n", w);
    assert_true(w < 1e-10);
    for (size_t i = 0; i < COUNT(runs_shift_ref); i++) {
        const double *r = runs_shift_ref[i];
        size_t n = stats_runs_for_shift(r[0], r[1], r[2], r[3]);
        printf("  runs to detect %.4f (sd %.3f, alpha %.2f, power %.2f): %zu (reference %.0f)\n", r[0], r[1], r[2],
               r[3], n, r[4]);
        assert_true((double)n == r[4]);
    }
    for (size_t i = 0; i < COUNT(runs_equivalence_ref); i++) {
        const double *r = runs_equivalence_ref[i];
        size_t n = stats_runs_for_equivalence(r[0], r[1], r[2], ALPHA, r[3]);
        printf("  runs for equivalence within %.4f at true %.4f (sd %.3f, power %.2f): %zu (reference %.0f)\n",
               r[1], r[0], r[2], r[3], n, r[4]);
        assert_true((double)n == r[4]);
    }
    /* large n: the normal formula plus the t's extra ~z^2/2 runs */
    double za = stats_normal_quantile(0.975), zb = stats_normal_quantile(0.8);
    double n_norm = (za + zb) * (za + zb) / 0.01; /* shift = 0.1 sd */
    size_t n = stats_runs_for_shift(0.0004, 0.004, ALPHA, 0.8);
    printf("  shift 0.1 sd: %zu runs, normal formula %.1f\n", n, n_norm);
    assert_true((double)n >= n_norm && (double)n <= n_norm + 0.5 * za * za + 2.0);
    double zt = stats_normal_quantile(0.95) + stats_normal_quantile(0.9);
    double n_tost = zt * zt / 0.01;
    n = stats_runs_for_equivalence(0.0, 0.0004, 0.004, ALPHA, 0.8);
    printf("  equivalence within 0.1 sd: %zu runs, normal formula %.1f\n", n, n_tost);
    assert_true((double)n >= n_tost && (double)n <= n_tost + za * za + 2.0);
    /* minimality, size at zero shift, unreachable plans */
    n = stats_runs_for_shift(0.002, 0.004, ALPHA, 0.8);
    assert_true(stats_power_paired_t(n, 0.002, 0.004, ALPHA) >= 0.8 && stats_power_paired_t(n - 1, 0.002, 0.004, ALPHA) < 0.8);
    assert_true(fabs(stats_power_paired_t(12, 0.0, 0.004, ALPHA) - ALPHA) < 1e-10);
    assert_int_equal(stats_runs_for_equivalence(0.003, 0.002, 0.004, ALPHA, 0.8), 0);
    assert_int_equal(stats_runs_for_shift(1e-6, 0.004, ALPHA, 0.8), 0); /* > STATS_MAX_RUNS */
    assert_true(isnan(stats_power_paired_t(1, 0.1, 1.0, ALPHA)) && isnan(stats_power_tost(5, 0, 0, 1, ALPHA)));
}

/* ---- false-positive rates on null data ------------------------------------------------------ */

static void test_null_false_positive_rates(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_null_false_positive_rates"));
    double base[80], cand[80], d[80];
    long paired = 0, one_sided_twin = 0, welch = 0, wil_exact = 0, wil_normal = 0, wil_ties = 0, pitman = 0, ftest = 0;
    long ties_seen = 0;
    for (int s = 0; s < SIMS; s++) {
        stats_ttest t;
        paired_arms(&rng, 10, 0.0, base, cand);
        differences(base, cand, 10, d);
        assert_int_equal(stats_paired_t(d, 10, ALPHA, &t), STATS_OK);
        paired += t.p < ALPHA;
        /* twin: the one-sided p in the observed direction, reported as two-sided */
        one_sided_twin += stats_t_cdf(-fabs(t.t), t.df) < ALPHA;

        normal_sample(&rng, 10, LOSS, SD_SEED, base); /* unequal variances and sizes */
        normal_sample(&rng, 15, LOSS, 2.0 * SD_SEED, cand);
        assert_int_equal(stats_welch_t(base, 10, cand, 15, ALPHA, &t), STATS_OK);
        welch += t.p < ALPHA;

        stats_wilcoxon w;
        paired_arms(&rng, 20, 0.0, base, cand);
        differences(base, cand, 20, d);
        assert_int_equal(stats_wilcoxon_signed_rank(d, 20, &w), STATS_OK);
        wil_exact += w.p < ALPHA;
        normal_sample(&rng, 80, 0.0, SD_DIFF, d);
        assert_int_equal(stats_wilcoxon_signed_rank(d, 80, &w), STATS_OK);
        wil_normal += w.p < ALPHA;
        /* differences logged on a coarse grid: zeros and ties in every sample */
        for (int i = 0; i < 20; i++) d[i] = 0.001 * nearbyint(1.5 * prec_rng_normal(&rng));
        assert_int_equal(stats_wilcoxon_signed_rank(d, 20, &w), STATS_OK);
        wil_ties += w.p < ALPHA;
        ties_seen += w.n_zero > 0 && w.n_tied > 0;

        stats_var_test v;
        paired_arms(&rng, 20, 0.0, base, cand); /* equal variances, correlated 0.78 */
        assert_int_equal(stats_pitman_morgan(base, cand, 20, ALPHA, &v), STATS_OK);
        pitman += v.p < ALPHA;
        normal_sample(&rng, 10, LOSS, SD_SEED, base);
        normal_sample(&rng, 12, LOSS, SD_SEED, cand);
        assert_int_equal(stats_f_test(base, 10, cand, 12, ALPHA, &v), STATS_OK);
        ftest += v.p < ALPHA;
    }
    assert_true(rate_ok("paired t, n 10: false-positive rate", paired, SIMS, ALPHA, RATE_NEAR));
    assert_true(rate_ok("Welch, n 10 / 15, sd 1:2: false-positive rate", welch, SIMS, ALPHA, RATE_NEAR));
    assert_true(rate_ok("Wilcoxon exact, n 20: false-positive rate", wil_exact, SIMS, ALPHA, RATE_NEAR));
    assert_true(rate_ok("Wilcoxon normal approximation, n 80: false-positive rate", wil_normal, SIMS, ALPHA, RATE_NEAR));
    assert_true(ties_seen > SIMS / 2);
    assert_true(rate_ok("Wilcoxon exact with zeros and ties, n 20: false-positive rate", wil_ties, SIMS, ALPHA,
                        RATE_AT_MOST));
    assert_true(rate_ok("Pitman-Morgan, n 20, arms correlated: false-positive rate", pitman, SIMS, ALPHA, RATE_NEAR));
    assert_true(rate_ok("F test, n 10 / 12: false-positive rate", ftest, SIMS, ALPHA, RATE_NEAR));
    assert_false(rate_ok("TWIN one-sided p reported as two-sided: false-positive rate", one_sided_twin, SIMS, ALPHA,
                         RATE_NEAR));
}

/* ---- coverage ------------------------------------------------------------------------------ */

static void test_ci_coverage(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_ci_coverage"));
    const double shift = 0.001;
    double base[16], cand[16], d[16];
    long paired = 0, z_twin = 0, welch = 0, tost_ci = 0;
    for (int s = 0; s < SIMS; s++) {
        stats_ttest t;
        paired_arms(&rng, 5, shift, base, cand);
        differences(base, cand, 5, d);
        assert_int_equal(stats_paired_t(d, 5, ALPHA, &t), STATS_OK);
        paired += t.ci_lo <= shift && shift <= t.ci_hi;
        double z = stats_normal_quantile(1.0 - 0.5 * ALPHA); /* twin: normal quantile at n = 5 */
        z_twin += t.estimate - z * t.se <= shift && shift <= t.estimate + z * t.se;
        stats_tost e;
        assert_int_equal(stats_tost_paired(d, 5, 0.004, ALPHA, &e), STATS_OK);
        tost_ci += e.ci_lo <= shift && shift <= e.ci_hi;
        normal_sample(&rng, 6, LOSS, SD_SEED, base);
        normal_sample(&rng, 9, LOSS + shift, 2.0 * SD_SEED, cand);
        assert_int_equal(stats_welch_t(base, 6, cand, 9, ALPHA, &t), STATS_OK);
        welch += t.ci_lo <= shift && shift <= t.ci_hi;
    }
    assert_true(rate_ok("paired t 95% CI, n 5: coverage", paired, SIMS, 1.0 - ALPHA, RATE_NEAR));
    assert_true(rate_ok("TOST 90% CI, n 5: coverage", tost_ci, SIMS, 1.0 - 2.0 * ALPHA, RATE_NEAR));
    assert_true(rate_ok("Welch 95% CI, n 6 / 9, sd 1:2: coverage", welch, SIMS, 1.0 - ALPHA, RATE_NEAR));
    assert_false(rate_ok("TWIN z-quantile CI, n 5: coverage", z_twin, SIMS, 1.0 - ALPHA, RATE_NEAR));
}

/* ---- power ------------------------------------------------------------------------------- */

static void test_power_simulated(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_power_simulated"));
    const double shift = 0.002, target = 0.8, margin = 0.002;
    size_t n = stats_runs_for_shift(shift, SD_DIFF, ALPHA, target);
    double exact = stats_power_paired_t(n, shift, SD_DIFF, ALPHA);
    size_t n_eq = stats_runs_for_equivalence(0.0, margin, SD_DIFF, ALPHA, target);
    double exact_eq = stats_power_tost(n_eq, 0.0, margin, SD_DIFF, ALPHA);
    printf("  shift %.3f, sd %.3f: %zu pairs for power %.2f (computed %.4f); equivalence within %.3f: %zu pairs "
           "(computed %.4f)\n", shift, SD_DIFF, n, target, exact, margin, n_eq, exact_eq);
    double *base = malloc(n * sizeof *base), *cand = malloc(n * sizeof *cand), *d = malloc(n_eq * sizeof *d);
    double *dd = malloc(n * sizeof *dd);
    assert_true(base && cand && d && dd);
    long paired = 0, welch_twin = 0, equivalent = 0;
    for (int s = 0; s < SIMS; s++) {
        stats_ttest t;
        paired_arms(&rng, n, shift, base, cand);
        differences(base, cand, n, dd);
        assert_int_equal(stats_paired_t(dd, n, ALPHA, &t), STATS_OK);
        paired += t.p < ALPHA;
        /* twin: the same paired runs analysed as unpaired */
        assert_int_equal(stats_welch_t(base, n, cand, n, ALPHA, &t), STATS_OK);
        welch_twin += t.p < ALPHA;
        stats_tost e;
        normal_sample(&rng, n_eq, 0.0, SD_DIFF, d);
        assert_int_equal(stats_tost_paired(d, n_eq, margin, ALPHA, &e), STATS_OK);
        equivalent += e.equivalent;
    }
    assert_true(rate_ok("paired t at the computed n: power >= target", paired, SIMS, target, RATE_AT_LEAST));
    assert_true(rate_ok("paired t at the computed n: power = computed", paired, SIMS, exact, RATE_NEAR));
    assert_true(rate_ok("TOST at the computed n: power >= target", equivalent, SIMS, target, RATE_AT_LEAST));
    assert_true(rate_ok("TOST at the computed n: power = computed", equivalent, SIMS, exact_eq, RATE_NEAR));
    assert_false(rate_ok("TWIN Welch on the paired arms: power >= target", welch_twin, SIMS, target, RATE_AT_LEAST));
    free(base);
    free(cand);
    free(d);
    free(dd);
}

/* ---- TOST at the margin ------------------------------------------------------------------- */

static void test_tost_at_margin(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_tost_at_margin"));
    const double margin = 0.004;
    double d[8];
    long claimed = 0, twin = 0;
    for (int s = 0; s < SIMS; s++) {
        double mu = s & 1 ? margin : -margin; /* both boundaries */
        normal_sample(&rng, 8, mu, SD_DIFF, d);
        stats_tost e;
        stats_ttest t;
        assert_int_equal(stats_tost_paired(d, 8, margin, ALPHA, &e), STATS_OK);
        claimed += e.equivalent;
        /* twin: "equivalent" because the t test is not significant */
        assert_int_equal(stats_paired_t(d, 8, ALPHA, &t), STATS_OK);
        twin += t.p >= ALPHA;
    }
    assert_true(rate_ok("TOST, true difference at +-margin, n 8: equivalence claimed", claimed, SIMS, ALPHA,
                        RATE_AT_MOST));
    assert_false(rate_ok("TWIN not significant => equivalent, at +-margin: claimed", twin, SIMS, ALPHA,
                         RATE_AT_MOST));
}

/* ---- Holm ---------------------------------------------------------------------------------- */

static void test_holm_fwer(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_holm_fwer"));
    /* five arms against a baseline: three change nothing, two shift by 1 sd */
    enum { K = 5, NULLS = 3, N = 10 };
    double d[N], p[K], adj[K];
    long holm = 0, raw_twin = 0, found = 0;
    for (int s = 0; s < SIMS; s++) {
        for (int k = 0; k < K; k++) {
            normal_sample(&rng, N, k < NULLS ? 0.0 : SD_DIFF, SD_DIFF, d);
            stats_ttest t;
            assert_int_equal(stats_paired_t(d, N, ALPHA, &t), STATS_OK);
            p[k] = t.p;
        }
        assert_int_equal(stats_holm(p, K, adj), STATS_OK);
        bool any_false = false, any_false_raw = false;
        for (int k = 0; k < NULLS; k++) {
            any_false |= adj[k] < ALPHA;
            any_false_raw |= p[k] < ALPHA;
        }
        for (int k = NULLS; k < K; k++) found += adj[k] < ALPHA;
        holm += any_false;
        raw_twin += any_false_raw;
    }
    printf("  Holm: real shifts found %.3f of the time\n", (double)found / (2.0 * SIMS));
    assert_true(rate_ok("Holm, 3 null + 2 shifted arms: family-wise error", holm, SIMS, ALPHA, RATE_AT_MOST));
    assert_false(rate_ok("TWIN no correction: family-wise error", raw_twin, SIMS, ALPHA, RATE_AT_MOST));
}

/* ---- the confidence sequence under optional stopping ----------------------------------------- */

static void test_confidence_sequence(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_confidence_sequence"));
    enum { LOOKS = 500 };
    const double margin = 0.002;
    const double rho = stats_cs_mixture_for(100, ALPHA), rho_raw = stats_cs_mixture_for(10, ALPHA);
    /* fixed-n t critical values for the twin, one per look: |t| > crit[n] is
     * exactly stats_paired_t's p < alpha, kept O(1) per look by running sums */
    static double crit[LOOKS + 1];
    for (int n = 2; n <= LOOKS; n++) crit[n] = stats_t_quantile(1.0 - 0.5 * ALPHA, n - 1);
    long cs_shift = 0, cs_miss_raw = 0, cs_equiv_at_margin = 0, t_twin = 0;
    long equiv_by_end = 0, shift_by_end = 0;
    stats_cs cs;
    for (int s = 0; s < SIMS; s++) {
        stats_cs_state null, raw, edge, zero, moved;
        stats_cs_start(&null);
        stats_cs_start(&raw);
        stats_cs_start(&edge);
        stats_cs_start(&zero);
        stats_cs_start(&moved);
        bool null_shift = false, raw_miss = false, edge_equiv = false, t_rejected = false;
        stats_decision zero_first = STATS_UNDECIDED, moved_first = STATS_UNDECIDED;
        for (int n = 1; n <= LOOKS; n++) {
            stats_cs_add(&null, SD_DIFF * prec_rng_normal(&rng));
            /* raw losses: mean 1.4, sd 0.006, and another mixture scale */
            stats_cs_add(&raw, LOSS + SD_SEED * prec_rng_normal(&rng));
            stats_cs_add(&edge, margin + SD_DIFF * prec_rng_normal(&rng));
            if (!null_shift) {
                assert_int_equal(stats_cs_interval(&null, ALPHA, rho, &cs), STATS_OK);
                null_shift = stats_cs_decide(&cs, margin) == STATS_SHIFT_UP ||
                             stats_cs_decide(&cs, margin) == STATS_SHIFT_DOWN;
            }
            if (!raw_miss) {
                assert_int_equal(stats_cs_interval(&raw, ALPHA, rho_raw, &cs), STATS_OK);
                raw_miss = !(cs.lo < LOSS && LOSS < cs.hi);
            }
            if (!edge_equiv) {
                assert_int_equal(stats_cs_interval(&edge, ALPHA, rho, &cs), STATS_OK);
                edge_equiv = stats_cs_decide(&cs, margin) == STATS_EQUIVALENT;
            }
            if (!t_rejected && n >= 2) {
                double sd = sqrt(null.m2 / (n - 1));
                t_rejected = sd > 0.0 && fabs(null.mean) / (sd / sqrt((double)n)) > crit[n];
            }
            /* does the sequential rule reach decisions? */
            if (zero_first == STATS_UNDECIDED) {
                stats_cs_add(&zero, SD_DIFF * prec_rng_normal(&rng));
                assert_int_equal(stats_cs_interval(&zero, ALPHA, rho, &cs), STATS_OK);
                zero_first = stats_cs_decide(&cs, margin);
            }
            if (moved_first == STATS_UNDECIDED) {
                stats_cs_add(&moved, SD_DIFF + SD_DIFF * prec_rng_normal(&rng));
                assert_int_equal(stats_cs_interval(&moved, ALPHA, rho, &cs), STATS_OK);
                moved_first = stats_cs_decide(&cs, margin);
            }
        }
        cs_shift += null_shift;
        cs_miss_raw += raw_miss;
        cs_equiv_at_margin += edge_equiv;
        t_twin += t_rejected;
        equiv_by_end += zero_first == STATS_EQUIVALENT;
        shift_by_end += moved_first == STATS_SHIFT_UP;
    }
    printf("  mixture rho %.4f (narrowest near n = 100)\n", rho);
    assert_true(rate_ok("CS, 500 looks, mean 0: ever declared a shift", cs_shift, SIMS, ALPHA, RATE_AT_MOST));
    assert_true(rate_ok("CS on raw losses (1.4, sd 0.006), 500 looks: ever missed the mean", cs_miss_raw, SIMS, ALPHA,
                        RATE_AT_MOST));
    assert_true(rate_ok("CS, 500 looks, mean at the margin: ever declared equivalent", cs_equiv_at_margin, SIMS, ALPHA,
                        RATE_AT_MOST));
    /* the rule decides: equivalence within 0.5 sd at mean 0, a 1 sd shift up,
     * each first decision by 500 runs in >= 95% of sequences (both near 1) */
    assert_true(rate_ok("CS, mean 0, margin 0.5 sd: first decision equivalent by 500", equiv_by_end, SIMS, 0.95,
                        RATE_AT_LEAST));
    assert_true(rate_ok("CS, mean +1 sd: first decision shift-up by 500", shift_by_end, SIMS, 0.95, RATE_AT_LEAST));
    assert_false(rate_ok("TWIN fixed-n t test after every run: ever rejected", t_twin, SIMS, ALPHA, RATE_AT_MOST));

    /* the mixture helper puts the narrowest interval near n_opt: its radius
     * there is within 2% of the best over a grid of rho */
    stats_cs_state s = {.n = 100, .mean = 0.0, .m2 = 99.0};
    assert_int_equal(stats_cs_interval(&s, ALPHA, stats_cs_mixture_for(100, ALPHA), &cs), STATS_OK);
    double best = INFINITY;
    for (double r = 0.01; r < 3.0; r *= 1.01) {
        stats_cs c;
        assert_int_equal(stats_cs_interval(&s, ALPHA, r, &c), STATS_OK);
        best = fmin(best, c.hi);
    }
    printf("  radius at n = 100: %.5f sd with the helper's rho, best over rho %.5f sd\n", cs.hi, best);
    assert_true(cs.hi <= 1.02 * best);
    /* the first looks cannot bound the mean (with this rho, up to n = 10);
     * bit-identical arms give {0} once they can */
    stats_cs_start(&s);
    for (int i = 0; i < 10; i++) stats_cs_add(&s, 0.001 * (i % 3));
    assert_int_equal(stats_cs_interval(&s, ALPHA, rho, &cs), STATS_OK);
    assert_true(cs.lo == -INFINITY && cs.hi == INFINITY && stats_cs_decide(&cs, margin) == STATS_UNDECIDED);
    stats_cs_start(&s);
    for (int i = 0; i < 30; i++) stats_cs_add(&s, 0.0);
    assert_int_equal(stats_cs_interval(&s, ALPHA, rho, &cs), STATS_OK);
    assert_true(cs.lo == 0.0 && cs.hi == 0.0 && stats_cs_decide(&cs, margin) == STATS_EQUIVALENT);
}

/* ---- the fixed-n verdict ----------------------------------------------------------------------- */

static void test_verdict(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_verdict"));
    stats_verdict v;
    const double up[] = {0.0040, 0.0041, 0.0039, 0.0042, 0.0038};
    assert_int_equal(stats_verdict_paired(up, 5, 0.002, ALPHA, 0.8, &v), STATS_OK);
    assert_int_equal(v.decision, STATS_SHIFT_UP);
    assert_false(v.within_margin);
    assert_true(v.runs_total == 0 && v.runs_more == 0);
    const double down[] = {-0.0040, -0.0041, -0.0039, -0.0042, -0.0038};
    assert_int_equal(stats_verdict_paired(down, 5, 0.002, ALPHA, 0.8, &v), STATS_OK);
    assert_int_equal(v.decision, STATS_SHIFT_DOWN);
    const double tight[] = {0.0001, -0.0001, 0.00005, -0.00005, 0.0, 0.00002};
    assert_int_equal(stats_verdict_paired(tight, 6, 0.002, ALPHA, 0.8, &v), STATS_OK);
    assert_int_equal(v.decision, STATS_EQUIVALENT);
    assert_true(v.tost.ci_lo > -0.002 && v.tost.ci_hi < 0.002);
    const double zeros[4] = {0};
    assert_int_equal(stats_verdict_paired(zeros, 4, 0.002, ALPHA, 0.8, &v), STATS_OK);
    assert_int_equal(v.decision, STATS_EQUIVALENT);
    const double same[4] = {0.001, 0.001, 0.001, 0.001}; /* detectable yet inside the margin */
    assert_int_equal(stats_verdict_paired(same, 4, 0.002, ALPHA, 0.8, &v), STATS_OK);
    assert_true(v.decision == STATS_SHIFT_UP && v.within_margin);
    const double noisy[] = {0.003, -0.004, 0.001, -0.002};
    assert_int_equal(stats_verdict_paired(noisy, 4, 0.002, ALPHA, 0.8, &v), STATS_OK);
    assert_int_equal(v.decision, STATS_UNDECIDED);
    double sd = stats_sd(noisy, 4);
    size_t plan = stats_runs_for_equivalence(stats_mean(noisy, 4), 0.002, sd, ALPHA, 0.8);
    printf("  undecided after 4 runs: %zu runs in all, %zu more (plan %zu)\n", v.runs_total, v.runs_more, plan);
    assert_true(plan > 4 && v.runs_total == plan && v.runs_more == plan - 4);
    printf("  decision names: %s %s %s %s\n", stats_decision_name(STATS_UNDECIDED), stats_decision_name(STATS_SHIFT_UP),
           stats_decision_name(STATS_SHIFT_DOWN), stats_decision_name(STATS_EQUIVALENT));

    /* error rates of the verdict: a shift declared at mean 0, equivalence
     * declared at the margin */
    const double margin = 0.004;
    double d[10];
    long shift_at_zero = 0, equiv_at_margin = 0;
    for (int s = 0; s < SIMS; s++) {
        normal_sample(&rng, 10, 0.0, SD_DIFF, d);
        assert_int_equal(stats_verdict_paired(d, 10, margin, ALPHA, 0.8, &v), STATS_OK);
        shift_at_zero += v.decision == STATS_SHIFT_UP || v.decision == STATS_SHIFT_DOWN;
        normal_sample(&rng, 10, s & 1 ? margin : -margin, SD_DIFF, d);
        assert_int_equal(stats_verdict_paired(d, 10, margin, ALPHA, 0.8, &v), STATS_OK);
        equiv_at_margin += v.decision == STATS_EQUIVALENT;
    }
    assert_true(rate_ok("verdict, mean 0, n 10: shift declared", shift_at_zero, SIMS, ALPHA, RATE_NEAR));
    assert_true(rate_ok("verdict, mean +-margin, n 10: equivalence declared", equiv_at_margin, SIMS, ALPHA,
                        RATE_AT_MOST));
}

/* ---- bad input -------------------------------------------------------------------------------- */

static void test_bad_input(void **state)
{
    (void)state;
    const double d[] = {0.001, 0.002, -0.001, 0.0005}, with_nan[] = {0.001, NAN, 0.0};
    stats_ttest t, poison;
    memset(&poison, 0x5a, sizeof poison);
    t = poison;
    assert_int_equal(stats_paired_t(d, 1, ALPHA, &t), STATS_TOO_FEW);
    assert_int_equal(stats_paired_t(with_nan, 3, ALPHA, &t), STATS_NONFINITE);
    assert_int_equal(stats_paired_t(d, 4, 0.0, &t), STATS_BAD_ALPHA);
    assert_int_equal(stats_paired_t(d, 4, 1.0, &t), STATS_BAD_ALPHA);
    assert_int_equal(stats_welch_t(d, 1, d, 4, ALPHA, &t), STATS_TOO_FEW);
    assert_memory_equal(&t, &poison, sizeof t); /* untouched on error */
    stats_tost e;
    assert_int_equal(stats_tost_paired(d, 4, 0.0, ALPHA, &e), STATS_BAD_MARGIN);
    assert_int_equal(stats_tost_paired(d, 4, INFINITY, ALPHA, &e), STATS_BAD_MARGIN);
    assert_int_equal(stats_tost_paired(d, 4, 0.002, 0.5, &e), STATS_BAD_ALPHA);
    stats_var_test v;
    assert_int_equal(stats_pitman_morgan(d, d, 2, ALPHA, &v), STATS_TOO_FEW);
    assert_int_equal(stats_f_test(d, 4, with_nan, 3, ALPHA, &v), STATS_NONFINITE);
    stats_wilcoxon w;
    assert_int_equal(stats_wilcoxon_signed_rank(d, 0, &w), STATS_TOO_FEW);
    double adj[2];
    assert_int_equal(stats_holm((const double[]){0.1, 1.5}, 2, adj), STATS_BAD_P);
    assert_int_equal(stats_holm((const double[]){0.1, NAN}, 2, adj), STATS_BAD_P);
    assert_int_equal(stats_holm(adj, 0, adj), STATS_TOO_FEW);
    stats_verdict vd;
    assert_int_equal(stats_verdict_paired(d, 4, 0.002, ALPHA, 1.0, &vd), STATS_BAD_POWER);
    assert_int_equal(stats_verdict_paired(d, 4, -1.0, ALPHA, 0.8, &vd), STATS_BAD_MARGIN);
    stats_cs_state s;
    stats_cs cs;
    stats_cs_start(&s);
    assert_int_equal(stats_cs_add(&s, INFINITY), STATS_NONFINITE);
    assert_true(s.n == 0);
    assert_int_equal(stats_cs_interval(&s, ALPHA, 0.0, &cs), STATS_BAD_SPREAD);
    assert_int_equal(stats_cs_interval(&s, 2.0, 1.0, &cs), STATS_BAD_ALPHA);
    assert_true(isnan(stats_cs_mixture_for(0, ALPHA)));
    assert_int_equal(stats_runs_for_shift(0.0, 0.004, ALPHA, 0.8), 0);
    assert_int_equal(stats_runs_for_equivalence(0.0, 0.002, -0.004, ALPHA, 0.8), 0);
    /* every status has its own one-line message */
    for (int a = STATS_OK; a <= STATS_NO_MEMORY; a++) {
        const char *m = stats_status_message((stats_status)a);
        assert_true(m && *m && !strchr(m, '\n'));
        for (int b = STATS_OK; b < a; b++) assert_string_not_equal(m, stats_status_message((stats_status)b));
    }
    printf("  e.g. %s\n", stats_status_message(STATS_BAD_MARGIN));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distribution_values),
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_descriptive),
        cmocka_unit_test(test_worked_dataset),
        cmocka_unit_test(test_wilcoxon_ties_and_normal),
        cmocka_unit_test(test_holm_values),
        cmocka_unit_test(test_power_values),
        cmocka_unit_test(test_null_false_positive_rates),
        cmocka_unit_test(test_ci_coverage),
        cmocka_unit_test(test_power_simulated),
        cmocka_unit_test(test_tost_at_margin),
        cmocka_unit_test(test_holm_fwer),
        cmocka_unit_test(test_confidence_sequence),
        cmocka_unit_test(test_verdict),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
