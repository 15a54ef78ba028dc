/* precision/stats.h — the statistics behind `ulpscope compare`, `noise` and
 * `bisect`: did a "mathematically equivalent" kernel change move the final
 * validation loss of training runs, and if not, is it equivalent within a
 * stated margin?
 *
 * Design: every arm runs the same seeds (common random numbers), so a
 * comparison works on the paired differences d_i = candidate_i - baseline_i
 * (typical: n = 4..500 pairs, losses ~1.4, seed-to-seed sd ~0.006, sd of d
 * ~0.004).  Equivalence is a claim with a margin (TOST), never the absence of
 * significance; several arms are corrected together (Holm); looking after
 * every batch needs the anytime-valid confidence sequence, not the fixed-n
 * tests.
 *
 * Conventions:
 *   - Estimates are candidate minus baseline: y - x, b - a, mean of d.
 *   - alpha is the two-sided level of tests and intervals (CI at 1 - alpha),
 *     0 < alpha < 1; TOST needs 0 < alpha < 0.5.
 *   - Tests return a stats_status: STATS_OK, or what was wrong with the input
 *     (stats_status_message() names it in one line); *out is then untouched.
 *   - Zero spread (all differences equal, e.g. bit-identical arms) is taken
 *     at face value: se = 0 gives t = +-inf and p = 0 for a nonzero
 *     estimate, t = 0 and p = 1 for a zero one, and a CI of one point.
 *   - Distribution functions return NaN for NaN or out-of-domain arguments.
 * Accuracy (checked in tests/test_stats.c against mpmath at 40 digits; the
 * values come from tests/stats_reference_values.py): incomplete beta, t and
 * F probabilities and quantiles to a relative error below 1e-12 (measured
 * below 5e-13) in the tail asked for, for degrees of freedom 0.5..1000; the
 * t for 1e4..1e6 degrees of freedom below 1e-10 (measured 3e-11: the
 * continued fraction needs ~sqrt(df) terms there); the normal quantile to 4
 * ulps, the normal CDF to (1 + z^2) * 4 ulps (its own conditioning); power
 * integrals to 1e-10 absolute (measured 2e-13).
 *
 * References (formulas restated at each function):
 *   [CGL83]  Chan, Golub, LeVeque, Algorithms for computing the sample
 *            variance, The American Statistician 37(3), 1983.
 *   [DLMF]   NIST Digital Library of Mathematical Functions, ch. 8 and 26.
 *   [AS]     Abramowitz & Stegun, Handbook of Mathematical Functions, 1964.
 *   [Lentz]  Thompson & Barnett, Coulomb and Bessel functions of complex
 *            arguments and order, J. Comput. Phys. 64, 1986 (modified Lentz).
 *   [Welch]  Welch, The generalization of Student's problem..., Biometrika
 *            34, 1947; Satterthwaite, Biometrics Bulletin 2, 1946.
 *   [Pratt]  Pratt, Remarks on zeros and ties in the Wilcoxon signed rank
 *            procedures, JASA 54, 1959; Wilcoxon, Biometrics Bulletin 1, 1945.
 *   [PM]     Pitman, Biometrika 31, 1939; Morgan, A test for the significance
 *            of the difference between the two variances in a sample from a
 *            normal bivariate population, Biometrika 31, 1939.
 *   [TOST]   Schuirmann, A comparison of the two one-sided tests procedure...,
 *            J. Pharmacokinet. Biopharm. 15(6), 1987.
 *   [Owen]   Owen, A special case of a bivariate non-central t-distribution,
 *            Biometrika 52, 1965 (exact TOST power).
 *   [Holm]   Holm, A simple sequentially rejective multiple test procedure,
 *            Scand. J. Statist. 6, 1979.
 *   [Lai]    Lai, On confidence sequences, Ann. Statist. 4(2), 1976;
 *            Wang & Ramdas, Anytime-valid t-tests and confidence sequences
 *            for Gaussian means with unknown variance, arXiv:2310.03722;
 *            Ville, Etude critique de la notion de collectif, 1939.
 */
#ifndef ULPSCOPE_PRECISION_STATS_H
#define ULPSCOPE_PRECISION_STATS_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    STATS_OK = 0,
    STATS_TOO_FEW,     /* fewer observations than the method needs */
    STATS_NONFINITE,   /* a NaN or infinity in the data */
    STATS_BAD_ALPHA,   /* alpha outside (0, 1), or (0, 0.5) for TOST */
    STATS_BAD_MARGIN,  /* margin not finite and > 0 */
    STATS_BAD_POWER,   /* target power outside (0, 1) */
    STATS_BAD_SPREAD,  /* mixture scale or sd not finite and > 0 */
    STATS_BAD_P,       /* a p-value outside [0, 1] or NaN */
    STATS_NO_MEMORY,
} stats_status;

