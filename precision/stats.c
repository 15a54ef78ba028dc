/* precision/stats.c — see stats.h for the formulas and references. */
#include "precision/stats.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

#define LN_SQRT_2PI 0.91893853320467274178 /* ln sqrt(2 pi) */
#define SQRT_2PI 2.5066282746310005024

const char *stats_status_message(stats_status s)
{
    switch (s) {
    case STATS_OK: return "ok";
    case STATS_TOO_FEW: return "fewer observations than the method needs";
    case STATS_NONFINITE: return "a value is NaN or infinite";
    case STATS_BAD_ALPHA: return "alpha must lie in (0, 1) (in (0, 0.5) for an equivalence test)";
    case STATS_BAD_MARGIN: return "the equivalence margin must be a finite number > 0";
    case STATS_BAD_POWER: return "the target power must lie in (0, 1)";
    case STATS_BAD_SPREAD: return "a scale (sd or mixture) must be a finite number > 0";
    case STATS_BAD_P: return "a p-value is outside [0, 1]";
    case STATS_NO_MEMORY: return "out of memory";
    }
    return "unknown status";
}

const char *stats_decision_name(stats_decision d)
{
    switch (d) {
    case STATS_UNDECIDED: return "undecided";
    case STATS_SHIFT_UP: return "shift-up";
    case STATS_SHIFT_DOWN: return "shift-down";
    case STATS_EQUIVALENT: return "equivalent";
    }
    return "unknown";
}

static bool all_finite(const double *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

static bool alpha_ok(double alpha) { return alpha > 0.0 && alpha < 1.0; }

/* ---- descriptive ------------------------------------------------------------------ */

double stats_mean(const double *x, size_t n)
{
    if (n == 0) return NAN;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += x[i];
    double m = sum / (double)n;
    double corr = 0.0;
    for (size_t i = 0; i < n; i++) corr += x[i] - m;
    return m + corr / (double)n;
}

double stats_variance(const double *x, size_t n)
{
    if (n < 2) return NAN;
    double m = stats_mean(x, n);
    double ss = 0.0, s = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = x[i] - m;
        ss += e * e;
        s += e;
    }
    double v = (ss - s * s / (double)n) / (double)(n - 1);
    return v > 0.0 ? v : 0.0;
}

double stats_sd(const double *x, size_t n) { return sqrt(stats_variance(x, n)); }

double stats_correlation(const double *x, const double *y, size_t n)
{
    if (n < 2) return NAN;
    double mx = stats_mean(x, n), my = stats_mean(y, n);
    double sxx = 0.0, syy = 0.0, sxy = 0.0;
    for (size_t i = 0; i < n; i++) {
        double ex = x[i] - mx, ey = y[i] - my;
        sxx += ex * ex;
        syy += ey * ey;
        sxy += ex * ey;
    }
    if (!(sxx > 0.0 && syy > 0.0)) return NAN;
    double r = sxy / sqrt(sxx * syy);
    return r > 1.0 ? 1.0 : r < -1.0 ? -1.0 : r;
}

/* ---- normal --------------------------------------------------------------------------- */

double stats_normal_cdf(double z) { return 0.5 * erfc(-z * M_SQRT1_2); }

/* Quantile of the lower tail, 0 < p <= 0.5 (result <= 0). */
static double normal_lower_quantile(double p)
{
    /* [AS 26.2.23], |error| < 4.5e-4: a start for Halley's iteration. */
    double t = sqrt(-2.0 * log(p));
    double x = -(t - (2.515517 + t * (0.802853 + t * 0.010328)) /
                         (1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308))));
    for (int it = 0; it < 8; it++) {
        double e = stats_normal_cdf(x) - p;
        /* u = e / phi(x), formed in logs so exp(x^2/2) cannot overflow alone */
        double u = e == 0.0 ? 0.0 : copysign(exp(log(fabs(e)) + 0.5 * x * x), e) * SQRT_2PI;
        double step = u / (1.0 + 0.5 * x * u);
        x -= step;
        if (fabs(step) <= 1e-16 * fabs(x)) break;
    }
    return x;
}

double stats_normal_quantile(double p)
{
    if (!(p >= 0.0 && p <= 1.0)) return NAN;
    if (p == 0.0) return -INFINITY;
    if (p == 1.0) return INFINITY;
    if (p == 0.5) return 0.0;
    return p < 0.5 ? normal_lower_quantile(p) : -normal_lower_quantile(1.0 - p);
}

/* ---- incomplete beta ------------------------------------------------------------------------ */

/* lgamma(x) - Stirling's approximation (x - 1/2) ln x - x + ln sqrt(2 pi), for
 * x >= 10: the series sum B_2k / (2k (2k-1) x^(2k-1)), truncated after the
 * x^-13 term (the next is below 3e-17 at x = 10). */
