/* kernels/check/check_gelu_erf.c — gelu_erf's check (check_activation.c):
 * the variants' erff (2 ulps) or normcdff (5 ulps), expf (2 ulps) for phi
 * in the backward, replayed by compare_activation.c. */
#include "kernels/activations.h"
#include "kernels/check/check_activation.h"
#include "kernels/check/checks.h"

static int gelu_forward(ktensor *y, ktensor *grad, const ktensor *x, int variant)
{
    (void)grad;
    return kgelu_erf_forward(y, x, variant);
}

static const kact_check_desc desc = {KCMP_GELU_ERF, -1, 2.0, gelu_forward, kgelu_erf_backward};

int kcheck_gelu_erf(kcheck_ctx *ctx, kpath path, int variant) { return kcheck_activation(ctx, path, variant, &desc); }