/* One line naming the problem, e.g. "fewer observations than the test needs". */
const char *stats_status_message(stats_status s);

/* ---- descriptive ------------------------------------------------------------ */

/* Mean with one correction pass: m0 = sum x / n, m = m0 + sum (x - m0) / n
 * (the second pass removes most of the first pass's rounding).  n == 0: NaN. */
double stats_mean(const double *x, size_t n);

/* Sample variance, corrected two-pass algorithm [CGL83, eq. 1.7]:
 *   s^2 = ( sum (x_i - m)^2 - (sum (x_i - m))^2 / n ) / (n - 1).
 * Relative error O(n eps + n^2 eps^2 kappa^2), kappa the condition number;
 * losses at 1.4 with sd 1e-3 lose nothing that matters.  n < 2: NaN. */
double stats_variance(const double *x, size_t n);

/* sqrt(stats_variance). */
double stats_sd(const double *x, size_t n);

/* Pearson correlation, two-pass: r = Sxy / sqrt(Sxx Syy) with
 * Sxy = sum (x_i - mx)(y_i - my); clamped to [-1, 1].  NaN for n < 2 or a
 * constant x or y. */
double stats_correlation(const double *x, const double *y, size_t n);

/* ---- distributions ------------------------------------------------------------ */

/* Standard normal CDF, Phi(z) = erfc(-z / sqrt 2) / 2 (relative accuracy in
 * both tails: use stats_normal_cdf(-z) for the upper tail). */
double stats_normal_cdf(double z);

/* Phi^-1(p): the rational start of [AS 26.2.23] refined by Halley steps on
 * Phi(x) - p evaluated with erfc, in the tail of the smaller of p and 1 - p.
 * p = 0 / 1: -inf / +inf. */
double stats_normal_quantile(double p);

/* Regularized incomplete beta I_x(a, b), a, b > 0, 0 <= x <= 1:
 *   I_x(a,b) = x^a (1-x)^b / (a B(a,b)) * 1/(1+ d1/(1+ d2/(1+ ...)))
 *   d_2m   =  m (b - m) x / ((a + 2m - 1)(a + 2m)),
 *   d_2m+1 = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1))  [DLMF 8.17.22],
 * evaluated by the modified Lentz method [Lentz] for x < (a+1)/(a+b+2), and as
 * 1 - I_{1-x}(b, a) above.  log B(a,b) uses Stirling's series when an
 * argument is >= 10, so large degrees of freedom do not cancel lgamma's. */
double stats_beta_inc(double a, double b, double x);

/* x with I_x(a, b) = p: Newton on the log of the smaller tail, in the
 * variable logit(x), kept inside a bracket. */
double stats_beta_inc_inverse(double a, double b, double p);

/* Student t with df > 0 degrees of freedom (df = +inf: normal):
 *   P(|T| > t) = I_{df/(df+t^2)}(df/2, 1/2)   [DLMF 8.17 / AS 26.7.1].
 * stats_t_cdf(t) = P(T <= t), accurate in the lower tail (use
 * stats_t_cdf(-t, df) for an upper tail); stats_t_two_sided_p(t) = P(|T| >= |t|). */
double stats_t_cdf(double t, double df);
double stats_t_two_sided_p(double t, double df);
double stats_t_quantile(double p, double df);

/* F with (d1, d2) degrees of freedom:
 *   P(F <= f) = I_{d1 f/(d1 f + d2)}(d1/2, d2/2)   [AS 26.6.2];
 * stats_f_sf is the upper tail P(F > f), computed directly. */
double stats_f_cdf(double f, double d1, double d2);
double stats_f_sf(double f, double d1, double d2);
double stats_f_quantile(double p, double d1, double d2);

/* ---- tests on means ------------------------------------------------------------- */

typedef struct {
    size_t n;          /* pairs (paired) or nx + ny (Welch) */
    double df;
    double estimate;   /* mean difference, candidate - baseline */
    double se;         /* its standard error */
    double t;          /* estimate / se */
    double p;          /* two-sided */
    double ci_lo, ci_hi; /* 1 - alpha confidence interval for the mean difference */
} stats_ttest;

/* Paired t test on the differences d (n >= 2):
 *   dbar = mean d, se = sd(d) / sqrt n, t = dbar / se, df = n - 1,
 *   p = P(|T_df| >= |t|), CI = dbar -+ t_{1-alpha/2, df} se.
 * Assumes the d_i independent and normal (robust to mild non-normality). */