static double stirling_rest(double x)
{
    double r = 1.0 / (x * x);
    return (1.0 / 12 + r * (-1.0 / 360 + r * (1.0 / 1260 + r * (-1.0 / 1680 + r * (1.0 / 1188 +
           r * (-691.0 / 360360 + r * (1.0 / 156))))))) / x;
}

/* ln B(a, b) without the cancellation of lgamma(a) + lgamma(b) - lgamma(a+b)
 * when a or b is large: Stirling's formula's large parts are combined
 * analytically (ln(a/(a+b)) and ln(b/(a+b)) stay moderate). */
static double log_beta(double a, double b)
{
    double lo = fmin(a, b), hi = fmax(a, b);
    if (hi < 10.0) return lgamma(lo) + lgamma(hi) - lgamma(lo + hi);
    double s = lo + hi;
    double rest_hi = stirling_rest(hi) - stirling_rest(s);
    if (lo >= 10.0)
        return (lo - 0.5) * log(lo / s) + (hi - 0.5) * log1p(-lo / s) - 0.5 * log(s) + LN_SQRT_2PI +
               stirling_rest(lo) + rest_hi;
    return lgamma(lo) + (hi - 0.5) * log1p(-lo / s) - lo * log(s) + lo + rest_hi;
}

/* 1 / (1 + d1/(1 + d2/(1 + ...))) of [DLMF 8.17.22] by modified Lentz; the
 * fraction converges fast for x < (a+1)/(a+b+2). */
static double beta_fraction(double a, double b, double x)
{
    const double tiny = 1e-300;
    double f = 1.0, c = 1.0, dd = 0.0;
    for (int j = 1; j <= 100000; j++) {
        int m = j / 2;
        double coef = (j & 1) ? -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
                              : m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
        dd = 1.0 + coef * dd;
        if (fabs(dd) < tiny) dd = tiny;
        dd = 1.0 / dd;
        c = 1.0 + coef / c;
        if (fabs(c) < tiny) c = tiny;
        double delta = c * dd;
        f *= delta;
        if (fabs(delta - 1.0) < 1e-16) return 1.0 / f;
    }
    return NAN;
}

/* I_x(a, b) (*lower) and 1 - I_x(a, b) (*upper), each accurate relative to
 * itself where it is the smaller one, from x and y = 1 - x given separately
 * (callers form them without cancellation); *dens = x^a y^b / B(a, b), the
 * derivative of I with respect to logit(x). */
static void beta_tails(double a, double b, double x, double y, double *lower, double *upper, double *dens)
{
    if (x <= 0.0) { *lower = 0.0; *upper = 1.0; *dens = 0.0; return; }
    if (y <= 0.0) { *lower = 1.0; *upper = 0.0; *dens = 0.0; return; }
    double log_x = x < 0.5 ? log(x) : log1p(-y);
    double log_y = y < 0.5 ? log(y) : log1p(-x);
    double d = exp(a * log_x + b * log_y - log_beta(a, b));
    *dens = d;
    if (x < (a + 1.0) / (a + b + 2.0)) {
        *lower = d / a * beta_fraction(a, b, x);
        *upper = 1.0 - *lower;
    } else {
        *upper = d / b * beta_fraction(b, a, y);
        *lower = 1.0 - *upper;
    }
}

double stats_beta_inc(double a, double b, double x)
{
    if (!(a > 0.0 && b > 0.0 && x >= 0.0 && x <= 1.0)) return NAN;
    double lo, up, d;
    beta_tails(a, b, x, 1.0 - x, &lo, &up, &d);
    return lo;
}

/* w = logit(x) with I_x(a, b) = lower_target (= 1 - upper_target; the caller
 * gives both exactly).  Newton on ln(tail) - ln(target) for the smaller
 * tail, which is nearly linear in w far out (ln I ~ a w as w -> -inf,
 * ln(1 - I) ~ -b w as w -> +inf); bisection whenever a step leaves the
 * bracket.  Returns +-inf for targets 0 or 1. */
static double beta_inverse_logit(double a, double b, double lower_target, double upper_target)
{
    if (lower_target <= 0.0) return -INFINITY;
    if (upper_target <= 0.0) return INFINITY;
    bool use_lower = lower_target <= upper_target;
    double log_target = log(use_lower ? lower_target : upper_target);
    /* g(w) = +-(ln tail(w) - ln target), increasing in w */
    double w = log(a / b), lo = -INFINITY, hi = INFINITY;
    for (int it = 0; it < 400; it++) {
        double ex = exp(-fabs(w));
        double small = ex / (1.0 + ex), large = 1.0 / (1.0 + ex); /* x, y without cancellation */
        double x = w < 0 ? small : large, y = w < 0 ? large : small;
        double lower, upper, dens;
        beta_tails(a, b, x, y, &lower, &upper, &dens);
        double tail = use_lower ? lower : upper;
        double g, slope;
        if (tail > 0.0) {
            g = log(tail) - log_target;
            slope = dens / tail;
            if (!use_lower) g = -g;
        } else { /* underflow: far out on the side of the missing tail */
            g = use_lower ? -INFINITY : INFINITY;
            slope = 0.0;
        }
        if (g == 0.0) return w;
        if (g > 0.0) hi = w; else lo = w;
        double next = w - g / slope;
        if (!(next > lo && next < hi)) {
            if (isfinite(lo) && isfinite(hi)) next = 0.5 * (lo + hi);
            else next = g > 0.0 ? w - fmax(1.0, 2.0 * fabs(w)) : w + fmax(1.0, 2.0 * fabs(w));
        }
        if (fabs(next - w) <= 1e-15 * fmax(1.0, fabs(w)) || hi - lo <= 1e-15 * fmax(1.0, fabs(w)))
            return next;
        w = next;
    }
    return w;
}

