/* kernels/check/check_kexp.c — see check_kexp.h. */
#include "kernels/check/check_kexp.h"

#include <math.h>

static const prec_format F32 = PREC_FP32;

/* A constant rounded to fp32: its value is the exact constant, its error the
 * distance to the float the kernel holds. */
static kval fp32_constant(double c)
{
    double cf = (double)(float)c;
    kval k = {c, fabs(cf - c), fabs(cf - c)};
    return k;
}

static double exp2_d(double t) { return exp2(t); }
static double exp_d(double t) { return exp(t); }
static double log_d(double t) { return log(t); }
static double log2_d(double t) { return log2(t); }

kval kcheck_exp_shifted(double x, kval m, int variant)
{
    if (variant == KCHECK_EXP2) {
        kval L = fp32_constant(1.44269504088896340736);
        kval mL = kval_mul(m, L, F32);
        kval t = kval_fma(kval_exact(x), L, kval_neg(mL), F32);
        return kval_monotone(t, exp2_d, -INFINITY, INFINITY, 2.0, 0.0, F32);
    }
    kval d = kval_sub(kval_exact(x), m, F32);
    double ulps = 2.0;
    if (variant == KCHECK_FAST_EXP) ulps = 2.0 + floor(1.173 * (fabs(d.v) + d.e));
    return kval_monotone(d, exp_d, -INFINITY, INFINITY, ulps, 0.0, F32);
}

kval kcheck_log_shifted(kval s, kval m, int variant)
{
    kval l;
    if (variant == KCHECK_EXP2) {
        kval l2 = kval_monotone(s, log2_d, 0.0, INFINITY, 1.0, 0.0, F32);
        l = kval_mul(l2, fp32_constant(0.693147180559945309417), F32);
    } else if (variant == KCHECK_FAST_EXP) {
        int near_one = s.v - s.e >= 0.5 && s.v + s.e <= 2.0;
        l = kval_monotone(s, log_d, 0.0, INFINITY, near_one ? 0.0 : 3.0, near_one ? exp2(-21.41) : 0.0, F32);
    } else {
        l = kval_monotone(s, log_d, 0.0, INFINITY, 1.0, 0.0, F32);
    }
    return kval_add(m, l, F32);
}