stats_status stats_paired_t(const double *d, size_t n, double alpha, stats_ttest *out);

/* Welch's unpaired t test of y against x (nx, ny >= 2) [Welch]:
 *   estimate = mean y - mean x, se^2 = sx^2/nx + sy^2/ny,
 *   df = se^4 / ( (sx^2/nx)^2/(nx-1) + (sy^2/ny)^2/(ny-1) ),
 *   p and CI as for the paired test with this df.
 * For arms that share seeds it throws the pairing away (and the power). */
stats_status stats_welch_t(const double *x, size_t nx, const double *y, size_t ny, double alpha,
                           stats_ttest *out);

/* ---- Wilcoxon signed-rank ---------------------------------------------------------- */

typedef struct {
    size_t n;          /* differences given */
    size_t n_zero;     /* exact zeros among them */
    size_t n_tied;     /* nonzero differences whose |d| equals another's */
    double w_plus;     /* sum of the ranks of the positive differences */
    double null_mean;  /* E[w_plus] under H0 */
    double null_sd;    /* sd of w_plus under H0 */
    double z;          /* (w_plus - null_mean) / null_sd; 0 when null_sd is 0 */
    double p;          /* two-sided */
    bool exact;        /* p from the exact null distribution */
} stats_wilcoxon;

/* Wilcoxon signed-rank test of "d symmetric about 0" with Pratt's zero
 * handling [Pratt]: all |d_i|, zeros included, get midranks (tied values
 * share the mean of their ranks), the zeros' ranks are then dropped, and
 * w_plus = sum of the ranks r_i of d_i > 0.  Under H0 each nonzero
 * difference's sign is + or - with probability 1/2 independently of |d|, so
 *   E w_plus = sum r_i / 2,  Var w_plus = sum r_i^2 / 4   (over nonzero d)
 * — ties and zeros are corrected for by using the actual ranks.
 * Up to 50 nonzero differences (and fewer than ~10^4 in all, which bounds
 * the table below) the p-value is exact: the null distribution
 * of sum r_i B_i (B_i fair coins) by dynamic programming over doubled ranks,
 * which is exact also with ties and zeros (conditional on the |d| pattern);
 * p = min(1, 2 min(P(W <= w_plus), P(W >= w_plus))).  Above 50, the normal
 * approximation z = (w_plus - E)/sd without continuity correction.  All
 * differences zero: p = 1.  Needs n >= 1. */
stats_status stats_wilcoxon_signed_rank(const double *d, size_t n, stats_wilcoxon *out);

/* ---- variance ratio -------------------------------------------------------------- */

typedef struct {
    size_t n;          /* pairs (Pitman-Morgan) or nx + ny (F) */
    double ratio;      /* var(y) / var(x), candidate over baseline */
    double statistic;  /* Pitman-Morgan: t; F test: F = ratio */
    double df1, df2;   /* Pitman-Morgan: n - 2 and NaN; F: ny - 1, nx - 1 */
    double r;          /* Pitman-Morgan: corr(x + y, y - x); F: NaN */
    double p;          /* two-sided */
    double ci_lo, ci_hi; /* 1 - alpha interval for the variance ratio */
} stats_var_test;

/* Pitman-Morgan test of var(x) = var(y) for PAIRED arms (n >= 3) [PM]: an
 * arm can add spread without moving the mean.  cov(x+y, y-x) = var y - var x,
 * so with r = corr(x + y, y - x):
 *   t = r sqrt((n - 2) / (1 - r^2)),  df = n - 2,  p = P(|T_df| >= |t|).
 * CI for the ratio F = var y / var x, by inverting the test (the same t on
 * (x, y / sqrt(lambda))), with rho = corr(x, y) and c = t_{1-alpha/2, n-2}:
 *   K = 1 + 2 (1 - rho^2) c^2 / (n - 2),  lambda = F (K -+ sqrt(K^2 - 1)).
 * Assumes (x_i, y_i) bivariate normal, independent across i. */
stats_status stats_pitman_morgan(const double *x, const double *y, size_t n, double alpha,
                                 stats_var_test *out);

/* F test of var(x) = var(y) for independent arms (nx, ny >= 2):
 *   F = sy^2 / sx^2 ~ F(ny - 1, nx - 1),  p = min(1, 2 min(P(F' <= F), P(F' >= F))),
 *   CI = [F / F_{1-alpha/2}(ny-1, nx-1), F / F_{alpha/2}(ny-1, nx-1)].
 * Assumes normal data (it is not robust to heavy tails). */
stats_status stats_f_test(const double *x, size_t nx, const double *y, size_t ny, double alpha,
                          stats_var_test *out);

