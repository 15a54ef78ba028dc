/* precision/metrics.c — see metrics.h. */
#include "precision/metrics.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

double prec_abs_err(double x, double ref)
{
    if (isnan(x) || isnan(ref)) return NAN;
    if (x == ref) return 0.0;
    if (isinf(x) || isinf(ref)) return INFINITY;
    return fabs(x - ref); /* inf only when the true value passes DBL_MAX */
}

double prec_rel_err(double x, double ref)
{
    if (isnan(x) || isnan(ref)) return NAN;
    if (x == ref) return 0.0;
    if (isinf(x) || isinf(ref) || ref == 0.0) return INFINITY;
    double diff = x - ref;
    if (isinf(diff)) /* x and ref huge and of opposite sign: halving is exact */
        return fabs(x * 0.5 - ref * 0.5) / fabs(ref * 0.5);
    return fabs(diff) / fabs(ref);
}

/* |v| placed on the step scale of f: the ordinal of the value of f at or
 * below |v| (its bit pattern: positive values of every format here are
 * ordered like their encodings) plus the linear fraction of the way to the
 * next value. */
static void ordinal(double v, prec_format f, uint64_t *steps, double *frac)
{
    const prec_format_info *fi = prec_format_get(f);
    double av = fabs(v);
    double base = av > fi->max_finite ? fi->max_finite
                                      : prec_round(av, f, (prec_rounding){PREC_RZ, PREC_OVF_IEEE, false}, 0);
    *frac = (av - base) / prec_ulp(base, f); /* av - base exact (Sterbenz) below max */
    uint64_t bits = prec_encode(base, f);
    *steps = f == PREC_TF32 ? bits >> 13 : bits;
}

double prec_ulp_distance(double x, double ref, prec_format f)
{
    if (!prec_format_get(f) || isnan(x) || isnan(ref)) return NAN;
    if (x == ref) return 0.0;
    if (isinf(x) || isinf(ref)) return INFINITY;
    uint64_t sx, sr;
    double fx, fr;
    ordinal(x, f, &sx, &fx);
    ordinal(ref, f, &sr, &fr);
    bool nx = x < 0, nr = ref < 0; /* zeros count as either sign: ordinal 0 */
    if (nx != nr && x != 0.0 && ref != 0.0) /* walk through zero */
        return (double)(sx + sr) + (fx + fr); /* sx + sr < 2^64 for every format */
    double d = sx >= sr ? (double)(sx - sr) + (fx - fr) : -(double)(sr - sx) + (fx - fr);
    return fabs(d);
}

double prec_ulp_error(double x, double ref, prec_format f)
{
    if (!prec_format_get(f) || isnan(x) || isnan(ref)) return NAN;
    if (x == ref) return 0.0;
    if (isinf(x) || isinf(ref)) return INFINITY;
    return prec_abs_err(x, ref) / prec_ulp(ref, f);
}

/* First pass over a vector pair: NaN anywhere, an unshared infinity, or a
 * difference that overflows (then every term is halved, exactly for all but
 * subnormals, which cannot matter next to a difference above DBL_MAX). */
typedef enum { PAIR_OK, PAIR_NAN, PAIR_INF } pair_status;

static pair_status scan_pairs(const double *x, const double *ref, size_t n, double *scale)
{
    bool saw_inf = false;
    *scale = 1.0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(x[i]) || isnan(ref[i])) return PAIR_NAN;
        if (isinf(x[i]) || isinf(ref[i])) {
            if (x[i] != ref[i]) saw_inf = true;
            continue;
        }
        if (isinf(x[i] - ref[i])) *scale = 0.5;
    }
    return saw_inf ? PAIR_INF : PAIR_OK;
}

/* Running scaled sum of squares, norm = big * sqrt(ssq): squares neither
 * overflow nor underflow (the LAPACK dnrm2 update). */
typedef struct { double big, ssq; } scaled_ssq;

static void ssq_add(scaled_ssq *acc, double v)
{
    double a = fabs(v);
    if (a == 0.0) return;
    if (acc->big < a) {
        double t = acc->big / a;
        acc->ssq = 1.0 + acc->ssq * t * t;
        acc->big = a;
    } else {
        double t = a / acc->big;
        acc->ssq += t * t;
    }
}

double prec_normwise_rel_err(const double *x, const double *ref, size_t n)
{
    double scale;
    pair_status st = scan_pairs(x, ref, n, &scale);
    if (st == PAIR_NAN) return NAN;
    if (st == PAIR_INF) return INFINITY;
    scaled_ssq diff = {0.0, 1.0}, norm = {0.0, 1.0};
    for (size_t i = 0; i < n; i++) {
        if (isinf(ref[i])) continue; /* shared infinity */
        ssq_add(&diff, x[i] * scale - ref[i] * scale);
        ssq_add(&norm, ref[i] * scale);
    }
    if (diff.big == 0.0) return 0.0;
    if (norm.big == 0.0) return INFINITY;
    return diff.big / norm.big * sqrt(diff.ssq / norm.ssq);
}

double prec_normwise_rel_err_max(const double *x, const double *ref, size_t n)
{
    double scale;
    pair_status st = scan_pairs(x, ref, n, &scale);
    if (st == PAIR_NAN) return NAN;
    if (st == PAIR_INF) return INFINITY;
    double dmax = 0.0, rmax = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(ref[i])) continue;
        dmax = fmax(dmax, fabs(x[i] * scale - ref[i] * scale));
        rmax = fmax(rmax, fabs(ref[i] * scale));
    }
    if (dmax == 0.0) return 0.0;
    if (rmax == 0.0) return INFINITY;
    return dmax / rmax;
}

double prec_correct_bits(double x, double ref, prec_format f)
{
    const prec_format_info *fi = prec_format_get(f);
    if (!fi || isnan(ref)) return NAN;
    if (isnan(x)) return 0.0;
    double rel = prec_rel_err(x, ref);
    if (rel == 0.0) return fi->precision;
    double bits = -log2(rel); /* -inf for rel = inf */
    if (!(bits > 0.0)) return 0.0;
    return bits < fi->precision ? bits : fi->precision;
}