double stats_beta_inc_inverse(double a, double b, double p)
{
    if (!(a > 0.0 && b > 0.0 && p >= 0.0 && p <= 1.0)) return NAN;
    double w = beta_inverse_logit(a, b, p, 1.0 - p);
    return 1.0 / (1.0 + exp(-w));
}

/* ---- t ------------------------------------------------------------------------------------- */

/* P(|T| >= |t|). */
static double t_two_tail(double t, double df)
{
    if (isinf(df)) return erfc(fabs(t) * M_SQRT1_2);
    if (isinf(t)) return 0.0;
    double t2 = t * t;
    double x, y; /* df/(df + t^2), t^2/(df + t^2), each without cancellation */
    if (t2 > DBL_MAX / 4) { x = df / fabs(t) / fabs(t); y = 1.0; }
    else { x = df / (df + t2); y = t2 / (df + t2); }
    double lower, upper, dens;
    beta_tails(0.5 * df, 0.5, x, y, &lower, &upper, &dens);
    return lower;
}

double stats_t_two_sided_p(double t, double df)
{
    if (isnan(t) || !(df > 0.0)) return NAN;
    return t_two_tail(t, df);
}

double stats_t_cdf(double t, double df)
{
    if (isnan(t) || !(df > 0.0)) return NAN;
    double half = 0.5 * t_two_tail(t, df);
    return t <= 0.0 ? half : 1.0 - half;
}

double stats_t_quantile(double p, double df)
{
    if (!(p >= 0.0 && p <= 1.0) || !(df > 0.0)) return NAN;
    if (isinf(df)) return stats_normal_quantile(p);
    if (p == 0.5) return 0.0;
    if (p == 0.0) return -INFINITY;
    if (p == 1.0) return INFINITY;
    double q = p < 0.5 ? p : 1.0 - p;   /* one tail, exact */
    /* two tails 2q = I_x(df/2, 1/2), x = df/(df + t^2): logit x = ln(df / t^2) */
    double w = beta_inverse_logit(0.5 * df, 0.5, 2.0 * q, 1.0 - 2.0 * q);
    double t = sqrt(df) * exp(-0.5 * w);
    return p < 0.5 ? -t : t;
}

/* ---- F ------------------------------------------------------------------------------------- */

static void f_tails(double f, double d1, double d2, double *cdf, double *sf)
{
    double dens;
    if (f <= 0.0) { *cdf = 0.0; *sf = 1.0; return; }
    if (isinf(f)) { *cdf = 1.0; *sf = 0.0; return; }
    double u = d1 * f, v = d2;
    beta_tails(0.5 * d1, 0.5 * d2, u / (u + v), v / (u + v), cdf, sf, &dens);
}

double stats_f_cdf(double f, double d1, double d2)
{
    if (isnan(f) || !(d1 > 0.0 && d2 > 0.0)) return NAN;
    double c, s;
    f_tails(f, d1, d2, &c, &s);
    return c;
}

double stats_f_sf(double f, double d1, double d2)
{
    if (isnan(f) || !(d1 > 0.0 && d2 > 0.0)) return NAN;
    double c, s;
    f_tails(f, d1, d2, &c, &s);
    return s;
}

double stats_f_quantile(double p, double d1, double d2)
{
    if (!(p >= 0.0 && p <= 1.0) || !(d1 > 0.0 && d2 > 0.0)) return NAN;
    /* logit x = ln(d1 f / d2) */
    double w = beta_inverse_logit(0.5 * d1, 0.5 * d2, p, 1.0 - p);
    return d2 / d1 * exp(w);
}

/* ---- t tests ------------------------------------------------------------------------------- */

/* P(T_df >= num / se) with se == 0 read as "no spread": 0 when num > 0, else 1. */
static double t_upper_p(double num, double se, double df)
{
    if (se > 0.0) return stats_t_cdf(-num / se, df);
    return num > 0.0 ? 0.0 : 1.0;
}

