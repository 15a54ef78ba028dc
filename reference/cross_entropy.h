/* reference/cross_entropy.h — MPFR reference for cross-entropy over the
 * vocabulary (ref.h conventions), the reference of kernels/cross_entropy.cu.
 *
 * Per row i of N with target t_i (negative: ignored, loss and gradients 0):
 *   lse_i = log sum_j exp(z_ij),  loss_i = lse_i - z_i,t_i,
 *   dz_ij = (exp(z_ij - lse_i) - [j == t_i]) dloss
 * losses [N], dlogits [N,V] (NULL: skip) correctly rounded to double.
 * With a logit soft-cap c > 0 (0: none) each logit l first becomes
 * z = c tanh(l / c), and dz_ij above is multiplied by dz/dl = 1 - tanh^2(l / c).
 *
 * ref_linear_cross_entropy: z = h W^T with h [N,C], W [V,C]; the logits are
 * exact (superaccumulator), losses and dlogits correctly rounded; then
 *   dh = dz W [N,C],  dW = dz^T h [V,C]
 * are the exact sums of the correctly rounded dz: each within
 * 2^-53 sum |dz W| (resp. sum |dz h|) of the exact gradient plus its own
 * final rounding (the checks add that term to their bounds), which avoids
 * N*V*C ball operations. */
#ifndef ULPSCOPE_REFERENCE_CROSS_ENTROPY_H
#define ULPSCOPE_REFERENCE_CROSS_ENTROPY_H

#include <stdint.h>

#include "reference/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

void ref_cross_entropy(ref_ctx *ctx, long N, long V, const double *logits, const int32_t *targets, double softcap,
                       double dloss, double *losses, double *dlogits);

void ref_linear_cross_entropy(ref_ctx *ctx, long N, long C, long V, const double *h, const double *W,
                              const int32_t *targets, double dloss, double *losses, double *dlogits, double *dh,
                              double *dW);

#ifdef __cplusplus
}
#endif
#endif
