/* kernels/check/check_relu2.c — the checks of relu2 and leaky_relu2
 * (check_activation.c).  Their arithmetic is a max, a product and powers of
 * two, so the bounds are one or two roundings: store_preact rounds dx once
 * (dy f'(x) in fp32, then the store), store_grad twice (the stored g, then
 * dx), and the check shows that second rounding. */
#include "kernels/activations.h"
#include "kernels/check/check_activation.h"
#include "kernels/check/checks.h"

static const kact_check_desc relu2_desc = {KCMP_RELU2, KRELU2_STORE_GRAD, 2.0, krelu2_forward, krelu2_backward};
static const kact_check_desc leaky_desc = {KCMP_LEAKY_RELU2, KRELU2_STORE_GRAD, 2.0, kleaky_relu2_forward,
                                           kleaky_relu2_backward};

int kcheck_relu2(kcheck_ctx *ctx, kpath path, int variant) { return kcheck_activation(ctx, path, variant, &relu2_desc); }
int kcheck_leaky_relu2(kcheck_ctx *ctx, kpath path, int variant) { return kcheck_activation(ctx, path, variant, &leaky_desc); }