static void fill_t(stats_ttest *o, size_t n, double df, double est, double se, double alpha)
{
    o->n = n;
    o->df = df;
    o->estimate = est;
    o->se = se;
    if (se > 0.0) {
        o->t = est / se;
        o->p = stats_t_two_sided_p(o->t, df);
    } else {
        o->t = est == 0.0 ? 0.0 : copysign(INFINITY, est);
        o->p = est == 0.0 ? 1.0 : 0.0;
    }
    double half = se > 0.0 ? stats_t_quantile(1.0 - 0.5 * alpha, df) * se : 0.0;
    o->ci_lo = est - half;
    o->ci_hi = est + half;
}

stats_status stats_paired_t(const double *d, size_t n, double alpha, stats_ttest *out)
{
    if (n < 2) return STATS_TOO_FEW;
    if (!all_finite(d, n)) return STATS_NONFINITE;
    if (!alpha_ok(alpha)) return STATS_BAD_ALPHA;
    double se = sqrt(stats_variance(d, n) / (double)n);
    fill_t(out, n, (double)(n - 1), stats_mean(d, n), se, alpha);
    return STATS_OK;
}

stats_status stats_welch_t(const double *x, size_t nx, const double *y, size_t ny, double alpha,
                           stats_ttest *out)
{
    if (nx < 2 || ny < 2) return STATS_TOO_FEW;
    if (!all_finite(x, nx) || !all_finite(y, ny)) return STATS_NONFINITE;
    if (!alpha_ok(alpha)) return STATS_BAD_ALPHA;
    double vx = stats_variance(x, nx) / (double)nx, vy = stats_variance(y, ny) / (double)ny;
    double se2 = vx + vy;
    double df = se2 > 0.0 ? se2 * se2 / (vx * vx / (double)(nx - 1) + vy * vy / (double)(ny - 1))
                          : (double)(nx + ny - 2);
    fill_t(out, nx + ny, df, stats_mean(y, ny) - stats_mean(x, nx), sqrt(se2), alpha);
    return STATS_OK;
}

/* ---- Wilcoxon ------------------------------------------------------------------------------ */

typedef struct { double abs; int sign; } signed_abs;

static int cmp_abs(const void *a, const void *b)
{
    double x = ((const signed_abs *)a)->abs, y = ((const signed_abs *)b)->abs;
    return (x > y) - (x < y);
}

/* Exact null distribution up to this many nonzero differences (counts up to
 * 2^50 stay exact in doubles) and this large a sum of doubled ranks (the
 * table's length: 8 MiB). */
#define WILCOXON_EXACT_MAX 50
#define WILCOXON_TABLE_MAX (1L << 20)

stats_status stats_wilcoxon_signed_rank(const double *d, size_t n, stats_wilcoxon *out)
{
    if (n < 1) return STATS_TOO_FEW;
    if (!all_finite(d, n)) return STATS_NONFINITE;
    signed_abs *v = malloc(n * sizeof *v);
    /* doubled ranks of the nonzero differences: integers */
    long *rank2 = malloc(n * sizeof *rank2);
    if (!v || !rank2) { free(v); free(rank2); return STATS_NO_MEMORY; }
    for (size_t i = 0; i < n; i++) {
        v[i].abs = fabs(d[i]);
        v[i].sign = d[i] > 0.0 ? 1 : d[i] < 0.0 ? -1 : 0;
    }
    qsort(v, n, sizeof *v, cmp_abs);
    stats_wilcoxon o = {.n = n};
    size_t m = 0;                 /* nonzero differences */
    long total2 = 0;              /* sum of their doubled ranks */
    double sum_r2 = 0.0;          /* sum of their squared ranks */
    long w2 = 0;                  /* doubled w_plus */
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && v[j].abs == v[i].abs) j++;
        long r2 = (long)(i + 1 + j);   /* twice the midrank of positions i+1..j */
        for (size_t k = i; k < j; k++) {
            if (v[k].sign == 0) { o.n_zero++; continue; }
            if (j - i > 1) o.n_tied++;
            rank2[m++] = r2;
            total2 += r2;
            sum_r2 += 0.25 * (double)r2 * (double)r2;
            if (v[k].sign > 0) w2 += r2;
        }
        i = j;
    }
    o.w_plus = 0.5 * (double)w2;
    o.null_mean = 0.25 * (double)total2;
    o.null_sd = 0.5 * sqrt(sum_r2);
    o.z = o.null_sd > 0.0 ? (o.w_plus - o.null_mean) / o.null_sd : 0.0;
    stats_status st = STATS_OK;
    if (m == 0) {
        o.p = 1.0;
        o.exact = true;
    } else if (m <= WILCOXON_EXACT_MAX && total2 <= WILCOXON_TABLE_MAX) {
        /* count[s] = number of sign patterns with doubled sum s: at most
         * 2^50, exact in a double */
        double *count = calloc((size_t)total2 + 1, sizeof *count);
        if (!count) st = STATS_NO_MEMORY;
        else {
            count[0] = 1.0;
            long reach = 0;
            for (size_t k = 0; k < m; k++) {
                for (long s = reach; s >= 0; s--)
                    if (count[s] != 0.0) count[s + rank2[k]] += count[s];
                reach += rank2[k];
            }
            double le = 0.0, ge = 0.0;
            for (long s = 0; s <= total2; s++) {
                if (s <= w2) le += count[s];
                if (s >= w2) ge += count[s];
            }
            double scale = ldexp(1.0, -(int)m);
            double p = 2.0 * fmin(le, ge) * scale;
            o.p = p < 1.0 ? p : 1.0;
            o.exact = true;
            free(count);
        }
    } else {
        o.p = erfc(fabs(o.z) * M_SQRT1_2);
        o.exact = false;
    }
    free(v);
    free(rank2);
    if (st == STATS_OK) *out = o;
    return st;
}

