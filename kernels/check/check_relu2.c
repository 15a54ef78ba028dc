/* kernels/check/check_relu2.c — the checks of relu2 and leaky_relu2
 * (check_activation.c).  Their arithmetic is a max, a product and powers of
 * two, so the bounds are one or two roundings: store_preact rounds dx once
 * (dy f'(x) in fp32, then the store), store_grad twice (the stored g, then
 * dx), and the check shows that second rounding. */
#include <math.h>

#include "kernels/activations.h"
#include "kernels/check/check_activation.h"
#include "kernels/check/checks.h"
#include "reference/relu2.h"

static const prec_format F32 = PREC_FP32;

/* relu2: r = max(x, 0), y = r r, f' = 2 r */
static kval relu_part(kval x) { return x.v > 0 ? x : kval_exact(0.0); }
static kval relu2_f(kval x, int variant) { (void)variant; kval r = relu_part(x); return kval_mul(r, r, F32); }
static kval relu2_df(kval x, int variant) { (void)variant; return kval_mul(kval_exact(2.0), relu_part(x), F32); }
static double relu2_scale(double x) { return x > 0 ? 2 * x : 0.0; }

/* leaky_relu2: r = x > 0 ? x : x/2, y = r r, f' = x > 0 ? 2x : x/2 */
static kval leaky_f(kval x, int variant)
{
    (void)variant;
    kval r = x.v > 0 ? x : kval_mul(kval_exact(0.5), x, F32);
    return kval_mul(r, r, F32);
}
static kval leaky_df(kval x, int variant)
{
    (void)variant;
    return kval_mul(kval_exact(x.v > 0 ? 2.0 : 0.5), x, F32);
}
static double leaky_scale(double x) { return x > 0 ? 2 * x : 0.5 * fabs(x); }

static const kact_check_desc relu2_desc = {
    "relu2", KRELU2_STORE_GRAD, 2.0, krelu2_forward, krelu2_backward, ref_relu2_forward, ref_relu2_backward,
    relu2_f, relu2_df, relu2_scale,
};
static const kact_check_desc leaky_desc = {
    "leaky_relu2", KRELU2_STORE_GRAD, 2.0, kleaky_relu2_forward, kleaky_relu2_backward, ref_leaky_relu2_forward,
    ref_leaky_relu2_backward, leaky_f, leaky_df, leaky_scale,
};

int kcheck_relu2(kcheck_ctx *ctx, kpath path, int variant) { return kcheck_activation(ctx, path, variant, &relu2_desc); }
int kcheck_leaky_relu2(kcheck_ctx *ctx, kpath path, int variant) { return kcheck_activation(ctx, path, variant, &leaky_desc); }

