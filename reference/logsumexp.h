/* reference/logsumexp.h — MPFR reference for log-sum-exp, forward and backward (ref.h conventions). */
#ifndef ULPSCOPE_REFERENCE_LOGSUMEXP_H
#define ULPSCOPE_REFERENCE_LOGSUMEXP_H

#include "reference/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

/* lse[r] = log sum_j exp(x[r][j]) over x[rows][cols]; -inf entries allowed,
 * an all -inf row gives -inf, NaN or +inf in a row give NaN / +inf. */
void ref_logsumexp_forward(ref_ctx *ctx, long rows, long cols, const double *x, double *lse);

/* dx[r][j] = dlse[r] * softmax(x[r])_j, dlse[rows]. */
void ref_logsumexp_backward(ref_ctx *ctx, long rows, long cols, const double *x,
                            const double *dlse, double *dx);

#ifdef __cplusplus
}
#endif
#endif
