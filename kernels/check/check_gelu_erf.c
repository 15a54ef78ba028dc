/* kernels/check/check_gelu_erf.c — gelu_erf's check
 * (check_activation.c): erff (2 ulps) or normcdff (5 ulps), expf (2 ulps)
 * for phi in the backward, fp32 constants. */
#include <math.h>

#include "kernels/activations.h"
#include "kernels/check/check_activation.h"
#include "kernels/check/checks.h"
#include "reference/gelu_erf.h"

static const prec_format F32 = PREC_FP32;
#define INV_SQRT2 0.70710678118654752440
#define INV_SQRT2PI 0.39894228040143267794

static double exp_d(double t) { return exp(t); }
static double erf_d(double t) { return erf(t); }
static double phi_cdf(double t) { return 0.5 * erfc(-t * INV_SQRT2); }

static kval cdf_of(kval x, int variant)
{
    if (variant == KGELU_ERF_NORMCDF) return kval_monotone(x, phi_cdf, -INFINITY, INFINITY, 5.0, 0.0, F32);
    kval e = kval_monotone(kval_mul(x, kval_constant(INV_SQRT2, F32), F32), erf_d, -INFINITY, INFINITY, 2.0, 0.0, F32);
    return kval_mul(kval_exact(0.5), kval_add(kval_exact(1.0), e, F32), F32);
}

static kval mirror_f(kval x, int variant)
{
    if (variant == KGELU_ERF_NORMCDF) return kval_mul(x, cdf_of(x, variant), F32);
    kval e = kval_monotone(kval_mul(x, kval_constant(INV_SQRT2, F32), F32), erf_d, -INFINITY, INFINITY, 2.0, 0.0, F32);
    return kval_mul(kval_mul(kval_exact(0.5), x, F32), kval_add(kval_exact(1.0), e, F32), F32);
}

static kval mirror_df(kval x, int variant)
{
    kval arg = kval_mul(kval_mul(kval_exact(-0.5), x, F32), x, F32);
    kval pdf = kval_mul(kval_monotone(arg, exp_d, -INFINITY, INFINITY, 2.0, 0.0, F32), kval_constant(INV_SQRT2PI, F32), F32);
    return kval_add(cdf_of(x, variant), kval_mul(x, pdf, F32), F32);
}

static double df_scale(double x) { return phi_cdf(x) + fabs(x) * exp(-0.5 * x * x) * INV_SQRT2PI; }

static int gelu_forward(ktensor *y, ktensor *grad, const ktensor *x, int variant)
{
    (void)grad;
    return kgelu_erf_forward(y, x, variant);
}

static const kact_check_desc desc = {
    "gelu_erf", -1, 2.0, gelu_forward, kgelu_erf_backward, ref_gelu_erf_forward, ref_gelu_erf_backward,
    mirror_f, mirror_df, df_scale,
};

int kcheck_gelu_erf(kcheck_ctx *ctx, kpath path, int variant) { return kcheck_activation(ctx, path, variant, &desc); }