/* ---- variance ratio ------------------------------------------------------------------------ */

stats_status stats_pitman_morgan(const double *x, const double *y, size_t n, double alpha,
                                 stats_var_test *out)
{
    if (n < 3) return STATS_TOO_FEW;
    if (!all_finite(x, n) || !all_finite(y, n)) return STATS_NONFINITE;
    if (!alpha_ok(alpha)) return STATS_BAD_ALPHA;
    double *sum = malloc(2 * n * sizeof *sum);
    if (!sum) return STATS_NO_MEMORY;
    double *diff = sum + n;
    for (size_t i = 0; i < n; i++) {
        sum[i] = x[i] + y[i];
        diff[i] = y[i] - x[i];
    }
    double r = stats_correlation(sum, diff, n);
    free(sum);
    double vx = stats_variance(x, n), vy = stats_variance(y, n);
    stats_var_test o = {.n = n, .df1 = (double)(n - 2), .df2 = NAN};
    o.ratio = vy / vx;
    if (isnan(r)) {
        /* a constant sum or difference: y = x + c (ratio 1) or y = -x + c */
        o.r = 0.0;
        o.statistic = 0.0;
        o.p = 1.0;
    } else {
        o.r = r;
        o.statistic = fabs(r) < 1.0 ? r * sqrt((double)(n - 2) / ((1.0 - r) * (1.0 + r))) : copysign(INFINITY, r);
        o.p = stats_t_two_sided_p(o.statistic, o.df1);
    }
    double rho = stats_correlation(x, y, n);
    if (isnan(rho)) rho = 0.0;
    double c = stats_t_quantile(1.0 - 0.5 * alpha, o.df1);
    double k = 1.0 + 2.0 * (1.0 - rho * rho) * c * c / o.df1;
    double root = sqrt((k - 1.0) * (k + 1.0));
    o.ci_lo = o.ratio * (k - root);
    o.ci_hi = o.ratio * (k + root);
    *out = o;
    return STATS_OK;
}

stats_status stats_f_test(const double *x, size_t nx, const double *y, size_t ny, double alpha,
                          stats_var_test *out)
{
    if (nx < 2 || ny < 2) return STATS_TOO_FEW;
    if (!all_finite(x, nx) || !all_finite(y, ny)) return STATS_NONFINITE;
    if (!alpha_ok(alpha)) return STATS_BAD_ALPHA;
    stats_var_test o = {.n = nx + ny, .df1 = (double)(ny - 1), .df2 = (double)(nx - 1), .r = NAN};
    o.ratio = stats_variance(y, ny) / stats_variance(x, nx);
    o.statistic = o.ratio;
    if (isnan(o.ratio)) o.p = 1.0; /* both constant */
    else {
        double c, s;
        f_tails(o.ratio, o.df1, o.df2, &c, &s);
        o.p = fmin(1.0, 2.0 * fmin(c, s));
    }
    o.ci_lo = o.ratio / stats_f_quantile(1.0 - 0.5 * alpha, o.df1, o.df2);
    o.ci_hi = o.ratio / stats_f_quantile(0.5 * alpha, o.df1, o.df2);
    *out = o;
    return STATS_OK;
}

/* ---- TOST ------------------------------------------------------------------------------------ */

stats_status stats_tost_paired(const double *d, size_t n, double margin, double alpha, stats_tost *out)
{
    if (n < 2) return STATS_TOO_FEW;
    if (!all_finite(d, n)) return STATS_NONFINITE;
    if (!(alpha > 0.0 && alpha < 0.5)) return STATS_BAD_ALPHA;
    if (!(isfinite(margin) && margin > 0.0)) return STATS_BAD_MARGIN;
    stats_tost o = {.n = n, .df = (double)(n - 1), .margin = margin};
    o.estimate = stats_mean(d, n);
    o.se = sqrt(stats_variance(d, n) / (double)n);
    o.t_lower = o.se > 0.0 ? (o.estimate + margin) / o.se : copysign(INFINITY, o.estimate + margin);
    o.t_upper = o.se > 0.0 ? (o.estimate - margin) / o.se : copysign(INFINITY, o.estimate - margin);
    o.p_lower = t_upper_p(o.estimate + margin, o.se, o.df);
    o.p_upper = t_upper_p(margin - o.estimate, o.se, o.df);
    o.p = fmax(o.p_lower, o.p_upper);
    double half = o.se > 0.0 ? stats_t_quantile(1.0 - alpha, o.df) * o.se : 0.0;
    o.ci_lo = o.estimate - half;
    o.ci_hi = o.estimate + half;
    o.equivalent = o.p < alpha;
    *out = o;
    return STATS_OK;
}

