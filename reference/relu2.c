/* reference/relu2.c — squared ReLU and squared leaky ReLU(1/2).
 *
 * For inputs of fp32 or narrower formats every result here is exact in
 * double: x^2 and x dy have at most 2 x 24 = 48 significant bits (< 53), and
 * the factors 2, 1/2, 1/4 are powers of two; so plain double arithmetic is
 * the correctly rounded (indeed exact) result that ref.h asks for, barring
 * overflow and underflow, which the ranges of those formats rule out.  The
 * planted truncation of ref_output does not apply (nothing is rounded); a
 * dropped term has no meaning for an elementwise op.  ctx is kept for the
 * common signature. */
#include "reference/relu2.h"

void ref_relu2_forward(ref_ctx *ctx, long n, const double *x, double *y)
{
    (void)ctx;
    for (long i = 0; i < n; i++) {
        double r = x[i] > 0 ? x[i] : 0.0;
        y[i] = r * r;
    }
}

void ref_relu2_backward(ref_ctx *ctx, long n, const double *x, const double *dy, double *dx)
{
    (void)ctx;
    for (long i = 0; i < n; i++) dx[i] = x[i] > 0 ? 2.0 * x[i] * dy[i] : 0.0 * dy[i];
}

void ref_leaky_relu2_forward(ref_ctx *ctx, long n, const double *x, double *y)
{
    (void)ctx;
    for (long i = 0; i < n; i++) {
        double r = x[i] > 0 ? x[i] : 0.5 * x[i];
        y[i] = r * r;
    }
}

void ref_leaky_relu2_backward(ref_ctx *ctx, long n, const double *x, const double *dy, double *dx)
{
    (void)ctx;
    for (long i = 0; i < n; i++) dx[i] = (x[i] > 0 ? 2.0 * x[i] : 0.5 * x[i]) * dy[i];
}
