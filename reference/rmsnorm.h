/* reference/rmsnorm.h — MPFR reference for RMSNorm, forward and backward (ref.h conventions). */
#ifndef ULPSCOPE_REFERENCE_RMSNORM_H
#define ULPSCOPE_REFERENCE_RMSNORM_H

#include "reference/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per row of x[rows][cols]:
 *   rstd = 1/sqrt(mean(x^2) + eps),  y = gamma x rstd,
 * gamma [cols] NULL meaning no gain (y = x rstd).  rstd [rows] may be NULL. */
void ref_rmsnorm_forward(ref_ctx *ctx, long rows, long cols, const double *x,
                         const double *gamma, double eps, double *y, double *rstd);

/* Backward, with g = gamma dy:
 *   dx = rstd g - rstd^3 x mean(g x),   dgamma[c] = sum_r dy[r][c] x[r][c] rstd[r].
 * dx and dgamma may each be NULL (dgamma is meaningless without a gain). */
void ref_rmsnorm_backward(ref_ctx *ctx, long rows, long cols, const double *x,
                          const double *gamma, const double *dy, double eps,
                          double *dx, double *dgamma);

#ifdef __cplusplus
}
#endif
#endif