/* ---- Holm -------------------------------------------------------------------------------------- */

typedef struct { double p; size_t at; } indexed_p;

static int cmp_indexed_p(const void *a, const void *b)
{
    const indexed_p *x = a, *y = b;
    if (x->p != y->p) return (x->p > y->p) - (x->p < y->p);
    return (x->at > y->at) - (x->at < y->at);
}

stats_status stats_holm(const double *p, size_t k, double *adjusted)
{
    if (k == 0) return STATS_TOO_FEW;
    for (size_t i = 0; i < k; i++)
        if (!(p[i] >= 0.0 && p[i] <= 1.0)) return STATS_BAD_P;
    indexed_p *s = malloc(k * sizeof *s);
    if (!s) return STATS_NO_MEMORY;
    for (size_t i = 0; i < k; i++) s[i] = (indexed_p){p[i], i};
    qsort(s, k, sizeof *s, cmp_indexed_p);
    double running = 0.0;
    for (size_t j = 0; j < k; j++) {
        double a = fmin(1.0, (double)(k - j) * s[j].p);
        if (a > running) running = a;
        adjusted[s[j].at] = running;
    }
    free(s);
    return STATS_OK;
}

/* ---- power ------------------------------------------------------------------------------------ */

/* E[fn(S)] for S = sqrt(chi^2_nu / nu), the sd estimate over the true sd,
 * over S < s_max.  In u = ln S the density is
 *   g(u) = 2 (nu/2)^(nu/2) / Gamma(nu/2) exp(nu u - nu e^(2u) / 2),
 * unimodal at u = 0 with sd ~ 1/sqrt(2 nu); the integral runs over the range
 * where ln g is within 46 of its peak, by 10-point Gauss-Legendre on panels
 * of at most half that sd. */
typedef double (*s_integrand)(double s, const void *ctx);

static void gauss_legendre10(double node[10], double weight[10])
{
    /* roots of P_10 by Newton from Chebyshev-like starts; weights 2 / ((1-x^2) P'(x)^2) */
    for (int i = 0; i < 5; i++) {
        double x = cos(M_PI * (i + 0.75) / 10.5), dp = 1.0;
        for (int it = 0; it < 100; it++) {
            double p0 = 1.0, p1 = x;
            for (int k = 2; k <= 10; k++) {
                double p2 = ((2 * k - 1) * x * p1 - (k - 1) * p0) / k;
                p0 = p1;
                p1 = p2;
            }
            dp = 10.0 * (x * p1 - p0) / (x * x - 1.0);
            double dx = p1 / dp;
            x -= dx;
            if (fabs(dx) < 1e-16) break;
        }
        node[i] = -x;
        node[9 - i] = x;
        weight[i] = weight[9 - i] = 2.0 / ((1.0 - x * x) * dp * dp);
    }
}

static double log_s_density(double u, double nu, double log_norm)
{
    return log_norm + nu * (u - 0.5 * expm1(2.0 * u));
}

static double expect_over_s(double nu, s_integrand fn, const void *ctx, double s_max)
{
    /* log_norm: ln g(0) = ln 2 + (nu/2) ln(nu/2) - lgamma(nu/2) - nu/2 */
    double log_norm = M_LN2 + 0.5 * nu * log(0.5 * nu) - lgamma(0.5 * nu) - 0.5 * nu;
    const double drop = 46.0;
    /* phi(u) = u - expm1(2u)/2 <= 0 decreases away from 0 on both sides */
    double lo = -1.0, hi = 1.0;
    while (nu * (lo - 0.5 * expm1(2.0 * lo)) > -drop) lo *= 2.0;
    while (nu * (hi - 0.5 * expm1(2.0 * hi)) > -drop) hi *= 2.0;
    double a = lo, b = 0.0;
    for (int it = 0; it < 60; it++) {
        double mid = 0.5 * (a + b);
        if (nu * (mid - 0.5 * expm1(2.0 * mid)) > -drop) b = mid; else a = mid;
    }
    double u_lo = a;
    a = 0.0; b = hi;
    for (int it = 0; it < 60; it++) {
        double mid = 0.5 * (a + b);
        if (nu * (mid - 0.5 * expm1(2.0 * mid)) > -drop) a = mid; else b = mid;
    }
    double u_hi = b;
    if (s_max < INFINITY) {
        if (!(s_max > 0.0)) return 0.0;
        u_hi = fmin(u_hi, log(s_max));
        if (u_hi <= u_lo) return 0.0;
    }
    double width = 0.5 / sqrt(2.0 * nu);
    int panels = (int)ceil((u_hi - u_lo) / width);
    if (panels < 4) panels = 4;
    if (panels > 400) panels = 400;
    double h = (u_hi - u_lo) / panels;
    double node[10], weight[10];
    gauss_legendre10(node, weight);
    double total = 0.0;
    for (int k = 0; k < panels; k++) {
        double mid = u_lo + (k + 0.5) * h;
        for (int i = 0; i < 10; i++) {
            double u = mid + 0.5 * h * node[i];
            total += weight[i] * exp(log_s_density(u, nu, log_norm)) * fn(exp(u), ctx);
        }
    }
    return 0.5 * h * total;
}

