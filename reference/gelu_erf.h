/* reference/gelu_erf.h — GELU, erf form (see gelu_erf.c). */
#ifndef ULPSCOPE_REFERENCE_GELU_ERF_H
#define ULPSCOPE_REFERENCE_GELU_ERF_H

#include "reference/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = x Phi(x) = x/2 erfc(-x / sqrt 2), elementwise. */
void ref_gelu_erf_forward(ref_ctx *ctx, long n, const double *x, double *y);
/* dx = dy (Phi(x) + x phi(x)), phi(x) = exp(-x^2/2) / sqrt(2 pi). */
void ref_gelu_erf_backward(ref_ctx *ctx, long n, const double *x, const double *dy, double *dx);

#ifdef __cplusplus
}
#endif
#endif