/* ---- equivalence ------------------------------------------------------------------- */

typedef struct {
    size_t n;
    double df;           /* n - 1 */
    double margin;       /* delta: equivalent means |mean difference| < delta */
    double estimate, se;
    double t_lower;      /* (dbar + delta) / se: H0 mean <= -delta */
    double t_upper;      /* (dbar - delta) / se: H0 mean >= +delta */
    double p_lower;      /* P(T >= t_lower) */
    double p_upper;      /* P(T <= t_upper) */
    double p;            /* max(p_lower, p_upper) */
    double ci_lo, ci_hi; /* 1 - 2 alpha interval: dbar -+ t_{1-alpha, df} se */
    bool equivalent;     /* p < alpha, i.e. the 1 - 2 alpha CI lies inside (-delta, delta) */
} stats_tost;

/* Paired TOST [TOST]: two one-sided t tests at level alpha against the
 * margin delta; equivalence is claimed when both reject.  The chance of
 * claiming it when |true mean| >= delta is at most alpha. */
stats_status stats_tost_paired(const double *d, size_t n, double margin, double alpha, stats_tost *out);

/* ---- several arms -------------------------------------------------------------------- */

/* Holm's step-down adjusted p-values [Holm]: with p sorted ascending
 * p_(1) <= ... <= p_(k),
 *   adj_(i) = max_{j <= i} min(1, (k - j + 1) p_(j)),
 * written back in the input order.  Rejecting adj < alpha keeps the
 * family-wise error rate <= alpha under any dependence.  A p outside
 * [0, 1] or NaN gives STATS_BAD_P.  adjusted may alias p. */
stats_status stats_holm(const double *p, size_t k, double *adjusted);

/* ---- power and sample size --------------------------------------------------------------- */

/* Largest number of runs the sample-size searches return. */
#define STATS_MAX_RUNS 1000000

/* Power of the two-sided paired t test at level alpha with n pairs when the
 * true mean difference is shift and the sd of the differences is sd_diff:
 *   P(|T'| > c),  T' = (Z + lambda) / S,  lambda = shift sqrt(n) / sd_diff,
 *   c = t_{1-alpha/2, n-1},  S = sqrt(chi^2_{n-1} / (n-1)) independent of Z,
 * i.e. the noncentral t, computed as E_S[Phi(lambda - cS) + Phi(-lambda - cS)]
 * by Gauss-Legendre quadrature over log S.  NaN on bad arguments. */
double stats_power_paired_t(size_t n, double shift, double sd_diff, double alpha);

/* Smallest n >= 2 with stats_power_paired_t(n) >= power; 0 when the
 * arguments are bad or more than STATS_MAX_RUNS runs would be needed.
 * For large n it approaches the normal formula
 *   n ~ (z_{1-alpha/2} + z_{power})^2 sd^2 / shift^2 (+ about z^2/2). */
size_t stats_runs_for_shift(double shift, double sd_diff, double alpha, double power);

/* Power of the paired TOST at margin delta when the true difference is
 * true_diff (exact [Owen]): with c = t_{1-alpha, n-1}, s = sd_diff/sqrt n,
 *   E_S[ max(0, Phi((delta - true_diff)/s - cS) - Phi((-delta - true_diff)/s + cS)) ]. */
double stats_power_tost(size_t n, double true_diff, double margin, double sd_diff, double alpha);

/* Smallest n >= 2 with stats_power_tost(n) >= power; 0 when the arguments
 * are bad, |true_diff| >= margin, or more than STATS_MAX_RUNS are needed.
 * Normal formula at true_diff = 0: n ~ (z_{1-alpha} + z_{(1+power)/2})^2 sd^2 / delta^2. */
size_t stats_runs_for_equivalence(double true_diff, double margin, double sd_diff, double alpha,
                                  double power);

/* ---- decisions ------------------------------------------------------------------------ */

typedef enum {
    STATS_UNDECIDED = 0,
    STATS_SHIFT_UP,     /* candidate's loss is higher */
    STATS_SHIFT_DOWN,   /* candidate's loss is lower */
    STATS_EQUIVALENT,   /* within the margin */
} stats_decision;

const char *stats_decision_name(stats_decision d); /* "undecided", "shift-up", "shift-down", "equivalent" */

/* ---- anytime-valid confidence sequence ------------------------------------------------- */

/* Running sums of the differences, updated in O(1) per run (Welford). */
typedef struct {
    size_t n;
    double mean;
    double m2;    /* sum (d_i - mean)^2 */
} stats_cs_state;

