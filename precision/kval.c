/* precision/kval.c — see kval.h. */
#include "precision/kval.h"

#include <math.h>

#include "precision/bounds.h"

double kval_gamma(int64_t k, double u) { return prec_gamma((double)k, u); }

/* lambda for a failure probability of 1e-9 per bound with up to 2^40 terms
 * (prec_prob_lambda: 2 m exp(-lambda^2 (1-u)^2 / 2) = fail_prob): about 9.9. */
double kval_gamma_prob(int64_t k, double u)
{
    double lambda = prec_prob_lambda(0x1p40, 1e-9, u);
    double g = prec_gamma_tilde((double)k, lambda, u), det = kval_gamma(k, u);
    return g < det ? g : det; /* never looser than the worst case */
}

static double format_u(prec_format f) { return f == PREC_FP64 ? 0.0 : prec_format_get(f)->unit_roundoff; }
static double format_eta(prec_format f) { return f == PREC_FP64 ? 0.0 : 0.5 * prec_format_get(f)->min_subnormal; }

kval kval_round(kval a, prec_format f)
{
    double u = format_u(f), eta = format_eta(f);
    kval r = a;
    r.e = a.e + u * (fabs(a.v) + a.e) + eta;
    r.p = a.p + u * (fabs(a.v) + a.p) + eta;
    return r;
}

kval kval_add(kval a, kval b, prec_format f)
{
    kval r = {a.v + b.v, a.e + b.e, a.p + b.p};
    return kval_round(r, f);
}

kval kval_sub(kval a, kval b, prec_format f) { return kval_add(a, kval_neg(b), f); }

kval kval_neg(kval a)
{
    a.v = -a.v;
    return a;
}

kval kval_constant(double c, prec_format f)
{
    double err = fabs(prec_rne(c, f) - c);
    kval k = {c, err, err};
    return k;
}

static double mul_prop(double a, double ea, double b, double eb) { return fabs(a) * eb + fabs(b) * ea + ea * eb; }

kval kval_mul(kval a, kval b, prec_format f)
{
    kval r = {a.v * b.v, mul_prop(a.v, a.e, b.v, b.e), mul_prop(a.v, a.p, b.v, b.p)};
    return kval_round(r, f);
}

static double div_prop(double a, double ea, double b, double eb)
{
    double den = fabs(b) * (fabs(b) - eb);
    return den > 0 ? (fabs(a) * eb + fabs(b) * ea) / den : INFINITY;
}

kval kval_div(kval a, kval b, prec_format f)
{
    kval r = {a.v / b.v, div_prop(a.v, a.e, b.v, b.e), div_prop(a.v, a.p, b.v, b.p)};
    return kval_round(r, f);
}

kval kval_fma(kval a, kval b, kval c, prec_format f)
{
    kval r = {a.v * b.v + c.v, mul_prop(a.v, a.e, b.v, b.e) + c.e, mul_prop(a.v, a.p, b.v, b.p) + c.p};
    return kval_round(r, f);
}

kval kval_max(kval a, kval b)
{
    kval r = {a.v > b.v ? a.v : b.v, a.e > b.e ? a.e : b.e, a.p > b.p ? a.p : b.p};
    return r;
}

/* Largest |f(x) - f(v)| over x in [v - e, v + e] clipped to [lo, hi], for a
 * monotone f: attained at an end of the interval. */
static double monotone_spread(double (*f)(double), double v, double e, double lo, double hi, double fv)
{
    if (e == 0) return 0;
    double x0 = v - e < lo ? lo : v - e, x1 = v + e > hi ? hi : v + e;
    double d0 = fabs(f(x0) - fv), d1 = fabs(f(x1) - fv);
    double d = d0 > d1 ? d0 : d1;
    return isnan(d) ? INFINITY : d;
}

/* Error of an implementation within `ulps` ulps (in fmt) of the exact function
 * at its computed argument, whose value is at most mag in magnitude. */
static double impl_error(double mag, double ulps, double abs_err, prec_format fmt)
{
    if (fmt == PREC_FP64) return abs_err;
    const prec_format_info *fi = prec_format_get(fmt);
    /* ulp(y) <= 2u|y| for normal y, and min_subnormal below the normal range */
    return ulps * (2 * fi->unit_roundoff * mag + fi->min_subnormal) + abs_err;
}

kval kval_monotone(kval a, double (*f)(double), double lo, double hi, double ulps, double abs_err,
                   prec_format fmt)
{
    double fv = f(a.v);
    double de = monotone_spread(f, a.v, a.e, lo, hi, fv), dp = monotone_spread(f, a.v, a.p, lo, hi, fv);
    kval r = {fv, de + impl_error(fabs(fv) + de, ulps, abs_err, fmt), dp + impl_error(fabs(fv) + dp, ulps, abs_err, fmt)};
    return r;
}

kval kval_lipschitz(kval a, double (*f)(double), double lipschitz, double ulps, double abs_err,
                    prec_format fmt)
{
    double fv = f(a.v);
    double de = lipschitz * a.e, dp = lipschitz * a.p;
    kval r = {fv, de + impl_error(fabs(fv) + de, ulps, abs_err, fmt), dp + impl_error(fabs(fv) + dp, ulps, abs_err, fmt)};
    return r;
}

void kval_sum_add(kval_sum *s, kval t)
{
    s->v += t.v;
    s->abs += fabs(t.v) + t.e;
    s->e += t.e;
    s->p += t.p;
}

/* Additions never underflow (a sum in the subnormal range is exact), so only
 * u enters: |computed - exact| <= sum e_k + gamma_depth * sum (|v_k| + e_k). */
kval kval_sum_finish(const kval_sum *s, int64_t depth, prec_format f)
{
    double u = format_u(f);
    kval r = {s->v, s->e + kval_gamma(depth, u) * s->abs, s->p + kval_gamma_prob(depth, u) * s->abs};
    return r;
}
