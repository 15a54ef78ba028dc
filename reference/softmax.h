/* reference/softmax.h — MPFR reference for softmax, forward and backward (ref.h conventions). */
#ifndef ULPSCOPE_REFERENCE_SOFTMAX_H
#define ULPSCOPE_REFERENCE_SOFTMAX_H

#include "reference/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Over each row of x[rows][cols]:
 *   y_i = exp(x_i - m) / sum_j exp(x_j - m),  m = max_j x_j.
 * x may hold -inf (masked entries: y = 0); a row of only -inf, or a row
 * holding NaN or +inf, gives NaN across the row (as PyTorch does). */
void ref_softmax_forward(ref_ctx *ctx, long rows, long cols, const double *x, double *y);

/* Backward from what a kernel holds, the stored forward output y[rows][cols]
 * and the incoming gradient dy[rows][cols]:
 *   dx_i = y_i (dy_i - sum_j y_j dy_j). */
void ref_softmax_backward(ref_ctx *ctx, long rows, long cols, const double *y, const double *dy,
                          double *dx);

#ifdef __cplusplus
}
#endif
#endif