typedef struct { double lambda, c; } t_power_ctx;

static double t_power_integrand(double s, const void *ctx)
{
    const t_power_ctx *k = ctx;
    return stats_normal_cdf(k->lambda - k->c * s) + stats_normal_cdf(-k->lambda - k->c * s);
}

double stats_power_paired_t(size_t n, double shift, double sd_diff, double alpha)
{
    if (n < 2 || !isfinite(shift) || !(isfinite(sd_diff) && sd_diff > 0.0) || !alpha_ok(alpha)) return NAN;
    double nu = (double)(n - 1);
    t_power_ctx k = {shift * sqrt((double)n) / sd_diff, stats_t_quantile(1.0 - 0.5 * alpha, nu)};
    return fmin(1.0, expect_over_s(nu, t_power_integrand, &k, INFINITY));
}

typedef struct { double hi, lo, c; } tost_power_ctx;

static double tost_power_integrand(double s, const void *ctx)
{
    const tost_power_ctx *k = ctx;
    double v = stats_normal_cdf(k->hi - k->c * s) - stats_normal_cdf(k->lo + k->c * s);
    return v > 0.0 ? v : 0.0;
}

double stats_power_tost(size_t n, double true_diff, double margin, double sd_diff, double alpha)
{
    if (n < 2 || !isfinite(true_diff) || !(isfinite(margin) && margin > 0.0) ||
        !(isfinite(sd_diff) && sd_diff > 0.0) || !(alpha > 0.0 && alpha < 0.5))
        return NAN;
    double nu = (double)(n - 1), se = sd_diff / sqrt((double)n);
    tost_power_ctx k = {(margin - true_diff) / se, (-margin - true_diff) / se,
                        stats_t_quantile(1.0 - alpha, nu)};
    /* the acceptance region is empty once c S > margin / se */
    return fmin(1.0, expect_over_s(nu, tost_power_integrand, &k, margin / se / k.c));
}

/* Smallest n in [2, STATS_MAX_RUNS] with power(n) >= target (power
 * increasing in n), or 0 if none.  The search starts at the normal formula's
 * n_guess, usually within a few runs of the answer, and gallops away from it
 * (steps 1, 2, 4, ...) until the answer is bracketed, then bisects: a handful
 * of power evaluations. */
typedef double (*power_of_n)(size_t n, const void *ctx);

static size_t smallest_n(power_of_n power, const void *ctx, double target, double n_guess)
{
    size_t start = n_guess >= STATS_MAX_RUNS ? STATS_MAX_RUNS : n_guess < 2.0 ? 2 : (size_t)ceil(n_guess);
    size_t lo, hi; /* power(lo) < target <= power(hi); lo = 1 stands for "no test" */
    if (power(start, ctx) >= target) {
        hi = start;
        for (size_t step = 1;; step *= 2) {
            if (hi < step + 2) { lo = 1; break; } /* the next candidate would be below 2 */
            size_t cand = hi - step;
            if (power(cand, ctx) < target) { lo = cand; break; }
            hi = cand;
        }
    } else {
        lo = start;
        for (size_t step = 1;; step *= 2) {
            if (lo == STATS_MAX_RUNS) return 0;
            size_t cand = lo + step > STATS_MAX_RUNS ? STATS_MAX_RUNS : lo + step;
            if (power(cand, ctx) >= target) { hi = cand; break; }
            lo = cand;
        }
    }
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (power(mid, ctx) >= target) hi = mid; else lo = mid;
    }
    return hi;
}

typedef struct { double shift, sd, alpha, margin; } runs_ctx;

static double shift_power_of_n(size_t n, const void *ctx)
{
    const runs_ctx *k = ctx;
    return stats_power_paired_t(n, k->shift, k->sd, k->alpha);
}

static double tost_power_of_n(size_t n, const void *ctx)
{
    const runs_ctx *k = ctx;
    return stats_power_tost(n, k->shift, k->margin, k->sd, k->alpha);
}

size_t stats_runs_for_shift(double shift, double sd_diff, double alpha, double power)
{
    if (!(isfinite(shift) && shift != 0.0) || !(isfinite(sd_diff) && sd_diff > 0.0) || !alpha_ok(alpha) ||
        !(power > 0.0 && power < 1.0))
        return 0;
    double z = stats_normal_quantile(1.0 - 0.5 * alpha) + stats_normal_quantile(power);
    double guess = z * z * sd_diff * sd_diff / (shift * shift);
    runs_ctx k = {shift, sd_diff, alpha, 0.0};
    return smallest_n(shift_power_of_n, &k, power, fmin(guess, 2.0 * STATS_MAX_RUNS));
}

