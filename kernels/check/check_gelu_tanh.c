/* kernels/check/check_gelu_tanh.c — gelu_tanh's check (check_activation.c):
 * the variants' tanhf (2 ulps), tanh.approx.f32 (2^-10.987 absolute) and
 * sigmoid form (expf, 2 ulps) replayed by compare_activation.c. */
#include "kernels/activations.h"
#include "kernels/check/check_activation.h"
#include "kernels/check/checks.h"

static int gelu_forward(ktensor *y, ktensor *grad, const ktensor *x, int variant)
{
    (void)grad;
    return kgelu_tanh_forward(y, x, variant);
}

static const kact_check_desc desc = {KCMP_GELU_TANH, -1, 2.0, gelu_forward, kgelu_tanh_backward};

int kcheck_gelu_tanh(kcheck_ctx *ctx, kpath path, int variant)
{
    return kcheck_activation(ctx, path, variant, &desc);
}
