/* kernels/check/check_gelu_tanh.c — gelu_tanh's check
 * (check_activation.c), with the kernel's arithmetic replayed on kvals:
 * fp32 constants, tanhf (2 ulps) or tanh.approx.f32 (2^-10.987 absolute, an
 * upper bound whether the PTX ISA's figure is read as relative or absolute),
 * or expf (2 ulps) in the sigmoid form. */
#include <math.h>

#include "kernels/activations.h"
#include "kernels/check/check_activation.h"
#include "kernels/check/checks.h"
#include "reference/gelu_tanh.h"

static const prec_format F32 = PREC_FP32;
#define K0 0.79788456080286535587989 /* sqrt(2/pi) */
#define K1 0.044715

static double exp_d(double t) { return exp(t); }
static double tanh_d(double t) { return tanh(t); }

static kval tanh_of(kval z, int variant)
{
    if (variant == KGELU_TANH_APPROX) return kval_monotone(z, tanh_d, -INFINITY, INFINITY, 0.0, exp2(-10.987), F32);
    return kval_monotone(z, tanh_d, -INFINITY, INFINITY, 2.0, 0.0, F32);
}

static kval z_of(kval x)
{
    kval x3 = kval_mul(kval_mul(x, x, F32), x, F32);
    return kval_mul(kval_constant(K0, F32), kval_fma(kval_constant(K1, F32), x3, x, F32), F32);
}

static kval mirror_f(kval x, int variant)
{
    kval z = z_of(x), one = kval_exact(1.0);
    if (variant == KGELU_TANH_SIGMOID) {
        kval e = kval_monotone(kval_mul(kval_exact(-2.0), z, F32), exp_d, -INFINITY, INFINITY, 2.0, 0.0, F32);
        return kval_div(x, kval_add(one, e, F32), F32);
    }
    return kval_mul(kval_mul(kval_exact(0.5), x, F32), kval_add(one, tanh_of(z, variant), F32), F32);
}

static kval mirror_df(kval x, int variant)
{
    kval one = kval_exact(1.0), half = kval_exact(0.5);
    kval x2 = kval_mul(x, x, F32);
    kval z = kval_mul(kval_constant(K0, F32), kval_fma(kval_constant(K1, F32), kval_mul(x2, x, F32), x, F32), F32);
    kval k13 = kval_mul(kval_exact(3.0), kval_constant(K1, F32), F32);
    kval dz = kval_mul(kval_constant(K0, F32), kval_fma(k13, x2, one, F32), F32);
    if (variant == KGELU_TANH_SIGMOID) {
        kval e = kval_monotone(kval_mul(kval_exact(-2.0), z, F32), exp_d, -INFINITY, INFINITY, 2.0, 0.0, F32);
        kval s = kval_div(one, kval_add(one, e, F32), F32);
        kval t = kval_mul(kval_mul(kval_mul(kval_exact(2.0), x, F32), dz, F32), s, F32);
        return kval_add(s, kval_mul(t, kval_sub(one, s, F32), F32), F32);
    }
    kval t = tanh_of(z, variant);
    kval a = kval_mul(half, kval_add(one, t, F32), F32);
    kval b = kval_mul(kval_mul(kval_mul(half, x, F32), kval_sub(one, kval_mul(t, t, F32), F32), F32), dz, F32);
    return kval_add(a, b, F32);
}

/* |(1 + t)/2| + |x/2 (1 - t^2) dz| with 1 + tanh z = 2 / (1 + e^-2z) and
 * 1 - tanh^2 z = 4 / (e^z + e^-z)^2, which do not cancel for large |z|. */
static double df_scale(double x)
{
    double z = K0 * (x + K1 * x * x * x), dz = K0 * (1 + 3 * K1 * x * x);
    double one_plus_t = 2.0 / (1.0 + exp(-2.0 * z)), ch = exp(z) + exp(-z);
    return 0.5 * one_plus_t + fabs(0.5 * x * dz) * 4.0 / (ch * ch);
}

static int gelu_forward(ktensor *y, ktensor *grad, const ktensor *x, int variant)
{
    (void)grad;
    return kgelu_tanh_forward(y, x, variant);
}

static const kact_check_desc desc = {
    "gelu_tanh", -1, 2.0, gelu_forward, kgelu_tanh_backward, ref_gelu_tanh_forward, ref_gelu_tanh_backward,
    mirror_f, mirror_df, df_scale,
};

int kcheck_gelu_tanh(kcheck_ctx *ctx, kpath path, int variant)
{
    return kcheck_activation(ctx, path, variant, &desc);
}