size_t stats_runs_for_equivalence(double true_diff, double margin, double sd_diff, double alpha, double power)
{
    if (!isfinite(true_diff) || !(isfinite(margin) && margin > 0.0) || !(isfinite(sd_diff) && sd_diff > 0.0) ||
        !(alpha > 0.0 && alpha < 0.5) || !(power > 0.0 && power < 1.0) || fabs(true_diff) >= margin)
        return 0;
    /* normal formulas: both boundaries equally far (true_diff = 0), or the
     * nearer one alone (true_diff near the margin); the larger is the start */
    double gap = margin - fabs(true_diff), za = stats_normal_quantile(1.0 - alpha);
    double z_near = za + stats_normal_quantile(power), z_both = za + stats_normal_quantile(0.5 + 0.5 * power);
    double guess = fmax(z_near * z_near / (gap * gap), z_both * z_both / (margin * margin)) * sd_diff * sd_diff;
    runs_ctx k = {true_diff, sd_diff, alpha, margin};
    return smallest_n(tost_power_of_n, &k, power, fmin(guess, 2.0 * STATS_MAX_RUNS));
}

/* ---- confidence sequence ----------------------------------------------------------------- */

void stats_cs_start(stats_cs_state *s) { *s = (stats_cs_state){0, 0.0, 0.0}; }

stats_status stats_cs_add(stats_cs_state *s, double d)
{
    if (!isfinite(d)) return STATS_NONFINITE;
    s->n++;
    double delta = d - s->mean;
    s->mean += delta / (double)s->n;
    s->m2 += delta * (d - s->mean);
    return STATS_OK;
}

stats_status stats_cs_interval(const stats_cs_state *s, double alpha, double mixture, stats_cs *out)
{
    if (!alpha_ok(alpha)) return STATS_BAD_ALPHA;
    if (!(isfinite(mixture) && mixture > 0.0)) return STATS_BAD_SPREAD;
    stats_cs o = {.n = s->n, .estimate = s->n ? s->mean : NAN, .lo = -INFINITY, .hi = INFINITY};
    if (s->n >= 2) {
        double n = (double)s->n, r2 = mixture * mixture;
        double log_a = (2.0 * log(alpha) - log1p(n * r2)) / n;
        double g = -expm1(log_a) * (1.0 + n * r2) / r2;
        if (g < n) {
            double radius = sqrt(g * s->m2 / (n * (n - g)));
            o.lo = s->mean - radius;
            o.hi = s->mean + radius;
        }
    }
    *out = o;
    return STATS_OK;
}

double stats_cs_mixture_for(size_t n_opt, double alpha)
{
    if (n_opt == 0 || !alpha_ok(alpha)) return NAN;
    double two_l = -2.0 * log(alpha), r = two_l;
    for (int it = 0; it < 200; it++) {
        double next = two_l + log1p(r);
        if (fabs(next - r) <= 1e-15 * next) { r = next; break; }
        r = next;
    }
    return sqrt(r / (double)n_opt);
}

stats_decision stats_cs_decide(const stats_cs *cs, double margin)
{
    if (cs->lo > 0.0) return STATS_SHIFT_UP;
    if (cs->hi < 0.0) return STATS_SHIFT_DOWN;
    if (cs->lo >= -margin && cs->hi <= margin) return STATS_EQUIVALENT;
    return STATS_UNDECIDED;
}

/* ---- verdict ------------------------------------------------------------------------------- */

stats_status stats_verdict_paired(const double *d, size_t n, double margin, double alpha, double power,
                                  stats_verdict *out)
{
    if (!(power > 0.0 && power < 1.0)) return STATS_BAD_POWER;
    stats_verdict o = {0};
    stats_status st = stats_paired_t(d, n, alpha, &o.test);
    if (st == STATS_OK) st = stats_tost_paired(d, n, margin, alpha, &o.tost);
    if (st != STATS_OK) return st;
    if (o.test.p < alpha) {
        o.decision = o.test.estimate > 0.0 ? STATS_SHIFT_UP : STATS_SHIFT_DOWN;
        o.within_margin = o.tost.equivalent;
    } else if (o.tost.equivalent) {
        o.decision = STATS_EQUIVALENT;
    } else {
        o.decision = STATS_UNDECIDED;
        double sd = o.test.se * sqrt((double)n), est = o.test.estimate;
        if (sd > 0.0)
            o.runs_total = fabs(est) < margin ? stats_runs_for_equivalence(est, margin, sd, alpha, power)
                                              : stats_runs_for_shift(fabs(est), sd, alpha, power);
        if (o.runs_total > 0) o.runs_more = o.runs_total > n ? o.runs_total - n : 1;
    }
    *out = o;
    return STATS_OK;
}
