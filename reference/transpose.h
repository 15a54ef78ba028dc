/* reference/transpose.h — transpose-copy and transpose-add. */
#ifndef ULPSCOPE_REFERENCE_TRANSPOSE_H
#define ULPSCOPE_REFERENCE_TRANSPOSE_H

#include "reference/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

/* x[M][N]; copy: y[N][M] = x^T exactly; add: y[N][M] = y0 + x^T, each element
 * correctly rounded to double (y0 may alias y). */
void ref_transpose_copy(ref_ctx *ctx, long M, long N, const double *x, double *y);
void ref_transpose_add(ref_ctx *ctx, long M, long N, const double *x, const double *y0, double *y);

#ifdef __cplusplus
}
#endif
#endif
