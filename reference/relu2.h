/* reference/relu2.h — squared ReLU and squared leaky ReLU (slope 1/2). */
#ifndef ULPSCOPE_REFERENCE_RELU2_H
#define ULPSCOPE_REFERENCE_RELU2_H

#include "reference/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = max(x, 0)^2;  dx = 2 max(x, 0) dy. */
void ref_relu2_forward(ref_ctx *ctx, long n, const double *x, double *y);
void ref_relu2_backward(ref_ctx *ctx, long n, const double *x, const double *dy, double *dx);
/* y = (x > 0 ? x : x/2)^2;  dx = (x > 0 ? 2x : x/2) dy. */
void ref_leaky_relu2_forward(ref_ctx *ctx, long n, const double *x, double *y);
void ref_leaky_relu2_backward(ref_ctx *ctx, long n, const double *x, const double *dy, double *dx);

#ifdef __cplusplus
}
#endif
#endif