typedef struct {
    size_t n;
    double estimate;   /* mean of the differences so far */
    double lo, hi;     /* -inf / +inf while the data cannot bound the mean yet */
} stats_cs;

/* Lai's t-mixture confidence sequence [Lai] for the mean mu of differences
 * d_1, d_2, ... that are i.i.d. N(mu, sigma^2) with sigma UNKNOWN (it uses
 * the spread of the data, nothing known in advance).
 * Why it is valid: for a hypothesized mu, the likelihood ratio of the
 * scale-invariant part of the data (d_i - mu up to a common factor), with the
 * standardized effect theta = (mean - mu)/sigma drawn from N(0, rho^2) under
 * the alternative, is
 *   M_n(mu) = (1 + n rho^2)^(-1/2) * (1 - rho^2 T^2 / ((1 + n rho^2) S))^(-n/2),
 *   T = sum (d_i - mu),  S = sum (d_i - mu)^2,
 * a nonnegative martingale with M_1 = 1 under mu, whatever sigma is; by
 * Ville's inequality P(exists n: M_n(mu) >= 1/alpha) <= alpha.  The set
 * {mu : M_n(mu) < 1/alpha} is the interval
 *   mean -+ sqrt( G SS / (n (n - G)) ),   SS = sum (d_i - mean)^2,
 *   G = (1 - A)(1 + n rho^2) / rho^2,  A = (alpha^2 / (1 + n rho^2))^(1/n),
 * the whole line while G >= n (the first few runs).  So with probability
 * >= 1 - alpha the true mean lies in EVERY interval of the sequence: look
 * after every run or batch and stop whenever you like.
 * Assumptions: independent, identically distributed, normal differences.
 * The mixture scale rho (> 0, chosen before seeing data) only moves where
 * the intervals are narrowest; stats_cs_mixture_for picks it.  Not
 * guaranteed for non-normal differences: strongly skewed ones break it (and
 * the fixed-n t test; figures in docs/statistics.md).  Exact zeros
 * everywhere (bit-identical arms) give the one-point interval {0}. */
void stats_cs_start(stats_cs_state *s);
stats_status stats_cs_add(stats_cs_state *s, double d);
stats_status stats_cs_interval(const stats_cs_state *s, double alpha, double mixture, stats_cs *out);

/* The rho that makes the interval narrowest near n_opt runs: for large n the
 * squared radius is ~ (SS/n^2)(1 + r)(ln(1 + r) + 2 ln(1/alpha)) / r with
 * r = n rho^2, minimal where r = 2 ln(1/alpha) + ln(1 + r) (solved by fixed
 * point); rho = sqrt(r / n_opt).  NaN for n_opt == 0 or a bad alpha. */
double stats_cs_mixture_for(size_t n_opt, double alpha);

/* Sequential decision from a confidence sequence: SHIFT_UP when lo > 0,
 * SHIFT_DOWN when hi < 0, EQUIVALENT when -margin <= lo and hi <= margin,
 * else UNDECIDED.  With a 1 - alpha sequence, declaring a shift when the mean
 * is 0, or equivalence when |mean| > margin, happens with probability <=
 * alpha however often one looks. */
stats_decision stats_cs_decide(const stats_cs *cs, double margin);

/* ---- fixed-n verdict ------------------------------------------------------------------------ */

typedef struct {
    stats_decision decision;
    stats_ttest test;      /* paired t at alpha */
    stats_tost tost;       /* TOST at the margin and alpha */
    bool within_margin;    /* a SHIFT that the TOST also finds inside the margin */
    /* UNDECIDED only (else 0): the plan for a decision, from the observed
     * estimate and sd taken as the truth (a plug-in, not a guarantee):
     * |estimate| < margin: runs for the TOST to reach `power`; otherwise
     * runs for the t test to detect a shift of |estimate| with `power`. */
    size_t runs_total;     /* total runs the plan needs; 0: not reachable within STATS_MAX_RUNS */
    size_t runs_more;      /* runs_total - n, at least 1 when runs_total > 0 */
} stats_verdict;

/* Verdict for a fixed number of paired differences (n >= 2): SHIFT_UP /
 * SHIFT_DOWN when the paired t test rejects at alpha (within_margin tells
 * whether the shift is also inside the margin by TOST: detectable yet
 * small); EQUIVALENT when the TOST claims |mean| < margin; else UNDECIDED
 * with the runs still needed.  At true mean 0 a SHIFT is declared with
 * probability alpha; at |mean| >= margin EQUIVALENT with probability <= alpha. */
stats_status stats_verdict_paired(const double *d, size_t n, double margin, double alpha, double power,
                                  stats_verdict *out);

#ifdef __cplusplus
}
#endif
#endif
