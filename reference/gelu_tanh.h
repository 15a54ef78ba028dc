/* reference/gelu_tanh.h — GELU, tanh form (see gelu_tanh.c). */
#ifndef ULPSCOPE_REFERENCE_GELU_TANH_H
#define ULPSCOPE_REFERENCE_GELU_TANH_H

#include "reference/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = x/2 (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3), elementwise. */
void ref_gelu_tanh_forward(ref_ctx *ctx, long n, const double *x, double *y);
/* dx = dy (1/2 (1 + tanh z) + x/2 (1 - tanh^2 z) sqrt(2/pi) (1 + 3 * 0.044715 x^2)). */
void ref_gelu_tanh_backward(ref_ctx *ctx, long n, const double *x, const double *dy, double *dx);

#ifdef __cplusplus
}
#endif
#endif
