/* reference/layernorm.h — MPFR reference for LayerNorm, forward and backward (ref.h conventions). */
#ifndef ULPSCOPE_REFERENCE_LAYERNORM_H
#define ULPSCOPE_REFERENCE_LAYERNORM_H

#include "reference/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per row of x[rows][cols] (PyTorch's definition: biased variance, eps inside
 * the square root):
 *   mu = mean(x),  var = mean((x - mu)^2),  rstd = 1/sqrt(var + eps),
 *   xhat = (x - mu) rstd,  y = gamma xhat + beta.
 * gamma, beta [cols] may be NULL (meaning 1 and 0).  mean, rstd [rows] may
 * be NULL; when given they receive the correctly rounded statistics.  eps is
 * the double the kernel used: (double)1e-5f for an fp32 eps of 1e-5. */
void ref_layernorm_forward(ref_ctx *ctx, long rows, long cols, const double *x,
                           const double *gamma, const double *beta, double eps,
                           double *y, double *mean, double *rstd);

/* Backward, with g = gamma dy (per row, means over cols):
 *   dx = rstd (g - mean(g) - xhat mean(g xhat)),
 *   dgamma[c] = sum_r dy[r][c] xhat[r][c],  dbeta[c] = sum_r dy[r][c].
 * The statistics come from x exactly (not from a kernel's stored mean/rstd).
 * gamma may be NULL (1); dx [rows][cols], dgamma and dbeta [cols] may each be
 * NULL when not wanted. */
void ref_layernorm_backward(ref_ctx *ctx, long rows, long cols, const double *x,
                            const double *gamma, const double *dy, double eps,
                            double *dx, double *dgamma, double *dbeta);

#ifdef __cplusplus
}
#endif
#endif
