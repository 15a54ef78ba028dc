/* reference/residual.h — residual add. */
#ifndef ULPSCOPE_REFERENCE_RESIDUAL_H
#define ULPSCOPE_REFERENCE_RESIDUAL_H

#include "reference/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = a + b elementwise, correctly rounded to double. */
void ref_residual_forward(ref_ctx *ctx, long n, const double *a, const double *b, double *y);

#ifdef __cplusplus
}
#endif
#endif
